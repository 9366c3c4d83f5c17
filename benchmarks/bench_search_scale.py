"""Search by collection size on a `milvus-lite server`, with BM25 answered by the lexical index
(`situate.storage.lexical`): hybrid through `Retriever` against the sum of its parts, the legs
alone, the index's build and catch-up, and a restarted server's first answer.

The collection is the scale benchmark's generated chunks (`bench_scale.write_corpus`), written
by situate's store straight into the server with deterministic random unit vectors (384-d),
recorded as embedded by the default MiniLM on OpenVINO: a real ingest of 100,000 chunks costs
15 minutes and more of both cores, and only the cost of searching is measured here (the
query is embedded by the real model). Each size then runs in processes of their own:

- serving: a `Retriever` opened on the server (its time to first answer: a restarted server's
  start, the model and the index loaded), then per query, one thread: hybrid, dense and BM25
  through `Retriever.search` (k 10), and the parts of a hybrid query called directly: the
  query's embedding, the index's own BM25 top 116 (`Bm25.top`: a hybrid's 100 candidates and
  the store's 16 for ties) and Lite's dense top 116 (ids and scores, as Lite answers it); the
  ratio is hybrid's p50 over the sum of the parts' p50s (the index keeps its last few queries'
  scores, since a hybrid query asks for them twice: they are dropped before each timed search,
  so that every one is a new query). Where a hybrid query's time goes: each
  of its steps timed inside it (BM25's leg and the read of its candidates' rows run while the
  query is embedded and searched by the dense leg). Lite's own BM25 (`native_bm25`) on a few
  queries for comparison;
- search time of QUERIES x 3 modes (the codebase set's 248 x 3 by default, with generated
  queries) as `situate evaluate` searches them (`retrieve_task`: 64 at a time, each ranked as
  alone), and the first ALONE of them x 3 modes one at a time, as before, for comparison in
  the same run;
- the index: built from the rows at the end of the write (what an ingest's end does), its size
  on disk, and caught up after 1% of the documents are rewritten by another process (the
  ingest's end again: the manifest says which changed).

    .venv/bin/python benchmarks/bench_search_scale.py 10000 100000 [--queries 40]
        [--out benchmarks/results/search-scale.json]
    .venv/bin/python benchmarks/bench_search_scale.py 10000 100000 --reuse DIR DIR --serve-only
        (the serving step again, on collections an earlier run wrote, into its results)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

C = "scale"
EVALUATE_BATCH = 64  # situate evaluate's default --query-batch
EMBEDDER = "minilm:all-MiniLM-L6-v2"
DEPTH = 116


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def documents(corpus: Path, seed: int, only: set[int] | None = None, salt: str = ""):
    """EmbeddedDocuments of the corpus's lines (those in `only`), random unit vectors."""
    from situate.core.records import Chunk, Document, EmbeddedDocument, Situated, sha256

    rng = np.random.default_rng(seed)
    with corpus.open() as f:
        for n, line in enumerate(f):
            if only is not None and n not in only:
                continue
            d = json.loads(line)
            texts = d["text"].split("\n\n")
            if salt:
                texts = [f"{salt} {t}" for t in texts]
            chunks = tuple(Chunk(d["id"], i, t) for i, t in enumerate(texts))
            doc = Document(d["id"], "\n\n".join(texts), chunks, "", {})
            v = rng.standard_normal((len(texts), 384), dtype=np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            yield EmbeddedDocument(doc, sha256(doc.hash), tuple(Situated(c, "") for c in chunks),
                                   list(v))


def ingest_end(store, cache: str) -> float:
    """What an ingest's end does: the manifest written, its token recorded (and with it the
    lexical index brought up to date and saved); returns the seconds of the token's step."""
    from situate.storage.manifest import Manifest

    token = Manifest(cache, store.uri, C).save(store.stored_documents(C))
    t = time.perf_counter()
    store.set_manifest_token(C, token)
    return time.perf_counter() - t


def write(uri: str, corpus: Path, cache: str) -> dict:
    from situate.core.records import batched
    from situate.storage.milvus import MilvusStore

    store = MilvusStore(uri, cache_dir=cache)
    store.ensure_collection(C, 384, EMBEDDER, backend="openvino", precision="fp32")
    t = time.perf_counter()
    for batch in batched(documents(corpus, 7), 250):
        store.write(C, batch, absent={d.doc.id for d in batch})
    store.flush(C)
    written = time.perf_counter() - t
    built = ingest_end(store, cache)
    path = store.lexical_path(C)
    out = {"rows": store.count(C), "write_s": round(written, 1),
           "index_build_s": round(built, 2),
           "index_disk_mib": round(path.stat().st_size / 2**20, 1) if path else None}
    store.close()
    return out


def update(uri: str, corpus: Path, cache: str, docs: int) -> dict:
    """1% of the documents rewritten (new texts), as a scheduled ingest would."""
    from situate.storage.milvus import MilvusStore

    store = MilvusStore(uri, cache_dir=cache)
    changed = set(random.Random(3).sample(range(docs), max(1, docs // 100)))
    t = time.perf_counter()
    batch = list(documents(corpus, 8, changed, salt="revised"))
    store.add_drift(C, sum(len(d.situated) for d in batch))
    store.write(C, batch)
    store.flush(C)
    written = time.perf_counter() - t
    caught = ingest_end(store, cache)
    leg = store._lexical_leg(C)
    out = {"documents": len(changed), "rows": sum(len(d.situated) for d in batch),
           "write_s": round(written, 1), "catch_up_s": round(caught, 2), "how": leg.last}
    store.close()
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))], 2)


def serve(uri: str, corpus: Path, cache: str, n: int, evaluate: int, each_alone: int) -> dict:
    """The serving process: time to first answer, latencies, parts, evaluation time."""
    from benchmarks.bench_scale import write_eval_set
    from situate.api import Retriever
    from situate.storage.lexical import Bm25
    from situate.storage.milvus import MilvusStore

    os.environ["SITUATE_CACHE_DIR"] = cache
    started = time.perf_counter()
    before = rss_mib()
    retriever = Retriever(C, uri, mode="hybrid")
    retriever.search("lease queue worker", 10, "bm25")
    first = time.perf_counter() - started
    opened = rss_mib()
    store = retriever._store
    leg = store._lexical_leg(C)
    how = leg.last
    sets = Path(tempfile.mkdtemp()) / "queries.jsonl"
    write_eval_set(corpus, sets, max(n, evaluate), sum(1 for _ in corpus.open()))
    queries = [json.loads(line)["query"] for line in sets.read_text().splitlines()]
    sample = queries[:n]
    encoder = retriever._embedder_loaded()
    timings: dict[str, list[float]] = {k: [] for k in (
        "hybrid", "dense", "bm25", "embed", "engine_bm25", "lite_dense", "store_dense")}
    params = store._search_params("COSINE", DEPTH)
    for q in sample[:3]:  # warm
        retriever.search(q, 10)

    def unseen() -> None:  # the index keeps its last queries' scores: each search a new query
        leg.current()._recent.clear()

    for q in sample:
        for mode in ("hybrid", "dense", "bm25"):
            unseen()
            t = time.perf_counter()
            retriever.search(q, 10, mode)
            timings[mode].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        vector = encoder.embed_queries([q])[0]
        timings["embed"].append((time.perf_counter() - t) * 1000)
        index = leg.current()
        unseen()
        t = time.perf_counter()
        index.top(q, DEPTH)
        timings["engine_bm25"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        store.client.search(C, data=[vector], anns_field="dense", limit=DEPTH,
                            output_fields=["id"], search_params=params)
        timings["lite_dense"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        store.ranking(C, "dense", q, vector, DEPTH)
        timings["store_dense"].append((time.perf_counter() - t) * 1000)
    p50 = {k: pct(v, 0.5) for k, v in timings.items()}
    index = leg.current()
    arrays = {"terms": sum(a.nbytes for a in (index.matrix.data, index.matrix.indices,
                                               index.matrix.indptr, index.lengths, index.df)),
              "vectors": index.vectors.nbytes if index.vectors is not None else 0}
    t, grown = time.perf_counter(), rss_mib()
    rebuilt = Bm25()
    rebuilt.upsert(leg._rows())
    rebuilt.seal()
    rebuild_s, grown = time.perf_counter() - t, rss_mib() - grown
    assert rebuilt.rows == index.rows
    del rebuilt
    parts = p50["embed"] + p50["engine_bm25"] + p50["lite_dense"]
    steps = hybrid_steps(retriever, sample)
    native = MilvusStore(uri, native_bm25=True)
    lite_bm25 = []
    for q in sample[:5]:
        t = time.perf_counter()
        native.ranking(C, "bm25", q, None, DEPTH)
        lite_bm25.append((time.perf_counter() - t) * 1000)
    native.close()
    alone = time.perf_counter()
    for q in queries[:each_alone]:
        for mode in ("dense", "bm25", "hybrid"):
            retriever.search(q, 20, mode)
    alone = time.perf_counter() - alone
    retriever.close()
    evaluation = evaluation_seconds(uri, queries[:evaluate])
    return {"first_answer_s": round(first, 2), "index_was": how,
            "rss_after_open_mib": round(opened, 1), "rss_before_mib": round(before, 1),
            "index_arrays_mib": {k: round(v / 2**20, 1) for k, v in arrays.items()},
            "index_rebuilt_from_rows_s": round(rebuild_s, 2),
            "index_rebuild_rss_growth_mib": round(grown, 1),
            "p50_ms": p50, "p95_ms": {k: pct(v, 0.95) for k, v in timings.items()},
            "sum_of_parts_p50_ms": round(parts, 2),
            "hybrid_over_parts": round(p50["hybrid"] / parts, 2),
            "hybrid_steps_p50_ms": steps,
            "lite_native_bm25_p50_ms": pct(lite_bm25, 0.5),
            "evaluation_queries": evaluate, "evaluation_batch": EVALUATE_BATCH,
            "evaluation_search_s": {m: round(s, 1) for m, s in evaluation.items()},
            "evaluation_alone_queries": each_alone,
            "evaluation_alone_s": round(alone, 1),
            "evaluation_alone_s_scaled": round(alone * evaluate / max(1, each_alone), 1)}


def evaluation_seconds(uri: str, queries: list[str]) -> dict[str, float]:
    """Seconds to search `queries` in each mode (k 20) as `situate evaluate` does
    (`retrieve_task`, EVALUATE_BATCH at a time, the model in a process of its own, as the
    flow's), its retriever warmed first; "total" the three."""
    from situate.api import Retriever
    from situate.flows.evaluate import retrieve_task

    seconds: dict[str, float] = {}
    with Retriever(C, uri, model_process=True) as retriever:
        retriever.warm("dense", "bm25", "hybrid")
        for mode in ("dense", "bm25", "hybrid"):
            t = time.perf_counter()
            retrieve_task.fn(retriever, C, queries, mode, 20, batch=EVALUATE_BATCH)
            seconds[mode] = time.perf_counter() - t
    seconds["total"] = sum(seconds.values())
    return seconds


def hybrid_steps(retriever, queries: list[str]) -> dict[str, float]:
    """Where a hybrid query (k 10) of `retriever` spends its time: p50 ms of each step, timed
    inside the query (BM25's leg and the read of its candidates' rows run beside the embedding
    and the dense leg: the steps overlap), and of the whole query."""
    import threading

    store = retriever._store
    encoder = retriever._embedder_loaded()
    lock = threading.Lock()
    steps: dict[str, float] = {}  # this query's: one query at a time, its steps in two threads
    wrapped = {
        "embed": (encoder, "embed_queries"), "ranking": (store, "ranking"),
        "prefetch_rows": (store, "prefetch"), "leg_scores": (store, "leg_scores"),
        "hits": (store, "hits")}
    originals = {name: getattr(obj, attr) for name, (obj, attr) in wrapped.items()}

    def timed(name, call):
        def run(*a, **kw):
            t = time.perf_counter()
            try:
                return call(*a, **kw)
            finally:
                key = f"{name}_{a[1]}" if name in ("ranking", "leg_scores") else name
                with lock:
                    steps[key] = steps.get(key, 0.0) + (time.perf_counter() - t) * 1000
        return run

    times: dict[str, list[float]] = {}
    for name, (obj, attr) in wrapped.items():
        setattr(obj, attr, timed(name, originals[name]))
    try:
        for q in queries:
            steps.clear()
            t = time.perf_counter()
            retriever.search(q, 10, "hybrid")
            steps["query"] = (time.perf_counter() - t) * 1000
            for k, v in steps.items():
                times.setdefault(k, []).append(v)
    finally:
        for _, (obj, attr) in wrapped.items():
            delattr(obj, attr)  # the class's own method again
    return {k: pct(v, 0.5) for k, v in sorted(times.items())}


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.1f} at the end (this run's own processes "
            "included)")


def serve_only(a: argparse.Namespace, step, server_class) -> None:
    """The serving step alone on each reused collection, put into the results of an earlier
    run (--out) in place of its own: the write, update and restart figures stay that run's."""
    out_path = Path(a.out)
    recorded = json.loads(out_path.read_text())
    by_size = {r["chunks"]: r for r in recorded["results"]}
    missing = [size for size in a.sizes if size not in by_size]
    if missing:
        sys.exit(f"--serve-only: {out_path} has no results at {missing}")
    for size, work in zip(a.sizes, map(Path, a.reuse), strict=True):
        server = server_class(work / "milvus", timeout=1800)
        server.start()
        try:
            by_size[size]["serve"] = step("serve", server.uri, work / "corpus.jsonl", work / "cache")
            print(json.dumps(by_size[size]["serve"]), flush=True)
        finally:
            server.stop()
    recorded["serve_run"] = {"command": "benchmarks/bench_search_scale.py " + " ".join(sys.argv[1:]),
                             "date": time.strftime("%Y-%m-%d"), "machine": machine(),
                             "sizes": a.sizes, "queries": a.queries}
    out_path.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {out_path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--evaluate", type=int, default=248)
    p.add_argument("--alone", type=int, default=40,
                   help="queries also searched one at a time in each mode, for comparison")
    p.add_argument("--reuse", nargs="+", metavar="WORKDIR",
                   help="one work directory per size, left by an earlier run (its corpus.jsonl, "
                        "milvus/ and cache/): its collection is served as it is, not written again")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search-scale.json"))
    p.add_argument("--serve-only", action="store_true",
                   help="with --reuse: only the serving step, its figures put into --out's "
                        "results of the same sizes (the run recorded under serve_run)")
    p.add_argument("--step", nargs=4, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.step:
        step, uri, corpus, cache = a.step
        if step == "write":
            out = write(uri, Path(corpus), cache)
        elif step == "update":
            out = update(uri, Path(corpus), cache, sum(1 for _ in open(corpus)))
        else:
            out = serve(uri, Path(corpus), cache, a.queries, a.evaluate, a.alone)
        print(json.dumps(out))
        return
    from benchmarks.bench_scale import write_corpus
    from tests.fakes.milvus_server import MilvusServer

    def step(name: str, uri: str, corpus: Path, cache: Path) -> dict:
        proc = subprocess.run([sys.executable, __file__, "--step", name, uri, str(corpus),
                               str(cache), "--queries", str(a.queries), "--evaluate",
                               str(a.evaluate), "--alone", str(a.alone)],
                              capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    results = []
    if a.reuse and len(a.reuse) != len(a.sizes):
        sys.exit("--reuse: give one work directory per size")
    if a.serve_only:
        if not a.reuse:
            sys.exit("--serve-only: give the work directories with --reuse")
        serve_only(a, step, MilvusServer)
        return
    for n, size in enumerate(a.sizes):
        reused = Path(a.reuse[n]) if a.reuse else None
        work = reused or Path(tempfile.mkdtemp(prefix=f"search-scale-{size}-"))
        corpus = work / "corpus.jsonl"
        if reused is None:
            write_corpus(corpus, size)
        server = MilvusServer(work / "milvus", timeout=180)
        server.start()
        try:
            row = {"chunks": size, "write": step("write", server.uri, corpus, work / "cache")
                   if reused is None else {"reused": str(reused)}}
            print(json.dumps(row), flush=True)
            row["serve"] = step("serve", server.uri, corpus, work / "cache")
            print(json.dumps(row["serve"]), flush=True)
            row["update"] = step("update", server.uri, corpus, work / "cache")
            print(json.dumps(row["update"]), flush=True)
            server.stop()
            t = time.perf_counter()
            server.start()
            row["server_restart_s"] = round(time.perf_counter() - t, 2)
            again = step("serve", server.uri, corpus, work / "cache")
            row["after_update_and_restart"] = {k: again[k] for k in (
                "first_answer_s", "index_was", "p50_ms", "hybrid_over_parts")}
            print(json.dumps(row["after_update_and_restart"]), flush=True)
        finally:
            server.stop()
        results.append(row)
    out = {"benchmark": "search-scale", "date": time.strftime("%Y-%m-%d"),
           "command": "benchmarks/bench_search_scale.py " + " ".join(sys.argv[1:]),
           "machine": machine(),
           "queries": a.queries, "results": results}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
