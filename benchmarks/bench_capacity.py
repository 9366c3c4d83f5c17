"""What a collection takes in Milvus Lite's memory, by rows, dimension and text size.

For each (chunks, dimension, chunk characters) it starts a fresh `milvus-lite server` on a new
data directory, writes a generated corpus's rows into it through situate's own store (the rows
`situate ingest --context structural` writes: the structural contexts, the BM25 text, the
metadata; seeded random unit vectors in place of an embedder's) and samples the server's RSS:

- `peak`: the highest RSS while the rows were written (flushes and compactions included),
- `written`: its RSS once the last row is flushed,
- `reopened`: the RSS of a new server on the same data directory once the collection is loaded
  (what a later `situate evaluate` or `search` costs),

each less the RSS of an empty server (the `base`). The per-row figures of
`situate.storage.capacity` (the dry run's store estimate) come from these runs; `--check` prints
the estimate beside each measurement.

    .venv/bin/python benchmarks/bench_capacity.py 10000 50000 --dims 384 1536 \\
        --out benchmarks/results/capacity-lite.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import CHUNKS_PER_DOC, TreeMemory, write_corpus  # noqa: E402
from tests.fakes.milvus_server import MilvusServer  # noqa: E402


def rss(pid: int) -> int:
    p = psutil.Process(pid)
    return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)])


def settle(pid: int, seconds: float = 3.0) -> int:
    """The server's RSS once it has been quiet for a moment (background compaction done)."""
    time.sleep(seconds)
    return rss(pid)


def write_rows(uri: str, corpus: Path, dim: int) -> dict[str, float]:
    """The corpus's rows, as an ingest with structural contexts writes them, through MilvusStore;
    returns the row and byte counts the estimate is made from."""
    import numpy as np

    from situate.core.records import EmbeddedDocument, grouped
    from situate.storage.capacity import RowSizes
    from situate.storage.milvus import MilvusStore
    from situate.tasks.contexts.base import ContextConfig, get_contextualizer
    from situate.tasks.corpus.load import stream_corpus

    contextualizer = get_contextualizer(ContextConfig(name="structural"))
    rng = np.random.default_rng(7)
    sizes = RowSizes()
    with MilvusStore(uri) as store:
        store.ensure_collection("capacity", dim, "bench:random")
        for docs in grouped(stream_corpus(corpus), 2_000, lambda d: len(d.chunks)):
            batch = []
            for doc in docs:
                situated = tuple(contextualizer.situate(doc, doc.chunks).situated)
                v = rng.standard_normal((len(doc.chunks), dim), dtype=np.float32)
                v /= np.linalg.norm(v, axis=1, keepdims=True)
                batch.append(EmbeddedDocument(doc, "bench", situated, v))
                sizes.add_document(doc, [s.context for s in situated])
            store.write("capacity", batch, absent={d.id for d in docs})
        store.flush("capacity")
        rows = store.count("capacity")
    return {"rows": rows, **sizes.per_row()}


def measure(work: Path, chunks: int, dim: int, chars: int) -> dict:
    import benchmarks.bench_scale as scale

    scale.CHUNK_CHARS = chars
    corpus = work / "corpus.jsonl"
    write_corpus(corpus, chunks)
    data = work / "data"
    server = MilvusServer(data, log=work / "server.log", timeout=300)
    server.start()
    assert server.proc is not None
    try:
        base = settle(server.proc.pid, 2)
        t = time.perf_counter()
        with TreeMemory(server.proc.pid, interval=0.2) as memory:
            sizes = write_rows(server.uri, corpus, dim)
            written = settle(server.proc.pid)
        seconds = time.perf_counter() - t
    finally:
        server.stop()
    server.start()  # the same data directory opened again, the collection loaded
    assert server.proc is not None
    try:
        reopened_base = rss(server.proc.pid)
        from situate.storage.milvus import MilvusStore

        with MilvusStore(server.uri) as store:
            store.load("capacity")
            reopened = settle(server.proc.pid)
    finally:
        server.stop()
    disk = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    mib = 2**20
    return {"chunks": chunks, "dim": dim, "chunk_chars": chars, **sizes,
            "seconds": round(seconds, 1), "base_mib": round(base / mib, 1),
            "peak_mib": round((memory.peak - base) / mib, 1),
            "written_mib": round((written - base) / mib, 1),
            "reopened_mib": round((reopened - base) / mib, 1),
            "reopened_before_load_mib": round((reopened_base - base) / mib, 1),
            "disk_mib": round(disk / mib, 1),
            "peak_bytes_per_row": round((memory.peak - base) / sizes["rows"]),
            "reopened_bytes_per_row": round((reopened - base) / sizes["rows"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sizes", nargs="*", type=int, default=[10_000])
    p.add_argument("--dims", nargs="+", type=int, default=[384])
    p.add_argument("--chars", nargs="+", type=int, default=[780], help="characters per chunk")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "capacity-lite.json"))
    p.add_argument("--check", action="store_true", help="print situate's estimate beside each")
    args = p.parse_args()
    runs = []
    for size in args.sizes:
        for dim in args.dims:
            for chars in args.chars:
                with tempfile.TemporaryDirectory() as tmp:
                    run = measure(Path(tmp), size, dim, chars)
                if args.check:
                    from situate.storage.capacity import estimate_store

                    e = estimate_store(run["rows"], dim, run["text_bytes"], run["lexical_bytes"],
                                       run["metadata_bytes"])
                    run["estimate_peak_mib"] = round(e.lite_bytes / 2**20, 1)
                    run["estimate_vs_peak"] = round(e.lite_bytes / 2**20 / run["peak_mib"], 3)
                runs.append(run)
                print(json.dumps(run), flush=True)
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, "
               f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine, "command": " ".join(sys.argv),
                                          "chunks_per_doc": CHUNKS_PER_DOC, "runs": runs},
                                         indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
