"""Search from an app (issue 34): per-query latency of every face of situate's search, each as a
ratio to `situate evaluate`'s own per-query latency in the same mode, measured in the same run;
`situate search` (one process a query) beside them; and `situate api` under 8 concurrent clients.

For each target collection (NAME,URI,EVAL_SET[,EMBEDDER_WRAPPER]) it starts `situate api` and
`situate mcp` (stdio, driven by the SDK's own client) against it, opens a `Retriever`, the
LangChain and the LlamaIndex retrievers in this process, then for each round, in an order that
rotates every round: `situate evaluate` of the query subset (its JSON's median and p95 ms per
query, per mode: the reference), and each face over the same queries in dense, bm25 and hybrid
(wall time of each call as the app sees it: HTTP through httpx, MCP through `call_tool`); then
`situate search` for a few queries per mode (a new process each: start-up, store, model). A
face's ratio is its p50 (p95) over evaluate's p50 (p95) in that round; the report gives each
round's ratio and their median. Then 8 threads, each with its own HTTP connection, send hybrid
queries to `situate api` for `--concurrent-seconds`: queries per second and errors. The load
average is recorded before and after each step (the machine is shared).

    .venv/bin/python benchmarks/bench_search_faces.py \\
        --target codebase,http://127.0.0.1:19634,data/benchmarks/codebase/evaluation_set.jsonl \\
        --target scale,http://127.0.0.1:19635,/tmp/eval100k.jsonl,bow \\
        --queries 40 --rounds 3 --out benchmarks/results/search-faces.json

A target whose fourth field is `bow` is searched with the `bow384` embedder
(`benchmarks/situate_bow.py`), registered in every process of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.situate_bow import EMBEDDER, Bow384, register  # noqa: E402
from tests.fakes.milvus_server import free_port, stop_process  # noqa: E402

MODES = ("dense", "bm25", "hybrid")
K = 10
SITUATE = str(Path(sys.executable).with_name("situate"))
FACES = ("Retriever", "HTTP", "MCP", "LangChain", "LlamaIndex")


def command(bow: bool) -> list[str]:
    return ([sys.executable, str(ROOT / "benchmarks" / "situate_bow.py")] if bow else [SITUATE])


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    p95 = ordered[max(0, math.ceil(0.95 * n) - 1)]
    return {"median": round(1000 * median, 2), "p95": round(1000 * p95, 2)}


class McpClient:
    """`situate mcp` on stdio, driven from this thread through an event loop of its own."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ready = threading.Event()
        self.stop = asyncio.Event()
        self.session: Any = None
        self.failed: BaseException | None = None
        self.done = asyncio.run_coroutine_threadsafe(self._run(args, env), self.loop)
        if not self.ready.wait(600):
            raise TimeoutError("situate mcp did not start")
        if self.failed:
            raise self.failed

    async def _run(self, args: list[str], env: dict[str, str]) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        self.stop = asyncio.Event()
        try:
            params = StdioServerParameters(command=args[0], args=args[1:], env=env)
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                self.session = s
                self.ready.set()
                await self.stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            self.failed = e
            self.ready.set()

    def search(self, query: str, k: int, mode: str) -> list[str]:
        async def call() -> Any:
            return await self.session.call_tool("search", {"query": query, "k": k, "mode": mode})

        result = asyncio.run_coroutine_threadsafe(call(), self.loop).result(600)
        if result.is_error:
            raise RuntimeError(result.content[0].text)
        return [h["id"] for h in result.structured_content["hits"]]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.done.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)


def start_api(cmd: list[str], collection: str, uri: str, env: dict[str, str], log: Path
              ) -> tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "api", "--collection", collection, "--milvus-uri", uri,
                                 "--port", str(port)], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"situate api exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    sys.exit("situate api did not start")


def run_evaluate(cmd: list[str], eval_set: Path, collection: str, uri: str, env: dict[str, str],
                 work: Path) -> dict[str, Any]:
    out = work / f"evaluate-{time.monotonic_ns()}.json"
    # --query-batch 1: one query at a time, so that its latency is a lone query's, as each face's
    done = subprocess.run([*cmd, "evaluate", str(eval_set), "--collection", collection,
                           "--milvus-uri", uri, "--modes", ",".join(MODES), "--k", str(K),
                           "--query-batch", "1", "--json", str(out)], env=env, cwd=work,
                          capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        sys.exit(f"situate evaluate failed: {done.stderr[-3000:]}")
    result = json.loads(out.read_text())
    collection_result = result["collections"][0] if "collections" in result else result
    return collection_result["latency_ms"]


def time_calls(queries: list[str], call: Callable[[str, str], object]) -> dict[str, list[float]]:
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    for mode in MODES:
        for q in queries:
            started = time.perf_counter()
            call(q, mode)
            seconds[mode].append(time.perf_counter() - started)
    return seconds


def concurrent_http(url: str, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    stop_at = time.monotonic() + seconds
    counts = {"ok": 0, "errors": 0}
    lock = threading.Lock()
    latencies: list[float] = []

    def client(i: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            j = i
            while time.monotonic() < stop_at:
                q = queries[j % len(queries)]
                j += clients
                started = time.perf_counter()
                try:
                    r = http.post("/search", json={"query": q, "k": K, "mode": "hybrid"})
                    ok = r.status_code == 200 and len(r.json()["hits"]) > 0
                except httpx.HTTPError:
                    ok = False
                with lock:
                    counts["ok" if ok else "errors"] += 1
                    latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    wall = time.perf_counter() - started
    return {"clients": clients, "seconds": round(wall, 1), "queries": counts["ok"],
            "errors": counts["errors"], "qps": round(counts["ok"] / wall, 2),
            "latency_ms": percentiles(latencies)}


def bench_target(spec: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from situate.api import Retriever
    from situate.integrations.langchain import SituateRetriever as LangChainRetriever
    from situate.integrations.llamaindex import SituateRetriever as LlamaIndexRetriever
    from situate.tasks.retrieval.metrics import load_eval_set

    name, uri, eval_path, *rest = spec.split(",")
    bow = bool(rest and rest[0] == "bow")
    cmd = command(bow)
    if bow:
        register()
    queries = [q.query for q in load_eval_set(eval_path)][: args.queries]
    subset = work / f"eval-{name}.jsonl"
    with open(eval_path) as f:
        subset.write_text("".join(line for _, line in zip(range(args.queries), f, strict=False)))
    env = {**os.environ, "SITUATE_CACHE_DIR": str(work / "cache"),
           "SITUATE_RESULTS_DIR": str(work / "results"), "PREFECT_HOME": str(work / "prefect")}
    env.pop("SITUATE_API_TOKEN", None)
    report: dict[str, Any] = {"collection": name, "uri": uri, "queries": len(queries),
                              "embedder": "bow384" if bow else "the collection's (MiniLM)",
                              "load_at_start": load()}
    api, url = start_api(cmd, name, uri, env, work / f"api-{name}.log")
    mcp = McpClient([*cmd, "mcp", "--collection", name, "--milvus-uri", uri], env)
    retriever = Retriever(name, uri)
    langchain = LangChainRetriever(collection=name, uri=uri, k=K)
    llamaindex = LlamaIndexRetriever(name, uri, k=K)
    http = httpx.Client(base_url=url, timeout=600)
    report["rows"] = retriever.describe().rows

    def http_search(q: str, mode: str) -> object:
        r = http.post("/search", json={"query": q, "k": K, "mode": mode})
        r.raise_for_status()
        return r.json()

    def llama_search(q: str, mode: str) -> object:
        llamaindex.mode = mode
        return llamaindex.retrieve(q)

    calls: dict[str, Callable[[str, str], object]] = {
        "Retriever": lambda q, m: retriever.search(q, K, m),
        "HTTP": http_search,
        "MCP": lambda q, m: mcp.search(q, K, m),
        "LangChain": lambda q, m: langchain.invoke(q, mode=m),
        "LlamaIndex": llama_search,
    }
    for call in calls.values():  # each warm before timing: a first call of each mode
        for mode in MODES:
            call(queries[0], mode)
    rounds = []
    steps = ["evaluate", *FACES]
    try:
        for r in range(args.rounds):
            order = steps[r % len(steps):] + steps[: r % len(steps)]
            measured: dict[str, Any] = {"order": order, "load": {}}
            for step in order:
                before = load()
                if step == "evaluate":
                    measured["evaluate"] = run_evaluate(cmd, subset, name, uri, env, work)
                else:
                    measured[step] = {m: percentiles(s) for m, s in
                                      time_calls(queries, calls[step]).items()}
                measured["load"][step] = [before, load()]
                print(name, r, step, json.dumps(measured[step]), measured["load"][step], flush=True)
            searches: dict[str, list[float]] = {m: [] for m in MODES}
            for mode in MODES:
                for q in queries[: args.cli_queries]:
                    started = time.perf_counter()
                    done = subprocess.run([*cmd, "search", q, "--collection", name, "--milvus-uri",
                                           uri, "--mode", mode, "--k", str(K)], env=env,
                                          capture_output=True, text=True, timeout=1800)
                    if done.returncode != 0:
                        sys.exit(f"situate search failed: {done.stderr[-2000:]}")
                    searches[mode].append(time.perf_counter() - started)
            measured["situate search"] = {m: percentiles(s) for m, s in searches.items()}
            print(name, r, "situate search", json.dumps(measured["situate search"]), flush=True)
            rounds.append(measured)
        report["rounds"] = rounds
        report["ratios"] = ratios(rounds)
        before = load()
        report["concurrent_http"] = concurrent_http(url, queries, args.clients,
                                                    args.concurrent_seconds)
        report["concurrent_http"]["load"] = [before, load()]
        print(name, "8 clients", json.dumps(report["concurrent_http"]), flush=True)
    finally:
        http.close()
        retriever.close()
        langchain.close()
        llamaindex.close()
        mcp.close()
        stop_process(api, timeout=60)
    report["load_at_end"] = load()
    return report


def ratios(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each face's p50 and p95 over evaluate's in the same round and mode; per round and their
    median."""
    out: dict[str, Any] = {}
    for face in (*FACES, "situate search"):
        out[face] = {}
        for mode in MODES:
            per_round = {stat: [round(r[face][mode][stat] / r["evaluate"][mode][stat], 3)
                                for r in rounds] for stat in ("median", "p95")}
            out[face][mode] = {f"{stat}_ratio": statistics.median(v) for stat, v in per_round.items()}
            out[face][mode]["rounds"] = per_round
    return out


def build(spec: str) -> None:
    """NAME,URI,CORPUS: the collection written straight by situate's store (no Prefect): the
    corpus's chunks with structural contexts and `bow384` vectors, as `situate ingest --context
    structural --embedder bow384` writes them, in windows of whole documents, then flushed and
    recorded as ingested. Quicker than the flow on a busy machine; the rows are the same."""
    from datetime import UTC, datetime

    from situate.core.records import EmbeddedDocument, grouped
    from situate.storage.milvus import MilvusStore
    from situate.tasks.contexts.structural import StructuralContextualizer
    from situate.tasks.corpus.load import stream_corpus

    name, uri, corpus = spec.split(",")
    bow = Bow384()
    contexts = StructuralContextualizer(max_names=12)
    started = time.perf_counter()
    with MilvusStore(uri) as store:
        store.ensure_collection(name, bow.dim, f"{EMBEDDER}:bow-384")
        written = 0
        for docs in grouped(stream_corpus(Path(corpus)), 2_000, lambda d: len(d.chunks)):
            batch = []
            for doc in docs:
                situated = tuple(contexts.situate(doc, doc.chunks).situated)
                vectors = bow.encode_documents([s.indexed_text for s in situated])
                batch.append(EmbeddedDocument(doc, "bench", situated, vectors))
            written += store.write(name, batch, absent={d.id for d in docs})
            print(f"{written} rows, {written / (time.perf_counter() - started):.0f} rows/s",
                  flush=True)
        store.flush(name)
        store.record_ingest(name, "structural", datetime.now(UTC).isoformat(timespec="seconds"))
        print(f"{name}: {store.count(name)} rows in {time.perf_counter() - started:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", action="append", default=[],
                   help="NAME,URI,EVAL_SET[,bow]: a collection to search")
    p.add_argument("--build", help="NAME,URI,CORPUS: write a bow384 collection first (see build)")
    p.add_argument("--queries", type=int, default=40, help="queries of each set searched")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cli-queries", type=int, default=3,
                   help="queries per mode and round through `situate search`")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--concurrent-seconds", type=float, default=30.0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search-faces.json"))
    args = p.parse_args()
    if args.build:
        register()
        build(args.build)
    if not args.target:
        return
    with tempfile.TemporaryDirectory(prefix="situate-bench-faces-") as tmp:
        targets = [bench_target(spec, args, Path(tmp)) for spec in args.target]
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "k": K, "rounds": args.rounds, "targets": targets}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
