"""Build a held-out code-search corpus and evaluation set from installed Python packages.

Nothing here was seen while designing situate: the queries are the first sentences of function
and class docstrings, the golden chunk is the one holding that definition, and those docstrings
are removed from the corpus (so a query cannot match its own words verbatim). Module docstrings
stay, as a real repository has them. The result is a directory corpus (chunked by situate) and an
evaluation set with `golden_quotes`.

`--markdown DIR` builds a prose set the same way from Markdown documentation (every `*.md` under
DIR of at most `--max-bytes`): the query is the first sentence of a section's first paragraph,
the golden chunk the one holding the section's heading, and that sentence is removed from the
corpus. Node.js's API reference as Debian installs it (/usr/share/doc/nodejs/api) is the one used
in BENCHMARKS.md.

    .venv/bin/python benchmarks/heldout.py OUT_DIR [--packages tenacity diskcache pydantic_settings]
    .venv/bin/python benchmarks/heldout.py OUT_DIR --markdown /usr/share/doc/nodejs/api
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


HEADING = re.compile(r"#{2,6} \S")


def strip_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The Markdown without each section's first sentence, and (query, heading line) pairs.

    A section's first paragraph is its first run of plain text lines after the heading: HTML
    comments, code fences, block quotes, lists and tables are skipped over. Its first sentence
    becomes the query when it has at least six words."""
    lines = text.splitlines(keepends=True)
    pairs: list[tuple[str, str]] = []
    fence = False
    heading = ""
    comment = False
    for i, line in enumerate(lines):
        bare = line.strip()
        if bare.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        if comment or bare.startswith("<!--"):
            comment = "-->" not in bare
            continue
        if HEADING.match(bare):
            heading = bare
            continue
        if not heading or not bare or bare[0] in "*->|#<[" or bare[0].isdigit():
            continue
        end = next((j for j in range(i + 1, len(lines)) if not lines[j].strip()), len(lines))
        paragraph = " ".join("".join(lines[i:end]).split())
        query = first_sentence(paragraph)
        if len(query.split()) >= 6:  # the paragraph, joined on one line, without the sentence
            lines[i:end] = [paragraph[len(query):].strip() + "\n"] + [""] * (end - i - 1)
            pairs.append((query, heading))
        heading = ""  # one query a section: its first paragraph
    return "".join(lines), pairs


def build_markdown(out: Path, source: Path, max_bytes: int) -> dict:
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    queries: list[dict] = []
    files = [f for f in sorted(source.rglob("*.md")) if f.stat().st_size <= max_bytes]
    for f in files:
        rel = f.relative_to(source).as_posix()
        kept, pairs = strip_sections(f.read_text(encoding="utf-8"))
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text(kept, encoding="utf-8")
        seen = set()
        for query, heading in pairs:
            if kept.count(heading) != 1 or query in seen:
                continue
            seen.add(query)
            queries.append({"query": query, "golden_quotes": [{"doc_id": rel, "quote": heading}]})
    (out / "eval.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return {"markdown": str(source), "max_bytes": max_bytes, "queries": len(queries),
            "files": len(files)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--packages", nargs="+", default=list(DEFAULT_PACKAGES))
    ap.add_argument("--markdown", type=Path, help="build a prose set from this Markdown tree instead")
    ap.add_argument("--max-bytes", type=int, default=40_000, help="skip larger Markdown files")
    args = ap.parse_args()
    if args.markdown:
        print(json.dumps(build_markdown(Path(args.out), args.markdown, args.max_bytes)))
    else:
        print(json.dumps(build(Path(args.out), args.packages)))


if __name__ == "__main__":
    main()
