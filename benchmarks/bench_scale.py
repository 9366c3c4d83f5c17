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

Issue 25 (a million chunks): `--dim 384` has the loopback service answer 384-d vectors (the
default embedder's size; situate runs with an embedder registered for the run, `openai384`, that
asks the service for `dimensions=384`); `--server` writes to a `milvus-lite server` process
whose RSS is watched: above `--server-limit-gib` (or when the machine's available memory falls
under `--reserve-gib`) the ingest is stopped and the rows the server holds are counted, so the
largest size it held is measured instead of the machine swapping. `--queries 300` then evaluates
that many generated queries (a span of a chunk, its document the golden one) with `situate
evaluate --modes hybrid` against the collection just written: per-query latency p50/p95, the
evaluation's wall time and its process tree's peak RSS; `--queries 200,5000` runs several
evaluation sets in turn (time per query against the number of queries, memory flat).

    .venv/bin/python benchmarks/bench_scale.py 1000000 --dim 384 --server --no-reference \
        --queries 300 --server-limit-gib 14 --out benchmarks/results/scale-1m-384.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
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
    """A JSONL corpus of about `chunks` chunks; returns the number of documents.

    Words are drawn by numpy's seeded generator, a document's worth at a time (a million chunks
    are written in about a minute; drawing word by word with `random` took half an hour)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    words = np.array(_VOCABULARY)
    lengths = np.array([len(w) + 1 for w in _VOCABULARY])
    draw = 2 * CHUNK_CHARS // int(lengths.min())  # more than a chunk's worth of words
    docs = math.ceil(chunks / CHUNKS_PER_DOC)
    with path.open("w") as f:
        for d in range(docs):
            picks = rng.integers(0, len(words), size=(CHUNKS_PER_DOC, draw))
            # a chunk's words: every one that starts before CHUNK_CHARS - 20 characters
            ends = np.cumsum(lengths[picks], axis=1)
            counts = (ends - lengths[picks] < CHUNK_CHARS - 20).sum(axis=1)
            paragraphs = [" ".join(words[row[:n]]) + "." for row, n in zip(picks, counts, strict=True)]
            f.write(json.dumps({"id": f"doc-{d:07d}", "text": "\n\n".join(paragraphs),
                                "metadata": {"title": f"generated document {d}"}}) + "\n")
    return docs


class TreeMemory:
    """Peak summed RSS of a process and all its descendants, sampled in a thread.

    With `limit` (bytes), `on_limit(reason)` is called once when the tree's RSS passes it or the
    machine's available memory falls under `reserve` (bytes): the benchmark stops the work there
    rather than let the machine swap or the kernel kill something else."""

    def __init__(self, pid: int | None, interval: float = 0.25, limit: int | None = None,
                 reserve: int = 0, on_limit: Callable[[str], None] | None = None) -> None:
        self.root = psutil.Process(pid) if pid else None
        self.interval = interval
        self.peak = 0
        self.peak_processes = 0
        self.limit, self.reserve, self.on_limit = limit, reserve, on_limit
        self.stopped: str | None = None
        self.samples: list[tuple[float, int]] = []  # (seconds, RSS) every ~10 s
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
        started = last = time.monotonic()
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
            now = time.monotonic()
            if now - last >= 10:
                self.samples.append((round(now - started, 1), total))
                last = now
            if self.limit is not None and self.stopped is None:
                available = psutil.virtual_memory().available
                if total > self.limit:
                    self.stopped = (f"RSS {total / 2**30:.2f} GiB passed the limit of "
                                    f"{self.limit / 2**30:.1f} GiB")
                elif available < self.reserve:
                    self.stopped = (f"the machine's available memory fell to {available / 2**30:.2f}"
                                    f" GiB (reserve {self.reserve / 2**30:.1f} GiB)")
                if self.stopped and self.on_limit is not None:
                    self.on_limit(self.stopped)
            self._stop.wait(self.interval)


def run_ingest(corpus: Path, work: Path, embedder: str, env: dict[str, str],
               uri: str | None = None, server_pid: int | None = None, dim: int | None = None,
               server_limit: int | None = None, reserve: int = 0) -> dict:
    command, name = situate_command(dim)
    if embedder == "openai":
        embedder = name
    cmd = [*command, "ingest", str(corpus), "--collection", "scale", "--context", "structural",
           "--embedder", embedder]
    run_env = {**env, "SITUATE_MILVUS_URI": uri or str(work / "milvus.db"),
               "SITUATE_CACHE_DIR": str(work / "cache"), "SITUATE_RESULTS_DIR": str(work / "results"),
               "PREFECT_HOME": str(work / "prefect")}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)

    def stop(reason: str) -> None:
        print(f"stopping the ingest at {time.perf_counter() - t:.0f} s: {reason}", flush=True)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    with (TreeMemory(proc.pid) as memory,
          TreeMemory(server_pid, limit=server_limit, reserve=reserve, on_limit=stop) as server):
        out, err = proc.communicate()
    seconds = time.perf_counter() - t
    if proc.returncode != 0 and not server.stopped:
        sys.exit(f"situate ingest failed ({proc.returncode}):\n{err[-3000:]}")
    chunks = next((int(line.split()[-1]) for line in out.splitlines()
                   if line.strip().startswith("chunks_written")), 0)
    if server.stopped and uri:
        chunks = count_rows(uri) or 0
    return {"embedder": embedder, "seconds": round(seconds, 2), "chunks": chunks,
            "chunks_per_second": round(chunks / seconds, 1),
            "peak_rss_mib": round(memory.peak / 2**20, 1), "processes_at_peak": memory.peak_processes,
            **({"milvus_server_peak_rss_mib": round(server.peak / 2**20, 1),
                "milvus_server_rss_mib_over_time": [(s, round(r / 2**20)) for s, r in server.samples]}
               if server_pid else {}),
            "situate_rss_mib_over_time": [(s, round(r / 2**20)) for s, r in memory.samples],
            **({"stopped": server.stopped} if server.stopped else {}),
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


# `situate` with one more embedder registered for the run: the OpenAI embedding function asking
# the loopback service for `dimensions=DIM` (pymilvus-model knows text-embedding-3-small as 1536-d
# unless told), so the collection is DIM-d like the default embedder's.
_SITUATE_DIM = """
import sys
from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec

def build(model, key):
    from pymilvus.model.dense import OpenAIEmbeddingFunction
    return OpenAIEmbeddingFunction(model_name=model, api_key=key, dimensions={dim})

EMBEDDERS.register("openai{dim}", EmbedderSpec("text-embedding-3-small", "openai", "openai",
                                               "openai", build))
from situate.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def situate_command(dim: int | None) -> tuple[list[str], str]:
    """(the command that runs `situate`, the embedder to name) for vectors of `dim` dimensions."""
    if not dim or dim == 1536:
        return [str(Path(sys.executable).with_name("situate"))], "openai"
    return [sys.executable, "-c", _SITUATE_DIM.format(dim=dim)], f"openai{dim}"


def count_rows(uri: str, collection: str = "scale") -> int | None:
    try:
        from pymilvus import MilvusClient

        client = MilvusClient(uri=uri, timeout=600)
        try:
            return int(client.query(collection, filter="", output_fields=["count(*)"])[0]["count(*)"])
        finally:
            client.close()
    except Exception as e:  # a server that was stopped at its limit may not answer
        print(f"could not count rows at {uri}: {e}", file=sys.stderr)
        return None


def write_eval_set(corpus: Path, path: Path, n: int, docs_held: int, seed: int = 11) -> int:
    """`n` generated queries: a span of 12 words from the middle of a chunk of a document among
    the first `docs_held` (the ones the store holds), that document the golden one (its quote the
    span). Returns the number written."""
    rng = random.Random(seed)
    picks = sorted(rng.sample(range(max(1, docs_held)), min(n, max(1, docs_held))))
    wanted = {d: i for i, d in enumerate(picks)}
    lines: list[str | None] = [None] * len(picks)
    with corpus.open() as f:
        for d, line in enumerate(f):
            if d > picks[-1]:
                break
            if d not in wanted:
                continue
            doc = json.loads(line)
            paragraph = rng.choice(doc["text"].split("\n\n")).rstrip(".").split()
            start = rng.randrange(10, max(11, len(paragraph) - 22))
            quote = " ".join(paragraph[start:start + 12])
            lines[wanted[d]] = json.dumps({"query": quote, "golden_quotes": [
                {"doc_id": doc["id"], "quote": quote}]})
    path.write_text("".join(f"{line}\n" for line in lines if line))
    return sum(1 for line in lines if line)


def run_evaluate(eval_set: Path, work: Path, env: dict[str, str], uri: str, dim: int | None,
                 modes: str, server_pid: int | None = None) -> dict:
    """`situate evaluate` of a generated set against the collection: its wall time, its tree's
    peak RSS (the server's apart), per-query latency and Pass@k from its JSON."""
    command, _ = situate_command(dim)
    out_json = work / f"evaluate-{eval_set.stem}.json"
    cmd = [*command, "evaluate", str(eval_set), "--collection", "scale", "--milvus-uri", uri,
           "--modes", modes, "--json", str(out_json)]
    run_env = {**env, "SITUATE_CACHE_DIR": str(work / "cache"),
               "SITUATE_RESULTS_DIR": str(work / "results"), "PREFECT_HOME": str(work / "prefect")}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    with TreeMemory(proc.pid) as memory, TreeMemory(server_pid) as server:
        out, err = proc.communicate()
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        return {"failed": proc.returncode, "stderr": err[-3000:]}
    result = json.loads(out_json.read_text())
    collection = result["collections"][0] if "collections" in result else result
    queries = int(collection["queries"])
    # The flow's own seconds for the collection (every query, no start-up): its history file.
    history = sorted((work / "results").glob("evaluate-scale-*.json"))
    evaluation = json.loads(history[-1].read_text()).get("seconds") if history else None
    return {"queries": queries, "modes": modes, "seconds": round(seconds, 2),
            "evaluation_seconds": evaluation,
            "seconds_per_query": round(float(evaluation or seconds) / queries, 4),
            "latency_ms": collection["latency_ms"], "pass_at_k": collection["pass_at_k"],
            "peak_rss_mib": round(memory.peak / 2**20, 1),
            **({"server_peak_rss_mib": round(server.peak / 2**20, 1)} if server_pid else {}),
            "tracebacks_in_output": (out + err).count("Traceback")}


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
    p.add_argument("--dim", type=int, default=1536, help="dimension the loopback service answers")
    p.add_argument("--server-limit-gib", type=float, default=14.0,
                   help="stop the ingest when the Milvus server's RSS passes this (--server)")
    p.add_argument("--reserve-gib", type=float, default=2.5,
                   help="stop the ingest when the machine's available memory falls under this")
    p.add_argument("--queries", default="",
                   help="after each --server ingest, evaluate generated query sets of these sizes "
                        "(comma-separated) against the collection")
    p.add_argument("--eval-modes", default="hybrid", help="modes of the evaluation")
    p.add_argument("--keep", help="keep each size's work directory (corpus, server data) under this")
    p.add_argument("--lite-alone", nargs=2, metavar=("CORPUS", "DB"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.lite_alone:
        lite_alone(Path(args.lite_alone[0]), args.lite_alone[1])
        return
    query_sets = [int(q) for q in args.queries.split(",") if q.strip()]
    runs = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with FakeOpenAI(api_key="sk-bench-scale") as fake, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OPENAI_API_KEY": fake.api_key, "OPENAI_BASE_URL": fake.base_url + "/v1"}
        env.pop("ANTHROPIC_API_KEY", None)
        jobs = [(n, "openai") for n in sorted(args.sizes)]
        if args.minilm:
            jobs.append((min(args.sizes), "minilm"))
        base = Path(args.keep) if args.keep else Path(tmp)
        for size, embedder in jobs:
            work = base / f"{embedder}-{size}"
            work.mkdir(parents=True)
            corpus = work / "corpus.jsonl"
            docs = write_corpus(corpus, size)
            with milvus(work / "server-ingest", args.server) as (uri, pid):
                run = {"size": size, "documents": docs, "dim": args.dim,
                       "store": "server" if uri else "lite-file",
                       **run_ingest(corpus, work, embedder, env, uri, pid, args.dim,
                                    int(args.server_limit_gib * 2**30), int(args.reserve_gib * 2**30))}
                print(json.dumps(run), flush=True)
                if uri and query_sets and run["chunks"]:
                    held = run["chunks"] // CHUNKS_PER_DOC if run.get("stopped") else docs
                    run["evaluations"] = []
                    for n in query_sets:
                        eval_set = work / f"eval-{n}.jsonl"
                        write_eval_set(corpus, eval_set, n, held)
                        e = run_evaluate(eval_set, work, env, uri, args.dim, args.eval_modes, pid)
                        print(json.dumps(e), flush=True)
                        run["evaluations"].append(e)
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
            out.write_text(json.dumps({"runs": runs}, indent=2) + "\n")  # kept if a later size dies
            if not args.keep:
                shutil.rmtree(work)  # the next size needs the disk
    openai_runs = [(r["chunks"], r["seconds"]) for r in runs
                   if r["embedder"] != "minilm" and not r.get("stopped")]
    b = exponent(openai_runs)
    machine = (f"{platform.machine()}, {os.cpu_count()} cores, "
               f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}")
    result = {"machine": machine, "command": " ".join(sys.argv), "runs": runs,
              "time_exponent": None if b is None else round(b, 3)}
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'size':>9} {'embedder':>8} {'chunks':>9} {'seconds':>9} {'chunks/s':>9} {'peak MiB':>9}"
          f" {'server MiB':>10} {'Lite s':>8} {'Lite MiB':>9} {'time/Lite':>9}")
    for r in runs:
        print(f"{r['size']:>9} {r['embedder']:>8} {r['chunks']:>9} {r['seconds']:>9.1f} "
              f"{r['chunks_per_second']:>9.1f} {r['peak_rss_mib']:>9.1f} "
              f"{r.get('milvus_server_peak_rss_mib', float('nan')):>10.1f} "
              f"{r.get('lite_alone_seconds', float('nan')):>8.1f} "
              f"{r.get('lite_alone_peak_rss_mib', float('nan')):>9.1f} "
              f"{r.get('time_vs_lite_alone', float('nan')):>9.2f}")
        for e in r.get("evaluations", []):
            print(f"    evaluate {e.get('queries')} queries: {e.get('seconds')} s, latency "
                  f"{e.get('latency_ms')}, peak {e.get('peak_rss_mib')} MiB")
    if b is not None:
        print(f"time ∝ chunks^{b:.3f} (1.0 is linear)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
