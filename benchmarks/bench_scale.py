"""Ingest at scale: wall time, chunks/s and peak memory of the whole process tree, by corpus size.

For each size (chunks) it generates a corpus deterministically (JSONL documents of 8 chunks of
about 780 characters, words drawn by a seeded generator from a fixed vocabulary, so every run and
machine sees the same text), then runs the real command

    situate ingest CORPUS --collection scale --context structural --embedder openai

in a fresh process into a new Milvus Lite file, with OPENAI_BASE_URL pointing at a loopback fake
of OpenAI's embeddings API (tests/openai_server.py: 1536-d vectors computed at once), so the
figures measure situate, Prefect and Milvus, not a model. Memory is the summed RSS of the command
and every process it starts (Prefect's temporary server, Milvus Lite, a model process), sampled
every 0.25 s; the peak is reported. The time per chunk against size is fitted as time ∝ size^b
(least squares on logs) and b printed: 1.0 is linear. `--minilm` adds one run at the smallest size
with the real default embedder (MiniLM in its own process).

The reference, measured in the same run at each size: the same rows written straight into a new
Milvus Lite file by situate's store in a process of their own (no Prefect, no contexts, no
embedding service), so each figure has a ratio: situate's time over Milvus Lite's alone, and the
tree's peak memory beside Lite's alone (Milvus Lite 3 keeps every segment it writes in memory).

    .venv/bin/python benchmarks/bench_scale.py 10000 100000 [1000000] [--minilm] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.openai_server import FakeOpenAI  # noqa: E402

CHUNKS_PER_DOC = 8
CHUNK_CHARS = 780
_VOCABULARY = (
    "lease queue worker retry backoff shard replica index vector segment commit flush compact "
    "schema field tensor batch token cache prompt context chunk document corpus embed search rank "
    "fusion score cluster node pool thread process signal timeout deadline budget window stream "
    "record offset cursor page table column row partition bucket hash digest manifest snapshot "
    "restore migrate upgrade deploy schedule cron flow task runner future result state event log "
    "metric trace span sample latency throughput memory disk network socket packet frame buffer "
    "parse lex token grammar syntax module package import export symbol scope closure binding"
).split()


def write_corpus(path: Path, chunks: int, seed: int = 7) -> int:
    """A JSONL corpus of about `chunks` chunks; returns the number of documents."""
    rng = random.Random(seed)
    docs = math.ceil(chunks / CHUNKS_PER_DOC)
    with path.open("w") as f:
        for d in range(docs):
            paragraphs = []
            for _ in range(CHUNKS_PER_DOC):
                words: list[str] = []
                size = 0
                while size < CHUNK_CHARS - 20:
                    w = rng.choice(_VOCABULARY)
                    words.append(w)
                    size += len(w) + 1
                paragraphs.append(" ".join(words) + ".")
            f.write(json.dumps({"id": f"doc-{d:07d}", "text": "\n\n".join(paragraphs),
                                "metadata": {"title": f"generated document {d}"}}) + "\n")
    return docs


class TreeMemory:
    """Peak summed RSS of a process and all its descendants, sampled in a thread."""

    def __init__(self, pid: int | None, interval: float = 0.25) -> None:
        self.root = psutil.Process(pid) if pid else None
        self.interval = interval
        self.peak = 0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        if self.root is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.root is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            total = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            if total > self.peak:
                self.peak, self.peak_processes = total, len(procs)
            self._stop.wait(self.interval)


def run_ingest(corpus: Path, work: Path, embedder: str, env: dict[str, str],
               uri: str | None = None, server_pid: int | None = None) -> dict:
    situate = Path(sys.executable).with_name("situate")
    cmd = [str(situate), "ingest", str(corpus), "--collection", "scale", "--context", "structural",
           "--embedder", embedder]
    run_env = {**env, "SITUATE_MILVUS_URI": uri or str(work / "milvus.db"),
               "SITUATE_CACHE_DIR": str(work / "cache"), "SITUATE_RESULTS_DIR": str(work / "results"),
               "PREFECT_HOME": str(work / "prefect")}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with TreeMemory(proc.pid) as memory, TreeMemory(server_pid) as server:
        out, err = proc.communicate()
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"situate ingest failed ({proc.returncode}):\n{err[-3000:]}")
    chunks = next((int(line.split()[-1]) for line in out.splitlines()
                   if line.strip().startswith("chunks_written")), 0)
    return {"embedder": embedder, "seconds": round(seconds, 2), "chunks": chunks,
            "chunks_per_second": round(chunks / seconds, 1),
            "peak_rss_mib": round(memory.peak / 2**20, 1), "processes_at_peak": memory.peak_processes,
            **({"milvus_server_peak_rss_mib": round(server.peak / 2**20, 1)} if server_pid else {}),
            "tracebacks_in_output": (out + err).count("Traceback")}


def lite_alone(corpus: Path, db: str, dim: int = 1536) -> None:
    """The reference: the same rows (the corpus's chunks, structural-free, random unit vectors)
    written straight into a new Milvus Lite file by situate's store, with no Prefect, no contexts
    and no embedding service: the speed and memory of Milvus Lite itself at this size."""
    import numpy as np

    from situate.core.records import EmbeddedDocument, Situated, grouped
    from situate.storage.milvus import MilvusStore
    from situate.tasks.corpus.load import stream_corpus

    rng = np.random.default_rng(7)
    store = MilvusStore(db)
    store.ensure_collection("scale", dim, "reference:random")
    written = 0
    for docs in grouped(stream_corpus(corpus), 2_000, lambda d: len(d.chunks)):
        batch = []
        for doc in docs:
            v = rng.standard_normal((len(doc.chunks), dim), dtype=np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            batch.append(EmbeddedDocument(doc, "reference", tuple(Situated(c, "", "none")
                                                                  for c in doc.chunks), list(v)))
        written += store.write("scale", batch, absent={d.id for d in docs})
    print(f"rows {store.count('scale')} written {written}")
    store.close()


def run_reference(corpus: Path, work: Path, uri: str | None = None,
                  server_pid: int | None = None) -> dict:
    db = uri or str(work / "reference.db")
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--lite-alone", str(corpus), db],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeMemory(proc.pid) as memory, TreeMemory(server_pid) as server:
        out, err = proc.communicate()
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"the Milvus Lite reference failed ({proc.returncode}):\n{err[-3000:]}")
    rows = int(out.split()[1])
    return {"lite_alone_seconds": round(seconds, 2), "lite_alone_rows": rows,
            "lite_alone_peak_rss_mib": round(memory.peak / 2**20, 1),
            **({"lite_alone_server_peak_rss_mib": round(server.peak / 2**20, 1)}
               if server_pid else {})}


@contextmanager
def milvus(data_dir: Path, server: bool) -> Iterator[tuple[str | None, int | None]]:
    """(URI, pid) of a `milvus-lite server` on `data_dir` for the block, or (None, None)."""
    if not server:
        yield None, None
        return
    from tests.fakes.milvus_server import MilvusServer

    s = MilvusServer(data_dir, log=data_dir.parent / f"{data_dir.name}.log", timeout=120)
    s.start()
    try:
        yield s.uri, s.proc.pid
    finally:
        s.stop()


def exponent(points: list[tuple[int, float]]) -> float | None:
    """b in seconds ∝ chunks^b, least squares on logs; None for fewer than two sizes."""
    if len(points) < 2:
        return None
    xs = [math.log(c) for c, _ in points]
    ys = [math.log(s) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    p.add_argument("--minilm", action="store_true", help="also the smallest size with MiniLM")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scale.json"))
    p.add_argument("--server", action="store_true",
                   help="write to a `milvus-lite server` process started for each run (measured "
                        "on its own) instead of a Milvus Lite file inside the command")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the Milvus-Lite-alone reference run at each size")
    p.add_argument("--lite-alone", nargs=2, metavar=("CORPUS", "DB"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.lite_alone:
        lite_alone(Path(args.lite_alone[0]), args.lite_alone[1])
        return
    runs = []
    with FakeOpenAI(api_key="sk-bench-scale") as fake, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OPENAI_API_KEY": fake.api_key, "OPENAI_BASE_URL": fake.base_url + "/v1"}
        env.pop("ANTHROPIC_API_KEY", None)
        jobs = [(n, "openai") for n in sorted(args.sizes)]
        if args.minilm:
            jobs.append((min(args.sizes), "minilm"))
        for size, embedder in jobs:
            work = Path(tmp) / f"{embedder}-{size}"
            work.mkdir()
            corpus = work / "corpus.jsonl"
            docs = write_corpus(corpus, size)
            with milvus(work / "server-ingest", args.server) as (uri, pid):
                run = {"size": size, "documents": docs, "store": "server" if uri else "lite-file",
                       **run_ingest(corpus, work, embedder, env, uri, pid)}
            print(json.dumps(run), flush=True)
            if embedder == "openai" and not args.no_reference:
                shutil.rmtree(work / "milvus.db", ignore_errors=True)
                shutil.rmtree(work / "server-ingest", ignore_errors=True)
                with milvus(work / "server-reference", args.server) as (uri, pid):
                    run.update(run_reference(corpus, work, uri, pid))
                run["time_vs_lite_alone"] = round(run["seconds"] / run["lite_alone_seconds"], 2)
                run["rss_over_lite_alone_mib"] = round(run["peak_rss_mib"]
                                                       - run["lite_alone_peak_rss_mib"], 1)
            runs.append(run)
            print(json.dumps(run), flush=True)
            shutil.rmtree(work)  # the next size needs the disk
    openai_runs = [(r["chunks"], r["seconds"]) for r in runs if r["embedder"] == "openai"]
    b = exponent(openai_runs)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "runs": runs, "time_exponent": None if b is None else round(b, 3)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'size':>9} {'embedder':>8} {'chunks':>9} {'seconds':>9} {'chunks/s':>9} {'peak MiB':>9}"
          f" {'server MiB':>10} {'Lite s':>8} {'Lite MiB':>9} {'time/Lite':>9}")
    for r in runs:
        print(f"{r['size']:>9} {r['embedder']:>8} {r['chunks']:>9} {r['seconds']:>9.1f} "
              f"{r['chunks_per_second']:>9.1f} {r['peak_rss_mib']:>9.1f} "
              f"{r.get('milvus_server_peak_rss_mib', float('nan')):>10.1f} "
              f"{r.get('lite_alone_seconds', float('nan')):>8.1f} "
              f"{r.get('lite_alone_peak_rss_mib', float('nan')):>9.1f} "
              f"{r.get('time_vs_lite_alone', float('nan')):>9.2f}")
    if b is not None:
        print(f"time ∝ chunks^{b:.3f} (1.0 is linear)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
