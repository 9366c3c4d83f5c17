"""Evaluation at scale: `situate evaluate` of 200 and of 5,000 generated queries against the same
collection, in one run: time per query (the flow's own seconds over the queries, start-up
excluded), per-query latency p50/p95, and the peak RSS of the command's process tree (the
Milvus server apart). Time per query should not grow with the number of queries, nor memory.

The collection is one `bench_scale.py --dim 384 --server` wrote (its corpus and a running
`milvus-lite server`, or a Milvus server, at URI); the queries are generated from the corpus as
`bench_scale.py --queries` makes them (a 12-word span of a chunk, its document the golden one).

    .venv/bin/python benchmarks/bench_eval_scale.py --uri http://127.0.0.1:PORT \\
        --corpus CORPUS.jsonl --sizes 200 5000 --modes dense --dim 384 \\
        --out benchmarks/results/eval-scale-100k.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import run_evaluate, write_eval_set  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402


def largest_vs_smallest(runs: list[dict]) -> list[float]:
    """Time per query of the largest set over that of each run of the smallest (a size may be
    run twice, before and after, to see the machine's drift)."""
    if len({r["queries"] for r in runs}) < 2:
        return []
    small = min(r["queries"] for r in runs)
    large = max(runs, key=lambda r: r["queries"])
    return [round(large["seconds_per_query"] / r["seconds_per_query"], 3)
            for r in runs if r["queries"] == small]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--sizes", nargs="+", type=int, default=[200, 5000])
    p.add_argument("--modes", default="dense")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--server-pid", type=int, help="the Milvus server's pid, to sample its RSS")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "eval-scale.json"))
    args = p.parse_args()
    corpus = Path(args.corpus)
    with corpus.open() as f:
        documents = sum(1 for _ in f)
    runs = []
    with FakeOpenAI(api_key="sk-bench-eval") as fake, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OPENAI_API_KEY": fake.api_key, "OPENAI_BASE_URL": fake.base_url + "/v1"}
        for i, n in enumerate(args.sizes):  # a size may repeat (200 5000 200: the first again)
            work = Path(tmp) / f"eval-{i}-{n}"
            work.mkdir()
            eval_set = work / f"eval-{n}.jsonl"
            write_eval_set(corpus, eval_set, n, documents)
            run = run_evaluate(eval_set, work, env, args.uri, args.dim, args.modes, args.server_pid)
            print(json.dumps(run), flush=True)
            runs.append(run)
    ok = [r for r in runs if "failed" not in r]
    ratio = None
    if len(ok) >= 2:
        ratio = round(ok[-1]["seconds_per_query"] / ok[0]["seconds_per_query"], 3)
    largest_over_smallest = largest_vs_smallest(ok)
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, "
               f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}")
    result = {"machine": machine, "command": " ".join(sys.argv), "documents": documents,
              "runs": runs, "time_per_query_ratio_last_over_first": ratio,
              "time_per_query_largest_over_each_smallest": largest_over_smallest}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for r in ok:
        print(f"{r['queries']:>6} queries: {r['seconds_per_query'] * 1000:.1f} ms/query "
              f"(flow {r['evaluation_seconds']} s, wall {r['seconds']} s), latency "
              f"{r['latency_ms']}, peak RSS {r['peak_rss_mib']} MiB")
    if largest_over_smallest:
        print(f"time per query, the largest set over each run of the smallest: x{largest_over_smallest}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
