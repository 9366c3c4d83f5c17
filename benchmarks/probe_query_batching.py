"""How concurrent queries batch in one warm `Retriever` (issue 42): threads search a collection in
hybrid mode for a few seconds, with the batcher's `linger` (how long a lane holds a batch open
for stragglers) at 0 and at a few milliseconds, alternating; per setting, queries per second,
CPU per query of this process and its model processes, and the mean batch the model was given.

    .venv/bin/python benchmarks/probe_query_batching.py --uri http://127.0.0.1:19712 \\
        --collection codebase --eval-set data/benchmarks/codebase/evaluation_set.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from situate.api.retriever import Retriever

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", required=True)
    p.add_argument("--collection", required=True)
    p.add_argument("--eval-set", required=True)
    p.add_argument("--threads", type=int, default=6, help="6: what `situate api` runs at once "
                   "on 2 cores (asyncio's default executor)")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--lingers-ms", default="0,3")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    queries = [json.loads(line)["query"] for line in Path(args.eval_set).read_text().splitlines()]
    me = psutil.Process()

    def cpu() -> float:
        return sum(sum(q.cpu_times()[:2]) for q in [me, *me.children(recursive=True)])

    with Retriever(args.collection, args.uri, workers=1) as retriever:
        assert retriever._encoder is not None
        batcher = retriever._encoder._query_batcher()
        for _ in range(args.rounds):
            for linger in (float(x) / 1000 for x in args.lingers_ms.split(",")):
                batcher.linger = linger
                batcher.batches.clear()
                stop = time.monotonic() + args.seconds
                done = [0] * args.threads

                def work(i: int, stop: float = stop, done: list[int] = done) -> None:
                    k = i
                    while time.monotonic() < stop:
                        retriever.search(queries[k % len(queries)], 10, "hybrid")
                        k += args.threads
                        done[i] += 1

                before, started = cpu(), time.perf_counter()
                threads = [threading.Thread(target=work, args=(i,)) for i in range(args.threads)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                n, elapsed = sum(done), time.perf_counter() - started
                sizes = list(batcher.batches)
                print(f"linger {1000 * linger:.0f} ms: {n / elapsed:.1f} q/s, "
                      f"{1000 * (cpu() - before) / n:.1f} ms CPU a query (this process and its "
                      f"model), mean batch {sum(sizes) / len(sizes):.2f}, load "
                      f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
