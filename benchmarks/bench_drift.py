"""Issue 21's scenario on the codebase benchmark through the real commands: Pass@k of a collection
kept up to date against a fresh ingest of the same corpus, with and without the rebuild.

Each step is a `situate` command in a fresh process (the default embedder, MiniLM, and the
structural contexts unless told otherwise), into one Milvus Lite file:

    situate ingest TRUE    --collection fresh
    situate ingest DRIFTED --collection kept          (benchmarks/drift.py: a third edited,
    situate ingest TRUE    --collection kept --prune   5 missing, 8 stray), rebuilt at the end
    situate ingest DRIFTED --collection stale
    situate ingest TRUE    --collection stale --prune --rebuild-at inf   (the same, not rebuilt)
    situate evaluate EVAL  --collection fresh,kept,stale --json OUT

and prints Pass@k per mode and collection, and the ranked lists of BM25 that differ from fresh.

    .venv/bin/python benchmarks/bench_drift.py [--embedder minilm] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.drift import drifted  # noqa: E402

CODEBASE = ROOT / "data" / "benchmarks" / "codebase"
SITUATE = Path(sys.executable).with_name("situate")


def situate(*args: str, env: dict[str, str]) -> tuple[str, float]:
    t = time.perf_counter()
    r = subprocess.run([str(SITUATE), *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"situate {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout, time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--context", default="structural")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "drift-codebase.json"))
    args = p.parse_args()
    true = json.loads((CODEBASE / "codebase_chunks.json").read_text())
    old, what = drifted(true)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "true.json").write_text(json.dumps(true))
        (work / "drifted.json").write_text(json.dumps(old))
        env = {**os.environ, "SITUATE_MILVUS_URI": str(work / "m.db"),
               "SITUATE_CACHE_DIR": str(work / "cache"), "SITUATE_RESULTS_DIR": str(work / "r"),
               "PREFECT_HOME": str(work / "prefect")}
        env.pop("ANTHROPIC_API_KEY", None)
        common = ["--embedder", args.embedder, "--context", args.context]
        seconds = {}
        steps = [("fresh", "true.json", []), ("kept", "drifted.json", []),
                 ("kept", "true.json", ["--prune", "--json", str(work / "kept.json")]),
                 ("stale", "drifted.json", []),
                 ("stale", "true.json", ["--prune", "--rebuild-at", "inf",
                                         "--json", str(work / "stale.json")])]
        for collection, corpus, extra in steps:
            _, took = situate("ingest", str(work / corpus), "--collection", collection, *common,
                              *extra, env=env)
            seconds[f"{collection} <- {corpus}"] = round(took, 1)
        summaries = {c: json.loads((work / f"{c}.json").read_text()) for c in ("kept", "stale")}
        situate("evaluate", str(CODEBASE / "evaluation_set.jsonl"), "--collection",
                "fresh,kept,stale", "--modes", "dense,bm25,hybrid", "--json",
                str(work / "eval.json"), env=env)
        evaluation = json.loads((work / "eval.json").read_text())
    by_name = evaluation["collections"]
    ranks = {name: [q["ranks"]["bm25"] for q in c["per_query"]] for name, c in by_name.items()}
    result = {
        "command": "benchmarks/bench_drift.py " + " ".join(common), "drifted_copy": {
            k: len(v) for k, v in what.items()}, "seconds": seconds,
        "pass_at_k": {name: c["pass_at_k"] for name, c in by_name.items()},
        "bm25_golden_ranks_differing_from_fresh": {
            name: sum(a != b for a, b in zip(ranks[name], ranks["fresh"], strict=True))
            for name in ("kept", "stale")},
        "update": {c: {k: s[k] for k in ("chunks_written", "chunks_deleted", "contexts_generated",
                                          "drift_rows", "drift_share", "rebuilt", "rows",
                                          "seconds")} for c, s in summaries.items()}}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for name, modes in result["pass_at_k"].items():
        print(name.ljust(6), "  ".join(f"{m} " + "/".join(f"{v:.2f}" for v in ks.values())
                                      for m, ks in modes.items()))
    print("BM25 golden ranks differing from fresh:", result["bm25_golden_ranks_differing_from_fresh"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
