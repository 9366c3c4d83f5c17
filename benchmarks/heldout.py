"""Build a held-out code-search corpus and evaluation set from installed Python packages.

Nothing here was seen while designing situate: the queries are the first sentences of function
and class docstrings, the golden chunk is the one holding that definition, and those docstrings
are removed from the corpus (so a query cannot match its own words verbatim). Module docstrings
stay, as a real repository has them. The result is a directory corpus (chunked by situate) and an
evaluation set with `golden_quotes`.

    .venv/bin/python benchmarks/heldout.py OUT_DIR [--packages tenacity diskcache pydantic_settings]
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import json
import re
from pathlib import Path

DEFAULT_PACKAGES = ("tenacity", "diskcache", "pydantic_settings")


def first_sentence(doc: str) -> str:
    text = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return (m.group(1) if m else text).strip()


def strip_and_collect(source: str) -> tuple[str, list[tuple[str, str]]]:
    """The source without definition docstrings, and (query, definition line) pairs."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    pairs: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        doc = ast.get_docstring(node)
        if not doc or not node.body:
            continue
        query = first_sentence(doc)
        if len(query.split()) < 5 or node.name.startswith("__"):
            continue
        expr = node.body[0]
        if len(node.body) == 1:
            continue  # removing the docstring would leave an empty body
        drop.update(range(expr.lineno - 1, expr.end_lineno))
        def_line = lines[node.lineno - 1].strip()
        pairs.append((query, def_line))
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    return kept, pairs


def build(out: Path, packages: list[str]) -> dict:
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    queries: list[dict] = []
    versions = {}
    for name in packages:
        module = importlib.import_module(name)
        root = Path(module.__file__).parent
        try:
            versions[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "?"
        for f in sorted(root.rglob("*.py")):
            rel = f"{name}/{f.relative_to(root).as_posix()}"
            try:
                kept, pairs = strip_and_collect(f.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            if not kept.strip():
                continue
            target = corpus / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(kept, encoding="utf-8")
            seen = set()
            for query, def_line in pairs:
                if kept.count(def_line) != 1 or query in seen:
                    continue  # ambiguous definition line, or a repeated docstring
                seen.add(query)
                queries.append({"query": query, "golden_quotes": [{"doc_id": rel, "quote": def_line}]})
    (out / "eval.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return {"packages": versions, "queries": len(queries),
            "files": sum(1 for _ in corpus.rglob("*.py"))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--packages", nargs="+", default=list(DEFAULT_PACKAGES))
    args = ap.parse_args()
    print(json.dumps(build(Path(args.out), args.packages)))


if __name__ == "__main__":
    main()
