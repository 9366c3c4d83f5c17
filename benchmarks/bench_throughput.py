"""Queries per second of `situate api` under 1, 8 and 64 concurrent clients (issue 42), before
and after in one run, and where each query's CPU time goes.

For each target collection (NAME,URI,EVAL_SET[,bow]: a `milvus-lite server` already serving it)
it starts one `situate api` per variant (VARIANT=CHECKOUT[:WORKERS][@APIS], e.g.
`before=/work/w42-base` and `after=.`, each checkout's own venv and code; @APIS: that many
`situate api` processes, the clients spread over them), all against the same server. Then for
each mode (dense, bm25, hybrid), `--rounds` times (default once), each number of clients, the
variants in turn (their order rotating from one cell to the next): `--clients` threads, each with
its own keep-alive httpx connection,
send the eval set's queries (each client from its own offset) for `--seconds`; requests begun
before the end are waited for. Per cell: queries per second (completed / time to the last
completion), p50 and p95 latency, errors, the load average before and after, and the CPU time
(user + system, psutil) each process spent per query: the API process, its model processes,
the `milvus-lite server`, and this benchmark's own clients. With several rounds, `scaling` gives
each variant's and mode's queries a second against one client's in the same round, and their
median: the cells of a round run back to back, so a drift of the machine's speed between rounds
moves both sides of a ratio alike.

Before the timed cells, every variant answers the same queries one at a time and their hit ids
(in order) and fused scores are compared with the first variant's: a faster variant that ranked
differently would not count.

    .venv/bin/python benchmarks/bench_throughput.py \\
        --target codebase,http://127.0.0.1:19712,data/benchmarks/codebase/evaluation_set.jsonl \\
        --target scale,http://127.0.0.1:19711,/tmp/eval100k.jsonl,bow \\
        --variant before=/work/w42-base --variant after=. --variant after-w2=.:2 \\
        --seconds 20 --out benchmarks/results/throughput.json

A target whose fourth field is `bow` is served with the `bow384` embedder
(`benchmarks/situate_bow.py` of each checkout). Per target: `--seconds-at NAME=S` its own cell
length (a 100k collection's BM25 takes seconds a query), `--check-at NAME=N` the queries whose
rankings are compared (default: all), `--variants-at NAME=A,B` the variants it runs (default:
all; `bow384` runs in the API's process, so `--workers` changes nothing there).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.milvus_server import free_port, stop_process  # noqa: E402

MODES = ("dense", "bm25", "hybrid")
K = 10


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_seconds(p: psutil.Process) -> float:
    try:
        t = p.cpu_times()
        return t.user + t.system
    except psutil.NoSuchProcess:
        return 0.0


def machine_busy() -> float:
    """CPU seconds the whole machine has spent on anything but idling, since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def percentile(ordered: list[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else float("nan")


def listening_pid(port: int) -> int:
    """The process listening on 127.0.0.1:port (the `milvus-lite server` of a target)."""
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return c.pid
    sys.exit(f"nothing listens on port {port}: start `milvus-lite server` first")


@dataclass
class Variant:
    name: str
    checkout: Path
    workers: int | None
    apis: int = 1  # `situate api` processes on the same collection, the clients spread over them
    args: tuple[str, ...] = ()  # more arguments of its `situate api` (--variant-args)

    def command(self, bow: bool) -> list[str]:
        python = str(self.checkout / ".venv" / "bin" / "python")
        if bow:
            return [python, str(self.checkout / "benchmarks" / "situate_bow.py")]
        return [str(self.checkout / ".venv" / "bin" / "situate")]

    def commit(self) -> str:
        return subprocess.run(["git", "-C", str(self.checkout), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()


def _spawned(process: psutil.Process) -> list[psutil.Process]:
    """The processes `process` started with multiprocessing's spawn (its model's, or the server
    processes of `situate api --processes N`)."""
    return [c for c in process.children() if "spawn_main" in " ".join(c.cmdline())]


@dataclass
class Server:
    variant: Variant
    procs: list[subprocess.Popen]
    urls: list[str]
    log: Path
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.urls[0], timeout=600)

    def processes(self) -> dict[str, list[psutil.Process]]:
        """The `situate api` commands with their server processes (a spawned process that has
        spawned its own: by default one per core on a Milvus server, or `--processes N`), and
        the model processes (spawned, spawning none)."""
        apis = [psutil.Process(p.pid) for p in self.procs]
        models: list[psutil.Process] = []
        for command in list(apis):
            for child in _spawned(command):
                theirs = _spawned(child)
                if theirs:
                    apis.append(child)
                    models += theirs
                else:
                    models.append(child)
        return {"api": apis, "model": models}

    def search(self, query: str, mode: str, k: int = K) -> list[tuple[str, float]]:
        r = self.client.post("/search", json={"query": query, "k": k, "mode": mode})
        r.raise_for_status()
        return [(h["id"], h["score"]) for h in r.json()["hits"]]


def start_server(variant: Variant, collection: str, uri: str, bow: bool, work: Path) -> Server:
    """The variant's `situate api` processes (`apis` of them), each on a port of its own."""
    procs: list[subprocess.Popen] = []
    urls: list[str] = []
    log = work / f"api-{variant.name}-{collection}.log"
    for n in range(variant.apis):
        port = free_port()
        args = [*variant.command(bow), "api", "--collection", collection, "--milvus-uri", uri,
                "--port", str(port)]
        if variant.workers is not None:
            args += ["--workers", str(variant.workers)]
        args += variant.args
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        log = work / f"api-{variant.name}-{collection}-{n}.log"
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True, cwd=variant.checkout))
        urls.append(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 600
    for proc, url in zip(procs, urls, strict=True):
        while True:
            if time.monotonic() > deadline:
                sys.exit(f"{variant.name}: situate api did not start")
            if proc.poll() is not None:
                sys.exit(f"{variant.name}: situate api exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
    server = Server(variant, procs, urls, log)
    # Its server processes start one after another, once the first serves ("... from N
    # processes"): each says "Application startup complete" when it does.
    said = re.search(r" from (\d+) processes", log.read_text())
    wanted = int(said.group(1)) if said else 1
    while wanted > 1 and (log.read_text().count("Application startup complete") < wanted * len(procs)
                          or len(server.processes()["model"]) < wanted * len(procs)):
        if time.monotonic() > deadline:
            sys.exit(f"{variant.name}: situate api's {wanted} processes did not all start")
        time.sleep(0.5)
    return server


def run_cell(server: Server, milvus: psutil.Process, queries: list[str], mode: str,
             clients: int, seconds: float) -> dict[str, Any]:
    """`clients` threads, each its own connection, for `seconds`; requests begun are finished."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start_at = [0.0]
    stop_at = [0.0]
    last = [0.0]

    def clock() -> None:  # run by one thread as the barrier opens, before any client goes on
        start_at[0] = time.perf_counter()
        stop_at[0] = start_at[0] + seconds

    go = threading.Barrier(clients + 1, action=clock)

    def client(i: int) -> None:
        with httpx.Client(base_url=server.urls[i % len(server.urls)], timeout=900) as c:
            c.get("/healthz")  # connected before the clock starts
            n = i * max(1, len(queries) // clients)
            go.wait()
            while time.perf_counter() < stop_at[0]:
                q = queries[n % len(queries)]
                n += 1
                started = time.perf_counter()
                try:
                    r = c.post("/search", json={"query": q, "k": K, "mode": mode})
                    ok = r.status_code == 200
                    problem = "" if ok else f"HTTP {r.status_code}: {r.text[:200]}"
                except httpx.HTTPError as e:
                    ok, problem = False, f"{type(e).__name__}: {e}"
                done = time.perf_counter()
                with lock:
                    if ok:
                        latencies.append(done - started)
                    else:
                        errors.append(problem)
                    last[0] = max(last[0], done)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    procs = {**server.processes(), "milvus": [milvus], "bench_clients": [psutil.Process()]}
    load_before = load()
    cpu_before = {k: sum(cpu_seconds(p) for p in ps) for k, ps in procs.items()}
    busy_before = machine_busy()
    go.wait()
    for t in threads:
        t.join()
    elapsed = max(last[0], stop_at[0]) - start_at[0]
    cpu = {k: sum(cpu_seconds(p) for p in ps) - cpu_before[k] for k, ps in procs.items()}
    busy = machine_busy() - busy_before
    cores = (os.cpu_count() or 1) * elapsed
    n = len(latencies)
    ordered = sorted(latencies)
    return {
        "variant": server.variant.name, "mode": mode, "clients": clients,
        "queries": n, "errors": len(errors), "error_examples": errors[:3],
        "seconds": round(elapsed, 2), "qps": round(n / elapsed, 2),
        "p50_ms": round(1000 * percentile(ordered, 0.5), 1),
        "p95_ms": round(1000 * percentile(ordered, 0.95), 1),
        "load_before": load_before, "load_after": load(),
        "cpu_ms_per_query": {k: round(1000 * v / max(n, 1), 2) for k, v in cpu.items()},
        "model_processes": len(procs["model"]),
        "server_processes": max(1, len(procs["api"]) - len(server.procs)),
        "cpu_share_of_the_cores": round(sum(cpu.values()) / cores, 3),
        # everything else this machine ran meanwhile (other users' work), as a share of the cores
        "others_share_of_the_cores": round(max(0.0, busy - sum(cpu.values())) / cores, 3),
    }


def check_rankings(servers: list[Server], queries: list[str]) -> dict[str, Any]:
    """Every variant's hits for `queries` in each mode, against the first variant's."""
    out: dict[str, Any] = {"queries": len(queries)}
    reference = servers[0]
    for server in servers[1:]:
        ids_differ = 0
        worst = 0.0
        for mode in MODES:
            for q in queries:
                a, b = reference.search(q, mode, 20), server.search(q, mode, 20)
                if [i for i, _ in a] != [i for i, _ in b]:
                    ids_differ += 1
                else:
                    worst = max([worst, *(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True))])
        out[server.variant.name] = {"searches": 3 * len(queries), "ids_or_order_differ": ids_differ,
                                    "max_score_difference": worst}
        print(f"  rankings {server.variant.name} vs {reference.variant.name}: {ids_differ} of "
              f"{3 * len(queries)} differ; max score difference {worst:.3g}", flush=True)
    return out


def bench_target(spec: str, variants: list[Variant], args: argparse.Namespace,
                 work: Path) -> dict[str, Any]:
    name, uri, eval_set, *rest = spec.split(",")
    bow = rest[:1] == ["bow"]
    seconds = float(_at(args.seconds_at, name, args.seconds))
    check = int(_at(args.check_at, name, 0))
    chosen = _at(args.variants_at, name, "")
    if chosen:
        variants = [v for v in variants if v.name in chosen.split(",")]
    queries = [json.loads(line)["query"] for line in Path(eval_set).read_text().splitlines()
               if line.strip()]
    milvus = psutil.Process(listening_pid(urlparse(uri).port or 19530))
    print(f"{name}: {len(queries)} queries, {seconds:.0f} s a cell, load {load()}", flush=True)
    servers = [start_server(v, name, uri, bow, work) for v in variants]
    try:
        for s in servers:  # every mode searched once: nothing timed pays a first call
            for mode in MODES:
                s.search(queries[0], mode)
        checked = check_rankings(servers, queries[:check or len(queries)])
        cells = []
        turn = 0
        for mode in args.modes:
            for round_ in range(args.rounds):
                for clients in args.clients:
                    order = servers[turn % len(servers):] + servers[:turn % len(servers)]
                    turn += 1
                    for s in order:
                        cell = {**run_cell(s, milvus, queries, mode, clients, seconds),
                                "round": round_}
                        cells.append(cell)
                        cpu = cell["cpu_ms_per_query"]
                        print(f"  {mode:6} {clients:3} clients {s.variant.name:9} {cell['qps']:7.2f} q/s "
                              f"p50 {cell['p50_ms']:8.1f} p95 {cell['p95_ms']:8.1f} ms, "
                              f"{cell['errors']} errors; cpu ms/query "
                              + ", ".join(f"{k} {v}" for k, v in cpu.items())
                              + f"; others {cell['others_share_of_the_cores']:.0%} of the cores, load "
                              f"{cell['load_before'][0]}->{cell['load_after'][0]}", flush=True)
    finally:
        for s in servers:
            s.client.close()
            for proc in s.procs:
                stop_process(proc, timeout=30)
    return {"name": name, "uri": uri, "eval_set": eval_set, "embedder": "bow384" if bow else
            "collection's (minilm)", "seconds_per_cell": seconds, "rankings": checked,
            "rounds": args.rounds, "cells": cells, "scaling": scaling(cells)}


def scaling(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each variant's and mode's queries a second with more clients against one client's, round
    by round (cells of one round run back to back, so that the machine's speed, which drifts
    from minute to minute on a shared host, moves both sides of a ratio alike), and the median
    over the rounds."""
    out = []
    keys = dict.fromkeys((c["variant"], c["mode"]) for c in cells)
    for variant, mode in keys:
        mine = [c for c in cells if c["variant"] == variant and c["mode"] == mode]
        fewest = min(c["clients"] for c in mine)
        one = {c["round"]: c["qps"] for c in mine if c["clients"] == fewest}
        for clients in sorted({c["clients"] for c in mine} - {fewest}):
            ratios = [round(c["qps"] / one[c["round"]], 3) for c in mine
                      if c["clients"] == clients and one.get(c["round"])]
            out.append({"variant": variant, "mode": mode, "clients": clients, "against": fewest,
                        "ratios": ratios, "median": round(statistics.median(ratios), 3)
                        if ratios else None})
    return out


def _at(pairs: list[str], name: str, default: Any) -> Any:
    return dict(s.split("=", 1) for s in pairs).get(name, default)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", action="append", required=True,
                   help="NAME,URI,EVAL_SET[,bow]: a collection served by a milvus-lite server")
    p.add_argument("--variant", action="append", required=True,
                   help="NAME=CHECKOUT[:WORKERS][@APIS]: a checkout with its own .venv (APIS: "
                        "that many `situate api` processes, the clients spread over them)")
    p.add_argument("--clients", default="1,8,64")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=1,
                   help="times each mode's clients are swept, back to back a round")
    p.add_argument("--variant-args", action="append", default=[], metavar="NAME=ARGS",
                   help="more arguments of a variant's `situate api`, e.g. after-p2='--processes 2'")
    p.add_argument("--seconds-at", action="append", default=[], metavar="NAME=SECONDS")
    p.add_argument("--check-at", action="append", default=[], metavar="NAME=QUERIES")
    p.add_argument("--variants-at", action="append", default=[], metavar="NAME=V1,V2")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "throughput.json"))
    args = p.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    args.modes = args.modes.split(",")
    variants = []
    for v in args.variant:
        label, _, where = v.partition("=")
        where, _, apis = where.partition("@")
        checkout, _, workers = where.partition(":")
        more = tuple(_at(args.variant_args, label, "").split())
        variants.append(Variant(label, Path(checkout).resolve(), int(workers) if workers else None,
                                int(apis) if apis else 1, more))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="situate-bench-throughput-") as tmp:
        targets = [bench_target(spec, variants, args, Path(tmp)) for spec in args.target]
    result = {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "command": " ".join(sys.argv),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform(), "cpu": platform.processor()},
              "variants": [{"name": v.name, "checkout": str(v.checkout), "commit": v.commit(),
                            "workers": v.workers, "apis": v.apis, "args": list(v.args)}
                           for v in variants],
              "k": K, "targets": targets}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
