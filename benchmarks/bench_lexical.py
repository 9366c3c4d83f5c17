"""Full-text engines side by side on the same texts: which one answers the BM25 leg beside Milvus
Lite (`situate.storage.lexical`).

The texts are the scale benchmark's generated chunks (`bench_scale.write_corpus`: documents of 8
chunks of about 780 characters, a 150-word vocabulary, so every query term is in most chunks:
the hard case for an inverted index), as situate stores them for BM25 (`rows.lexical_text`), cut
into terms as Milvus Lite's standard analyzer cuts them with situate's stop words
(`lexical.terms`); every engine is given those terms, joined by spaces, so all of them index the
same terms. The queries are the scale benchmark's: 12-word spans of chunks.

Each engine and size runs in a process of its own (its memory is its own), and reports:
- build: seconds to index every chunk, and the process's RSS growth over the texts alone;
- query: p50/p95 of one top-116 query (a hybrid search's 100 candidates and the store's 16
  for ties), one thread; and queries per second from 2 threads against 1 (about 2 when the
  engine releases the GIL while it scores, about 1 when it does not);
- update: seconds to replace 1% of the chunks (delete + add) and search again, and whether the
  engine can at all without a rebuild;
- persistence: seconds to save and to load, and the size on disk;
- agreement: the share of queries whose top 10 (ids, in order) equals the exact BM25 of Milvus
  Lite's formula (`lexical.Bm25`, checked bit for bit against Lite in tests/test_lexical.py).

    .venv/bin/python benchmarks/bench_lexical.py 10000 100000 [--engines tantivy,bm25s,fts5,situate]
        [--queries 40] [--out benchmarks/results/lexical.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENGINES = ("tantivy", "bm25s", "fts5", "situate")
TOPK = 116


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def chunks_of(size: int, cache: Path) -> list[str]:
    from benchmarks.bench_scale import write_corpus

    path = cache / f"corpus-{size}.jsonl"
    if not path.is_file():
        write_corpus(path, size)
    out: list[str] = []
    with path.open() as f:
        for line in f:
            out.extend(json.loads(line)["text"].split("\n\n"))
    return out[:size]


def queries_of(texts: list[str], n: int) -> list[str]:
    rng = random.Random(11)
    out = []
    for text in rng.sample(texts, n):
        words = text.rstrip(".").split()
        start = rng.randrange(0, max(1, len(words) - 12))
        out.append(" ".join(words[start:start + 12]))
    return out


class Engine:
    def build(self, ids: list[str], docs: list[str], work: Path) -> None: ...
    def top(self, query: str, k: int) -> list[str]: ...
    def update(self, ids: list[str], docs: list[str]) -> bool: return False
    def save(self, work: Path) -> int: return 0
    def load(self, work: Path) -> None: ...


class Tantivy(Engine):
    def build(self, ids, docs, work):
        import tantivy

        schema = tantivy.SchemaBuilder()
        schema.add_text_field("id", stored=True, tokenizer_name="raw")
        schema.add_text_field("body", stored=False, tokenizer_name="ws")
        self.schema = schema.build()
        self.path = work / "tantivy"
        self.path.mkdir()
        self.index = tantivy.Index(self.schema, path=str(self.path))
        self._register(self.index)
        writer = self.index.writer(heap_size=200_000_000, num_threads=1)
        for i, d in zip(ids, docs, strict=True):
            writer.add_document(tantivy.Document(id=i, body=d))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def _register(self, index):
        import tantivy

        index.register_tokenizer("ws", tantivy.TextAnalyzerBuilder(
            tantivy.Tokenizer.whitespace()).build())

    def top(self, query, k):
        q = self.index.parse_query(" ".join(f'"{t}"' for t in query.split()), ["body"])
        res = self.searcher.search(q, k)
        return [self.searcher.doc(a)["id"][0] for _, a in res.hits]

    def update(self, ids, docs):
        import tantivy

        writer = self.index.writer(heap_size=50_000_000, num_threads=1)
        for i, d in zip(ids, docs, strict=True):
            writer.delete_documents_by_term("id", i)
            writer.add_document(tantivy.Document(id=i, body=d))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()
        return True

    def save(self, work):
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())

    def load(self, work):
        import tantivy

        self.index = tantivy.Index.open(str(self.path))
        self._register(self.index)
        self.searcher = self.index.searcher()


class Bm25s(Engine):
    def build(self, ids, docs, work):
        import bm25s

        self.ids = ids
        self.model = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        self.model.index([d.split() for d in docs], show_progress=False)

    def top(self, query, k):
        import numpy as np

        tokens = [t for t in query.split() if t in self.model.vocab_dict]
        if not tokens:
            return []
        scores = self.model.get_scores(tokens)
        best = np.argpartition(-scores, k)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [self.ids[i] for i in best if scores[i] > 0]

    def save(self, work):
        self.model.save(str(work / "bm25s"))
        return sum(f.stat().st_size for f in (work / "bm25s").rglob("*") if f.is_file())

    def load(self, work):
        import bm25s

        self.model = bm25s.BM25.load(str(work / "bm25s"))


class Fts5(Engine):
    def build(self, ids, docs, work):
        self.path = work / "fts.sqlite"
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, body, tokenize = "
                        "\"unicode61 remove_diacritics 0 tokenchars '_'\")")
        with self.db:
            self.db.executemany("INSERT INTO t VALUES (?, ?)", zip(ids, docs, strict=True))
        self.db.execute("INSERT INTO t(t) VALUES ('optimize')")
        self.db.commit()

    def top(self, query, k):
        match = " OR ".join(f'"{t}"' for t in dict.fromkeys(query.split()))
        return [r[0] for r in self.db.execute(
            "SELECT id FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (match, k))]

    def update(self, ids, docs):
        with self.db:
            self.db.executemany("DELETE FROM t WHERE id = ?", [(i,) for i in ids])
            self.db.executemany("INSERT INTO t VALUES (?, ?)", zip(ids, docs, strict=True))
        return True

    def save(self, work):
        self.db.commit()
        return self.path.stat().st_size

    def load(self, work):
        self.db.close()
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        self.top("lease", 1)


class Situate(Engine):
    def build(self, ids, docs, work):
        from situate.storage.lexical import Bm25

        self.index = Bm25()
        self.index.upsert({"id": i, "doc_id": i, "doc_hash": "", "lexical": d}
                          for i, d in zip(ids, docs, strict=True))
        self.index.seal()

    def top(self, query, k):
        return [i for i, _ in self.index.top(query, k)]

    def update(self, ids, docs):
        self.index.upsert({"id": i, "doc_id": i, "doc_hash": "", "lexical": d}
                          for i, d in zip(ids, docs, strict=True))
        self.index.seal()
        return True

    def save(self, work):
        from situate.storage.lexical import Stamp

        self.index.save(work / "situate.npz", Stamp("x", "t", self.index.rows))
        return (work / "situate.npz").stat().st_size

    def load(self, work):
        from situate.storage.lexical import Bm25

        self.index = Bm25.load(work / "situate.npz")[0]


def one(engine_name: str, size: int, n_queries: int, cache: Path) -> dict:
    """One engine at one size, in this process."""
    from situate.storage.lexical import Bm25, terms
    from situate.storage.rows import lexical_text

    texts = chunks_of(size, cache)
    ids = [f"c{i:07d}" for i in range(len(texts))]
    docs = [" ".join(terms(lexical_text(t))) for t in texts]
    queries = [" ".join(terms(lexical_text(q))) for q in queries_of(texts, n_queries)]
    del texts
    gc.collect()
    engine = {"tantivy": Tantivy, "bm25s": Bm25s, "fts5": Fts5, "situate": Situate}[engine_name]()
    work = Path(tempfile.mkdtemp(prefix=f"lexical-{engine_name}-"))
    try:
        before = rss()
        t = time.perf_counter()
        engine.build(ids, docs, work)
        build = time.perf_counter() - t
        gc.collect()
        grown = rss() - before
        for q in queries[:3]:
            engine.top(q, TOPK)
        lat = []
        for q in queries:
            t = time.perf_counter()
            engine.top(q, TOPK)
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        # 1 thread against 2: the same queries, twice over
        rounds = queries * 2

        def run(part: list[str]) -> None:
            for q in part:
                engine.top(q, TOPK)

        t = time.perf_counter()
        run(rounds)
        one_thread = len(rounds) / (time.perf_counter() - t)
        threads = [threading.Thread(target=run, args=(rounds[i::2],)) for i in range(2)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        two_threads = len(rounds) / (time.perf_counter() - t)
        # agreement with Lite's formula (exact)
        exact = Bm25()
        exact.upsert({"id": i, "doc_id": i, "doc_hash": "", "lexical": d}
                     for i, d in zip(ids, docs, strict=True))
        agree = sum(engine.top(q, 10) == [i for i, _ in exact.top(q, 10)] for q in queries)
        del exact
        gc.collect()
        # 1% update
        rng = random.Random(5)
        changed = rng.sample(range(len(ids)), max(1, len(ids) // 100))
        new_docs = [docs[(c + 7919) % len(docs)] for c in changed]
        t = time.perf_counter()
        incremental = engine.update([ids[c] for c in changed], new_docs)
        engine.top(queries[0], TOPK)
        update = time.perf_counter() - t
        if not incremental:  # a rebuild is the update
            for c, d in zip(changed, new_docs, strict=True):
                docs[c] = d
            t = time.perf_counter()
            engine.build(ids, docs, Path(tempfile.mkdtemp(dir=work)))
            engine.top(queries[0], TOPK)
            update = time.perf_counter() - t
        t = time.perf_counter()
        disk = engine.save(work)
        save = time.perf_counter() - t
        t = time.perf_counter()
        engine.load(work)
        engine.top(queries[0], TOPK)
        load = time.perf_counter() - t
        return {"engine": engine_name, "chunks": len(ids), "build_s": round(build, 3),
                "rss_growth_mib": round(grown / 2**20, 1),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "p50_ms": round(statistics.median(lat), 3),
                "p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 3),
                "qps_1_thread": round(one_thread, 1), "qps_2_threads": round(two_threads, 1),
                "threads_gain": round(two_threads / one_thread, 2),
                "update_1pct_s": round(update, 3), "incremental_update": incremental,
                "save_s": round(save, 3), "load_s": round(load, 3),
                "disk_mib": round(disk / 2**20, 1),
                "top10_equal_to_lite_formula": round(agree / len(queries), 3)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "situate-bench-lexical"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lexical.json"))
    p.add_argument("--one", nargs=2, metavar=("ENGINE", "SIZE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.queries, cache)))
        return
    results = []
    for size in a.sizes:
        for engine in a.engines.split(","):
            proc = subprocess.run([sys.executable, __file__, "--one", engine, str(size),
                                   "--queries", str(a.queries), "--cache", a.cache],
                                  capture_output=True, text=True)
            if proc.returncode:
                print(proc.stderr[-2000:], file=sys.stderr)
                results.append({"engine": engine, "chunks": size, "failed": proc.stderr[-300:]})
                continue
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    import bm25s
    import tantivy  # noqa: F401

    out = {"benchmark": "lexical", "date": time.strftime("%Y-%m-%d"),
           "command": "benchmarks/bench_lexical.py " + " ".join(sys.argv[1:]),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                      f"{platform.python_version()}, load average "
                      f"{os.getloadavg()[0]:.1f} at the end",
           "versions": {"tantivy": _version("tantivy"), "bm25s": bm25s.__version__,
                        "sqlite": sqlite3.sqlite_version},
           "topk": TOPK, "queries": a.queries, "results": results}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
