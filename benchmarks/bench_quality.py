"""Pass@k with and without contexts, on the codebase benchmark and on a held-out corpus.

For each corpus and each `--context` (none, structural), a fresh `situate ingest` into a new Milvus
Lite file, then `situate evaluate --json`: the same commands a user runs. The held-out corpus is
built by `benchmarks/heldout.py` from installed packages (docstring -> definition search).

    .venv/bin/python benchmarks/bench_quality.py [--contexts none structural]
        [--corpora codebase heldout heldout-code2 heldout-prose heldout-code3 heldout-prose2]
        [--embedders minilm e5-small] [--fusions cdbsf dbsf rrf]

`heldout` and `heldout-code2` are docstring -> definition sets from installed packages,
`heldout-prose` a section-sentence -> heading set from Node.js's Markdown API reference (Debian's
nodejs documentation, /usr/share/doc/nodejs/api); `heldout-code3` (jinja2, anyio) and
`heldout-prose2` (npm's own Markdown documentation) are round 3's sealed sets.

Each (corpus, embedder, context) is ingested once and evaluated once per fusion (the first with
every mode, the others hybrid only: the halves do not depend on the fusion).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The default configuration's chart, shown in the README.
DEFAULT_VARIANT = ("codebase", "minilm", "structural", "cdbsf")
CHART = ROOT / "benchmarks" / "results" / "evaluation-codebase.png"
CODEBASE = ROOT / "data" / "benchmarks" / "codebase"
# Held-out corpora: benchmarks/heldout.py's arguments for each.
HELDOUT = {"heldout": [], "heldout-code2": ["--packages", "httpx", "click"],
           "heldout-prose": ["--markdown", "/usr/share/doc/nodejs/api"],
           # round 3's sealed sets (BENCHMARKS.md)
           "heldout-code3": ["--packages", "jinja2", "anyio"],
           "heldout-prose2": ["--markdown", "/usr/lib/node_modules/npm/docs/content"]}


def run(args: list[str], env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-m", "situate.cli.main", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"situate {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


LATENCY_PROBE = """
import json, statistics, sys, time
from situate.api import Retriever
from situate.tasks.retrieval.metrics import load_eval_set
queries = [q.query for q in load_eval_set(sys.argv[1])][:int(sys.argv[3])]
times = []
with Retriever(sys.argv[2]) as retriever:  # SITUATE_MILVUS_URI's store
    retriever.search(queries[0], k=20, mode="hybrid")  # the model loaded, the collection open
    for q in queries:
        t = time.perf_counter()
        retriever.search(q, k=20, mode="hybrid")
        times.append(1000 * (time.perf_counter() - t))
print(json.dumps({"median": round(statistics.median(times), 1),
                  "p95": round(statistics.quantiles(times, n=20)[-1], 1)}))
"""


def hybrid_latency(eval_set: Path, collection: str, env: dict[str, str], n: int = 50) -> dict:
    """Milliseconds per hybrid query (embed the query alone, search, fuse), over the first `n`
    queries of the set, one at a time as a user's search runs: median and p95."""
    r = subprocess.run([sys.executable, "-c", LATENCY_PROBE, str(eval_set), collection, str(n)],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"latency probe on {collection} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _cells(scores: dict) -> str:
    return " / ".join(f"{scores[k]:.2f}" for k in ("5", "10", "20"))


def markdown_table(results: dict) -> str:
    """Every run as one row: Pass@5/10/20 of each half and of the hybrid, chunks/s of the ingest,
    hybrid query latency."""
    lines = ["| corpus | embedder | context | fusion | dense | BM25 | hybrid | hybrid − best half "
             "(worst k) | ingest chunks/s | hybrid ms/query (median / p95) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        p = r["pass_at_k"]
        gap = min(p["hybrid"][k] - max(p["dense"][k], p["bm25"][k]) for k in ("5", "10", "20"))
        lat = r.get("hybrid_latency_ms", {})
        lines.append(f"| {r['corpus']} | {r['embedder']} | {r['context']} | {r['fusion']} | "
                     f"{_cells(p['dense'])} | {_cells(p['bm25'])} | {_cells(p['hybrid'])} | "
                     f"{gap:+.2f} | {r['chunks_per_second']} | {lat.get('median', '?')} / "
                     f"{lat.get('p95', '?')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", nargs="+", default=["none", "structural"])
    ap.add_argument("--corpora", nargs="+", default=["codebase", "heldout"],
                    choices=["codebase", *HELDOUT])
    ap.add_argument("--embedders", nargs="+", default=["minilm"],
                    help="embedder names (e.g. minilm e5-small st:DIR); each is a run of its own")
    ap.add_argument("--fusions", nargs="+", default=["cdbsf", "dbsf", "rrf"],
                    help="hybrid fusions evaluated on each collection (SITUATE_FUSION)")
    ap.add_argument("--render", metavar="JSON", help="print the table of an earlier --out and stop")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "quality.json"))
    args = ap.parse_args()
    if args.render:
        print(markdown_table(json.loads(Path(args.render).read_text())), end="")
        return
    results: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {}
        for name in args.corpora:
            if name == "codebase":
                corpora[name] = (CODEBASE / "codebase_chunks.json", CODEBASE / "evaluation_set.jsonl")
                continue
            held = Path(tmp) / name
            r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "heldout.py"), str(held),
                                *HELDOUT[name]], capture_output=True, text=True, check=True)
            results[name] = json.loads(r.stdout)
            corpora[name] = (held / "corpus", held / "eval.jsonl")
        env = {**os.environ, "SITUATE_MILVUS_URI": f"{tmp}/milvus.db", "SITUATE_CACHE_DIR": f"{tmp}/c",
               "SITUATE_RESULTS_DIR": f"{tmp}/r"}
        env.pop("ANTHROPIC_API_KEY", None)
        for name, (corpus, eval_set) in corpora.items():
            for embedder, context in itertools.product(args.embedders, args.contexts):
                collection = re.sub(r'[^A-Za-z0-9]', '_', f"{name}_{context}_{embedder}")
                t = time.perf_counter()
                summary = run(["ingest", str(corpus), "--collection", collection, "--context", context,
                     "--embedder", embedder], env)
                ingest_s = time.perf_counter() - t
                chunks = int(re.search(r"chunks_written\s+(\d+)", summary).group(1))
                halves = None  # dense and BM25 do not depend on the fusion: measured once
                for fusion in args.fusions:
                    out = Path(tmp) / f"{collection}-{fusion}.json"
                    t = time.perf_counter()
                    run(["evaluate", str(eval_set), "--collection", collection, "--json", str(out),
                         *(["--modes", "hybrid"] if halves else [])],
                        {**env, "SITUATE_FUSION": fusion})
                    report = json.loads(out.read_text())
                    evaluate_s = time.perf_counter() - t
                    if halves is None:
                        halves = {m: report["pass_at_k"][m] for m in ("dense", "bm25")}
                    report["pass_at_k"] = {**halves, **report["pass_at_k"]}
                    # Figures only: per-query ranks and listed failures quote the evaluation set.
                    # (Only the run of every mode has them: a hybrid-only run's "missed by every
                    # mode" would be missed by hybrid.)
                    failures = report.get("failures") or {}
                    scores = {"queries": report["queries"], "pass_at_k": report["pass_at_k"],
                              "latency_ms": report.get("latency_ms"),
                              "failures": {key: failures.get(key)
                                           for key in ("k", "queries_missed", "sources")}
                              if failures.get("sources") else None}
                    if (name, embedder, context, fusion) == DEFAULT_VARIANT:
                        shutil.copyfile(out.with_suffix(".png"), CHART)
                    latency = hybrid_latency(eval_set, collection, {**env, "SITUATE_FUSION": fusion})
                    results["runs"].append({
                        "corpus": name, "context": context, "embedder": embedder, "fusion": fusion,
                        "chunks": chunks, "ingest_seconds": round(ingest_s, 1),
                        "chunks_per_second": round(chunks / ingest_s, 1),
                        "evaluate_seconds": round(evaluate_s, 1), "hybrid_latency_ms": latency,
                        **scores})
                    print(name, context, embedder, fusion, json.dumps(scores["pass_at_k"]),
                          json.dumps(latency), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    Path(args.out).with_suffix(".md").write_text(markdown_table(results))
    print(markdown_table(results), end="")


if __name__ == "__main__":
    main()
