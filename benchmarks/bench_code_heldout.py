"""Syntax-aware against text chunking of source code, on held-out corpora (the rule and its
corpora are fixed in /work/notes/codechunk-rule.md, written before any measurement).

Each corpus is built into a temporary directory by inverse cloze: a definition's docstring (Python)
or JSDoc comment (JavaScript) is taken out of the file and its first sentence becomes the query;
the golden chunk is the one that holds the definition's first line, matched by situate's own
`golden_quotes` rule (same document, the quote contained in the chunk). The documentation is gone
from the indexed corpus, so a query cannot find its own words. 200 queries a corpus, seeded.

Then the same corpus is cut twice, by today's `chunk_text` and by `chunk_code` (falling back to
`chunk_text` where it returns None, as the loader does), and each cut goes through situate's
pipeline pieces: the structural (or no) context, the default embedder (MiniLM, CPU), Milvus Lite
rows written by `MilvusStore.write`, and `retrieve` in dense, BM25 and hybrid (cdbsf) modes,
scored by `golden_ranks`/`pass_at_k_of_ranks` as `situate evaluate` scores them.

    .venv/bin/python benchmarks/bench_code_heldout.py [--corpora py-a js-b] [--contexts structural]
        [--out benchmarks/results/code-heldout.json]

Corpora: `py-a` (rich, markdown), `js-b` (the JavaScript packages npm bundles,
/usr/lib/node_modules/npm, those with at least 5 documented definitions and under 0.5 M characters;
at most 30 queries a package; a query repeated in two files, as in packages shipping several builds,
is dropped), `py-c` (griffe, websockets: the third corpus, held back for a re-measure after a
change to the chunker).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from heldout import first_sentence, strip_and_collect  # noqa: E402

from situate.core.records import Chunk, Document, EmbeddedDocument, Situated  # noqa: E402
from situate.tasks.corpus.chunking import chunk_text  # noqa: E402
from situate.tasks.corpus.code import chunk_code  # noqa: E402

SEED = 20261125
QUERIES = 200
SIZE, OVERLAP = 800, 100
KS = (5, 10, 20)
MODES = ("dense", "bm25", "hybrid")
NPM = Path("/usr/lib/node_modules/npm")
PYTHON_CORPORA = {"py-a": ("rich", "markdown"), "py-c": ("griffe", "websockets")}
# npm packages whose JSDoc gives at least this many queries, up to this size (undici, 0.9 M
# characters of HTTP client, is left out by it); at most JS_PER_PACKAGE queries from one package.
JS_MIN_QUERIES = 5
JS_MAX_CHARS = 500_000
JS_PER_PACKAGE = 30
JS_SUFFIXES = (".js", ".cjs", ".mjs")


# --- corpora -------------------------------------------------------------------------------------

def _sample(queries: list[dict[str, Any]], per_group: int = 0) -> list[dict[str, Any]]:
    """Queries whose text is not repeated anywhere in the corpus, then a seeded sample of
    QUERIES; with `per_group`, at most that many from one group (a query's "group" key)."""
    counts = Counter(q["query"] for q in queries)
    unique = [q for q in queries if counts[q["query"]] == 1]
    rng = random.Random(SEED)
    if per_group:
        rng.shuffle(unique)
        taken: Counter[str] = Counter()
        capped = []
        for q in unique:
            if taken[q["group"]] < per_group:
                taken[q["group"]] += 1
                capped.append(q)
        unique = capped
    chosen = unique if len(unique) <= QUERIES else rng.sample(unique, QUERIES)
    return [{k: v for k, v in q.items() if k != "group"} for q in chosen]


def build_python(out: Path, packages: tuple[str, ...]) -> dict[str, Any]:
    """Installed packages, docstrings of functions and classes out (benchmarks/heldout.py's
    rules: a first sentence of at least five words, a definition line unique in its file)."""
    corpus = out / "corpus"
    queries: list[dict[str, Any]] = []
    versions = {}
    for name in packages:
        root = Path(importlib.import_module(name).__file__ or "").parent
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "?"
        for f in sorted(root.rglob("*.py")):
            rel = f"{name}/{f.relative_to(root).as_posix()}"
            try:
                kept, pairs = strip_and_collect(f.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            if not kept.strip():
                continue
            (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
            (corpus / rel).write_text(kept, encoding="utf-8")
            for query, def_line in pairs:
                if kept.count(def_line) == 1:
                    queries.append({"query": query, "golden_quotes": [{"doc_id": rel, "quote": def_line}]})
    return _finish(out, queries, {"packages": versions})


_JS_DEFS = frozenset({"function_declaration", "generator_function_declaration", "class_declaration",
                      "method_definition"})
_JS_FUNCTIONS = frozenset({"function_expression", "arrow_function", "function", "class",
                           "generator_function"})


def _js_definition(node: Any) -> bool:
    """A node a JSDoc comment documents: a function, class or method, bound however JavaScript
    binds them (declaration, `const f = () =>`, `exports.f = function`, `{ f: function }`)."""
    t = node.type
    if t in _JS_DEFS:
        return True
    if t == "export_statement":
        inner = node.child_by_field_name("declaration") or node.child_by_field_name("value")
        return inner is not None and _js_definition(inner)
    if t in ("lexical_declaration", "variable_declaration"):
        decls = [c for c in node.named_children if c.type == "variable_declarator"]
        value = decls[0].child_by_field_name("value") if len(decls) == 1 else None
        return value is not None and value.type in _JS_FUNCTIONS
    if t == "expression_statement" and node.named_child_count:
        expr = node.named_children[0]
        right = expr.child_by_field_name("right") if expr.type == "assignment_expression" else None
        return right is not None and right.type in _JS_FUNCTIONS
    if t in ("pair", "field_definition"):
        value = node.child_by_field_name("value")
        return value is not None and value.type in _JS_FUNCTIONS
    return False


def _jsdoc_text(comment: str) -> str:
    """A JSDoc comment's description: the text before its first @tag, without the stars."""
    lines = []
    for line in comment.removeprefix("/**").removesuffix("*/").splitlines():
        line = line.strip().lstrip("*").strip()
        if line.startswith("@"):
            break
        lines.append(line)
    return "\n".join(lines).strip()


def strip_jsdoc(source: str) -> tuple[str, list[tuple[str, str]]]:
    """The JavaScript without the JSDoc comments directly above definitions (whole lines), and
    (query, definition's first line) pairs."""
    import tree_sitter_javascript
    from tree_sitter import Language, Parser

    data = source.encode("utf-8")
    tree = Parser(Language(tree_sitter_javascript.language())).parse(data)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    pairs: list[tuple[str, str]] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        children = node.named_children
        stack.extend(children)
        for comment, nxt in zip(children, children[1:], strict=False):
            if comment.type != "comment" or not data[comment.start_byte:].startswith(b"/**"):
                continue
            first, last = comment.start_point.row, comment.end_point.row
            if nxt.start_point.row != last + 1 or not _js_definition(nxt):
                continue
            if lines[first][:comment.start_point.column].strip() or \
                    lines[last][len(data[:comment.end_byte].decode().rsplit("\n", 1)[-1]):].strip():
                continue  # the comment shares a line with code
            text = data[comment.start_byte:comment.end_byte].decode("utf-8")
            description = _jsdoc_text(text)
            query = first_sentence(description) if description else ""
            if len(query.split()) < 5 or "eslint" in query or "istanbul" in query:
                continue
            drop.update(range(first, last + 1))
            pairs.append((query, lines[nxt.start_point.row].strip()))
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    return kept, pairs


def _js_package(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] != "node_modules":
        return parts[0]  # npm's own lib/, bin/
    return "/".join(parts[:3]) if parts[1].startswith("@") else "/".join(parts[:2])


def build_js(out: Path, root: Path = NPM) -> dict[str, Any]:
    """npm's JavaScript (its lib/ and the packages it bundles): every package with at least
    JS_MIN_QUERIES documented definitions and at most JS_MAX_CHARS characters. ESM copies of
    CommonJS builds (`dist/esm` next to `dist/commonjs`), minified files, tests and files over
    300 kB are left out: a second copy of a file would make its query ambiguous."""
    packages: dict[str, list[tuple[str, str, list[tuple[str, str]]]]] = {}
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).as_posix()
        if f.suffix not in JS_SUFFIXES or not f.is_file() or ".min." in f.name or "/test/" in rel:
            continue
        if "/dist/esm/" in rel and Path(str(f).replace("/dist/esm/", "/dist/commonjs/")).exists():
            continue
        if f.stat().st_size > 300_000:
            continue
        try:
            kept, pairs = strip_jsdoc(f.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
        if kept.strip():
            pairs = [(q, d) for q, d in pairs if len(d) >= 6 and kept.count(d) == 1]
            packages.setdefault(_js_package(rel), []).append((rel, kept, pairs))
    corpus = out / "corpus"
    queries: list[dict[str, Any]] = []
    chosen = []
    for package, files in sorted(packages.items()):
        if sum(len(p) for _, _, p in files) < JS_MIN_QUERIES or \
                sum(len(k) for _, k, _ in files) > JS_MAX_CHARS:
            continue
        chosen.append(package)
        for rel, kept, pairs in files:
            (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
            (corpus / rel).write_text(kept, encoding="utf-8")
            queries.extend({"query": q, "golden_quotes": [{"doc_id": rel, "quote": d}],
                            "group": package} for q, d in pairs)
    return _finish(out, queries, {"root": str(root), "packages": chosen}, JS_PER_PACKAGE)


def _finish(out: Path, queries: list[dict[str, Any]], info: dict[str, Any],
            per_group: int = 0) -> dict[str, Any]:
    chosen = _sample(queries, per_group)
    (out / "eval.jsonl").write_text("".join(json.dumps(q) + "\n" for q in chosen))
    files = [f for f in (out / "corpus").rglob("*") if f.is_file()]
    return {**info, "files": len(files), "chars": sum(len(f.read_text()) for f in files),
            "eligible_queries": len(queries), "queries": len(chosen)}


def build(name: str, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    if name in PYTHON_CORPORA:
        return build_python(out, PYTHON_CORPORA[name])
    if name == "js-b":
        return build_js(out)
    raise SystemExit(f"unknown corpus {name!r}")


# --- chunking ------------------------------------------------------------------------------------

def documents(corpus: Path, chunker: str) -> tuple[list[Document], dict[str, Any]]:
    """The corpus's files as the directory loader makes them (doc id and title the relative path,
    metadata path and suffix), cut by `chunker`: "text" (chunk_text) or "syntax" (chunk_code, and
    chunk_text where it returns None)."""
    docs = []
    fallbacks = 0
    seconds = 0.0
    for f in sorted(p for p in corpus.rglob("*") if p.is_file()):
        rel = f.relative_to(corpus).as_posix()
        text = f.read_text(encoding="utf-8")
        started = time.perf_counter()
        pieces: list[tuple[int, str, dict[str, Any]]] | None = None
        if chunker == "syntax":
            code = chunk_code(text, f.suffix.lower(), SIZE, OVERLAP)
            if code is None:
                fallbacks += 1
            else:
                pieces = [(p.start, p.text, {"symbols": list(p.symbols)} if p.symbols else {})
                          for p in code]
        if pieces is None:
            pieces = [(s, t, {}) for s, t in chunk_text(text, SIZE, OVERLAP)]
        seconds += time.perf_counter() - started
        chunks = tuple(Chunk(rel, i, t, s, where) for i, (s, t, where) in enumerate(pieces))
        docs.append(Document(rel, text, chunks, rel, {"path": rel, "suffix": f.suffix.lower()}))
    lengths = [len(c.text) for d in docs for c in d.chunks]
    return docs, {"chunks": len(lengths), "mean_chars": round(sum(lengths) / max(len(lengths), 1)),
                  "fallback_files": fallbacks, "chunking_seconds": round(seconds, 2)}


# --- ingest and evaluate -------------------------------------------------------------------------

def situate_docs(docs: list[Document], context: str) -> list[list[Situated]]:
    if context == "none":
        return [[Situated(c, "", "none") for c in d.chunks] for d in docs]
    from situate.tasks.contexts.structural import StructuralContextualizer

    structural = StructuralContextualizer()
    return [structural.situate(d, d.chunks).situated for d in docs]


# Vectors by indexed text: a chunk both chunkers cut alike (a small file whole) is embedded once.
_VECTORS: dict[str, list[float]] = {}


def ingest(store: Any, collection: str, embedder: Any, docs: list[Document], context: str) -> float:
    """Situate, embed and write every document into a new collection, then flush: a fresh ingest."""
    import numpy as np

    started = time.perf_counter()
    situated = situate_docs(docs, context)
    texts = [s.indexed_text for group in situated for s in group]
    missing = sorted({t for t in texts if t not in _VECTORS})
    for t, v in zip(missing, embedder.embed_documents(missing), strict=True):
        _VECTORS[t] = v
    vectors = np.asarray([_VECTORS[t] for t in texts], dtype=np.float32)
    store.ensure_collection(collection, vectors.shape[1], embedder.id)
    embedded = []
    i = 0
    for doc, group in zip(docs, situated, strict=True):
        embedded.append(EmbeddedDocument(doc, doc.hash, tuple(group), vectors[i:i + len(group)]))
        i += len(group)
    store.write(collection, embedded)
    store.flush(collection)
    return time.perf_counter() - started


def evaluate(store: Any, collection: str, embedder: Any, eval_set: Path) -> dict[str, Any]:
    from situate.tasks.retrieval.metrics import golden_ranks, load_eval_set, pass_at_k_of_ranks
    from situate.tasks.retrieval.search import answer

    queries = load_eval_set(eval_set)
    texts = [q.query for q in queries]
    scores: dict[str, dict[str, float]] = {}
    ranks_by_mode: dict[str, list[int | None]] = {}
    for mode in MODES:
        hits = [answer(store, collection, text, mode, max(KS),
                       embedder if mode != "bm25" else None, fusion="cdbsf") for text in texts]
        ranks = [golden_ranks(q.golden, [(h.doc_id, h.text) for h in hs])
                 for q, hs in zip(queries, hits, strict=True)]
        scores[mode] = {str(k): round(pass_at_k_of_ranks(ranks, k), 2) for k in KS}
        ranks_by_mode[mode] = [r[0] for r in ranks]
    return {"queries": len(queries), "pass_at_k": scores, "ranks": ranks_by_mode}


# --- report --------------------------------------------------------------------------------------

def verdict(results: dict[str, Any], context: str, corpora: list[str]) -> dict[str, Any]:
    """The rule: syntax is the default only if its hybrid Pass@k is not below text's at any k on
    any corpus (in the given context)."""
    losses = []
    for name in corpora:
        runs = {r["chunker"]: r for r in results["runs"]
                if r["corpus"] == name and r["context"] == context}
        if set(runs) != {"text", "syntax"}:
            continue
        for k in KS:
            s, t = runs["syntax"]["pass_at_k"]["hybrid"][str(k)], runs["text"]["pass_at_k"]["hybrid"][str(k)]
            if s < t:
                losses.append({"corpus": name, "k": k, "syntax": s, "text": t})
    return {"context": context, "corpora": corpora, "passed": not losses, "losses": losses}


def table(results: dict[str, Any]) -> str:
    lines = ["| corpus | context | chunker | chunks (mean chars) | dense @5/10/20 | BM25 @5/10/20 | "
             "hybrid @5/10/20 |", "|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        p = r["pass_at_k"]
        cells = [" / ".join(f"{p[m][str(k)]:.1f}" for k in KS) for m in MODES]
        lines.append(f"| {r['corpus']} | {r['context']} | {r['chunker']} | {r['chunks']} "
                     f"({r['mean_chars']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", nargs="+", default=["py-a", "js-b"],
                    choices=[*PYTHON_CORPORA, "js-b"])
    ap.add_argument("--contexts", nargs="+", default=["structural"], choices=["structural", "none"])
    ap.add_argument("--chunkers", nargs="+", default=["text", "syntax"], choices=["text", "syntax"])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "code-heldout.json"))
    ap.add_argument("--build-only", metavar="DIR", help="build the corpora into DIR and stop")
    ap.add_argument("--reuse", metavar="JSON", help="take the runs of --reuse-chunkers from this "
                    "earlier results file instead of measuring them again (their chunker unchanged)")
    ap.add_argument("--reuse-chunkers", nargs="+", default=["text"], choices=["text", "syntax"])
    args = ap.parse_args()
    if args.build_only:
        for name in args.corpora:
            print(name, json.dumps(build(name, Path(args.build_only) / name)), flush=True)
        return

    from situate.storage.milvus import MilvusStore
    from situate.tasks.embedders.base import Embedders

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": "python benchmarks/bench_code_heldout.py " + " ".join(sys.argv[1:]),
        "commit": commit, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "size": SIZE, "overlap": OVERLAP, "embedder": "minilm", "fusion": "cdbsf", "seed": SEED,
        "corpora": {}, "runs": []}
    started = time.perf_counter()
    embedders = Embedders()
    embedder = embedders.get("minilm")
    with tempfile.TemporaryDirectory() as tmp:
        store = MilvusStore(f"{tmp}/milvus.db")
        try:
            for name in args.corpora:
                held = Path(tmp) / name
                results["corpora"][name] = build(name, held)
                print(name, json.dumps(results["corpora"][name]), flush=True)
                earlier = json.loads(Path(args.reuse).read_text()) if args.reuse else {"runs": []}
                for chunker in args.chunkers:
                    reused = [r for r in earlier["runs"] if r["corpus"] == name
                              and r["chunker"] == chunker and r["context"] in args.contexts
                              and chunker in args.reuse_chunkers]
                    if reused:
                        if earlier["corpora"].get(name) != results["corpora"][name]:
                            raise SystemExit(f"{name}: the corpus differs from {args.reuse}'s")
                        results["runs"].extend({**r, "reused_from": earlier.get("started")}
                                               for r in reused)
                        print(name, chunker, "reused from", args.reuse, flush=True)
                        continue
                    docs, stats = documents(held / "corpus", chunker)
                    for context in args.contexts:
                        collection = re.sub(r"\W", "_", f"{name}_{chunker}_{context}")
                        seconds = ingest(store, collection, embedder, docs, context)
                        report = evaluate(store, collection, embedder, held / "eval.jsonl")
                        run = {"corpus": name, "chunker": chunker, "context": context, **stats,
                               "ingest_seconds": round(seconds, 1), **report}
                        results["runs"].append(run)
                        print(name, chunker, context, stats, json.dumps(report["pass_at_k"]),
                              flush=True)
        finally:
            store.close()
            embedders.release()
    results["seconds"] = round(time.perf_counter() - started)
    results["verdicts"] = [verdict(results, c, args.corpora) for c in args.contexts]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results), end="")
    print(json.dumps(results["verdicts"]))


if __name__ == "__main__":
    main()
