"""What a MiniLM query costs, alone and in batches, and what batching does to its vector (issue 42).

Over the codebase set's 248 queries, in this process (the model as `situate` builds it): wall and
CPU time per query with torch's 1 and 2 intra-op threads, one query a call, in batches of 8 and
64 as sentence-transformers pads them, and in batches whose queries of equal length go through
the model together (`SpanPooled`'s way: none padded); then, per way of batching, how many of the
248 vectors are bitwise the one the query gets alone, and the largest difference.

    .venv/bin/python benchmarks/probe_query_embedding.py \\
        --eval-set data/benchmarks/codebase/evaluation_set.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    import numpy as np
    import torch

    from situate.tasks.embedders.local import build_minilm

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-set", required=True)
    args = p.parse_args()
    queries = [json.loads(line)["query"] for line in Path(args.eval_set).read_text().splitlines()]
    model = build_minilm("all-MiniLM-L6-v2", "")
    padded = model.inner.encode_queries  # sentence-transformers' own batching: padded
    rows = np.random.default_rng(0).permutation(len(queries))  # batches of mixed lengths

    def cpu() -> float:
        t = os.times()
        return t.user + t.system

    def batches(size: int, encode: Callable[[list[str]], object]) -> np.ndarray:
        out = np.zeros((len(queries), 384), dtype=np.float32)
        for i in range(0, len(rows), size):
            chosen = rows[i:i + size]
            out[chosen] = np.asarray(encode([queries[j] for j in chosen]))
        return out

    ways: dict[str, Callable[[], np.ndarray]] = {
        "one query a call": lambda: batches(1, padded),
        "batches of 8, padded": lambda: batches(8, padded),
        "batches of 8, equal lengths together": lambda: batches(8, model.encode_queries),
        "batches of 64, padded": lambda: batches(64, padded),
        "batches of 64, equal lengths together": lambda: batches(64, model.encode_queries),
    }
    for threads in (2, 1):
        torch.set_num_threads(threads)
        alone = batches(1, padded)
        for label, way in ways.items():
            way()  # warm
            w0, c0 = time.perf_counter(), cpu()
            vectors = way()
            wall, used = time.perf_counter() - w0, cpu() - c0
            same = np.all(vectors == alone, axis=1)
            worst = float(np.abs(vectors - alone).max())
            print(f"{threads} thread(s), {label:38} wall {1000 * wall / len(queries):5.2f} ms, "
                  f"CPU {1000 * used / len(queries):5.2f} ms a query; bitwise as alone "
                  f"{int(same.sum())}/{len(queries)}, largest difference {worst:.3g}; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
