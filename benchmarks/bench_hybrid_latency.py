"""Hybrid search latency at scale: round 3's exact cdbsf against its two legs alone (issue 12).

Exact cdbsf (the default fusion) runs each leg's top-100 search, then one search per leg restricted
to the other leg's candidates it did not return. The reference, measured in the same run on the
same collection and queries, is the two leg searches alone (what round 2's cdbsf cost; its fusion
is arithmetic on 200 numbers). The collection is synthetic and deterministic: SIZE chunks of 110
words drawn (Zipf-like) from a 20,000-word vocabulary, random unit 384-d vectors, written through
situate's store into a new Milvus Lite file by one process; the timing runs in another that reopens the
file (as `situate evaluate` does), two passes of the same queries, the second reported.

    .venv/bin/python benchmarks/bench_hybrid_latency.py 10000 100000 [--queries 10] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

C = "latency"


VOCAB = [f"w{i}" for i in range(20_000)]
WEIGHTS = [1 / (i + 1) for i in range(len(VOCAB))]


def _words(rng: random.Random, k: int) -> str:
    return " ".join(rng.choices(VOCAB, WEIGHTS, k=k))


def build(path: str, size: int) -> None:
    from situate.core.records import Chunk, Document, EmbeddedDocument, Situated, sha256
    from situate.storage.milvus import MilvusStore

    rng, nrng = random.Random(7), np.random.default_rng(7)
    store = MilvusStore(path)
    store.ensure_collection(C, 384, "random:384")
    batch = []
    for d in range(size // 8):
        texts = [_words(rng, 110) for _ in range(8)]
        chunks = tuple(Chunk(f"d{d}", i, t) for i, t in enumerate(texts))
        doc = Document(f"d{d}", "".join(texts), chunks, "", {})
        v = nrng.standard_normal((8, 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        batch.append(EmbeddedDocument(doc, sha256(doc.hash), tuple(Situated(c, "") for c in chunks),
                                      list(v)))
        if len(batch) == 500:
            store.write(C, batch)
            batch = []
    if batch:
        store.write(C, batch)
    store.close()


def measure(path: str, queries: int) -> dict[str, float]:
    from situate.storage.milvus import MilvusStore
    from situate.tasks.retrieval.search import hybrid

    rng, nrng = random.Random(11), np.random.default_rng(11)
    store = MilvusStore(path)
    store.load(C)
    qs = [_words(rng, 8) for _ in range(queries)]
    vs = nrng.standard_normal((queries, 384)).astype(np.float32)
    vs /= np.linalg.norm(vs, axis=1, keepdims=True)

    def per_query(fn) -> float:
        t0 = time.perf_counter()
        for q, v in zip(qs, vs, strict=True):
            fn(q, [float(x) for x in v])
        return (time.perf_counter() - t0) / queries * 1000

    def legs(q, v):
        return [store.leg_search(C, m, q, v, 100) for m in ("dense", "bm25")]

    def exact(q, v):
        return hybrid(store, C, q, v, 20, fusion="cdbsf")

    for _ in range(2):  # the first pass warms the loaded segments
        out = {"legs_ms": per_query(legs), "exact_cdbsf_ms": per_query(exact)}
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="*", type=int)
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--dir", default="")
    ap.add_argument("--measure", default="", help=argparse.SUPPRESS)
    ap.add_argument("--build", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        build(args.build, args.sizes[0])
        return
    if args.measure:
        print(json.dumps(measure(args.measure, args.queries)))
        return
    base = Path(args.dir or tempfile.mkdtemp(prefix="situate-latency-"))
    for size in args.sizes:
        path = str(base / f"latency-{size}.db")
        if not Path(path).exists():
            t0 = time.time()  # in a process of its own: Lite lets go of the file when it exits
            subprocess.run([sys.executable, __file__, str(size), "--build", path], check=True,
                           capture_output=True)
            print(f"{size}: written in {time.time() - t0:.0f} s", flush=True)
        out = subprocess.run([sys.executable, __file__, "--measure", path, "--queries",
                              str(args.queries)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{size}: legs alone {r['legs_ms']:.1f} ms, exact cdbsf {r['exact_cdbsf_ms']:.1f} ms "
              f"a query ({r['exact_cdbsf_ms'] / r['legs_ms']:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
