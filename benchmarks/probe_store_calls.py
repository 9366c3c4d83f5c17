"""What each store call of a hybrid query costs in CPU (issue 42), on both sides of the wire: the
`milvus-lite server` process (found by its port) and this client, per call, for the calls a
hybrid query makes (each leg's top 116, each leg's scores of 100 other candidates), each with
the hits' fields and with the id alone, and for `leg_scores` with `output_fields=[]` (which
Milvus Lite reads as every field: what situate asked for before issue 42).

    .venv/bin/python benchmarks/probe_store_calls.py --uri http://127.0.0.1:19712 \\
        --collection codebase --eval-set data/benchmarks/codebase/evaluation_set.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from pymilvus import MilvusClient

    from benchmarks.bench_throughput import cpu_seconds, listening_pid
    from situate.storage.milvus import HIT_FIELDS, MilvusStore
    from situate.storage.rows import lexical_text
    from situate.tasks.embedders.base import Embedders

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", required=True)
    p.add_argument("--collection", required=True)
    p.add_argument("--eval-set", required=True)
    p.add_argument("--queries", type=int, default=60)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    server = psutil.Process(listening_pid(urlparse(args.uri).port or 19530))
    me = psutil.Process()
    queries = [json.loads(line)["query"]
               for line in Path(args.eval_set).read_text().splitlines()][:args.queries]
    embedders = Embedders()
    vectors = embedders.get("minilm").embed_queries(queries)
    embedders.release()
    with MilvusStore(args.uri) as store:
        ids = [r["id"] for r in store.rows(args.collection, fields=("id",))]
    others = json.dumps([ids[(7 * i) % len(ids)] for i in range(100)])
    client = MilvusClient(uri=args.uri)
    c = args.collection

    def leg(field: str, i: int) -> tuple[list, str]:
        return (([vectors[i]], "COSINE") if field == "dense"
                else ([lexical_text(queries[i])], "BM25"))

    def call(field: str, limit: int, output: list[str], scores: bool) -> Callable[[int], object]:
        def one(i: int) -> object:
            data, metric = leg(field, i)
            return list(client.search(c, data=data, anns_field=field if field == "dense"
                                      else "sparse", limit=limit, output_fields=output,
                                      filter=f"id in {others}" if scores else "",
                                      search_params={"metric_type": metric})[0])
        return one

    calls = {
        "dense top 116, hit fields": call("dense", 116, HIT_FIELDS, False),
        "dense top 116, id alone": call("dense", 116, ["id"], False),
        "bm25 top 116, hit fields": call("bm25", 116, HIT_FIELDS, False),
        "bm25 top 116, id alone": call("bm25", 116, ["id"], False),
        "dense scores of 100, output_fields=[]": call("dense", 100, [], True),
        "dense scores of 100, id alone": call("dense", 100, ["id"], True),
        "bm25 scores of 100, output_fields=[]": call("bm25", 100, [], True),
        "bm25 scores of 100, id alone": call("bm25", 100, ["id"], True),
    }
    for _ in range(args.rounds):
        for label, one in calls.items():
            one(0)
            s0, c0, t0 = cpu_seconds(server), cpu_seconds(me), time.perf_counter()
            for i in range(len(queries)):
                one(i)
            n = len(queries)
            print(f"{label:40} server {1000 * (cpu_seconds(server) - s0) / n:5.2f} ms, client "
                  f"{1000 * (cpu_seconds(me) - c0) / n:5.2f} ms, wall "
                  f"{1000 * (time.perf_counter() - t0) / n:5.2f} ms a call; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
