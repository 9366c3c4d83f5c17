"""What an unauthenticated flood costs a served collection: N clients at once each start a POST
of a huge body to `situate api` (a token set) without the token; for each, the time from its
first byte to the server's status line and how much of the body it had sent by then, and the
growth of the server's whole process tree (peak RSS over the run against before it). Then the
same with the token and a body over the limit (413). Half the clients declare a Content-Length,
half send chunked bodies.

    .venv/bin/python benchmarks/bench_door.py --collection codebase --milvus-uri data/milvus.db \\
        --clients 10 --megabytes 100 --out benchmarks/results/door.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.milvus_server import free_port, stop_process  # noqa: E402

SITUATE = str(Path(sys.executable).with_name("situate"))


def tree_rss(pid: int) -> int:
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])


def post(port: int, total: int, chunked: bool, header: bytes) -> tuple[float, str, int]:
    sock = socket.create_connection(("127.0.0.1", port))
    head = (f"POST /search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\n").encode() + header
    head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else \
        f"Content-Length: {total}\r\n\r\n".encode()
    piece = b"a" * 65536
    if chunked:
        piece = b"10000\r\n" + piece + b"\r\n"
    started = time.perf_counter()
    sock.sendall(head)
    sock.setblocking(False)
    got, sent, sending = b"", 0, True
    while b"\r\n" not in got:
        if sending and sent < total:
            try:
                sent += sock.send(piece)
            except BlockingIOError:
                time.sleep(0.0005)
            except OSError:
                sending = False
        else:
            time.sleep(0.0005)
        try:
            got += sock.recv(4096)
        except BlockingIOError:
            pass
        except OSError:
            break
    took = time.perf_counter() - started
    sock.close()
    return took, got.split(b"\r\n")[0].decode(), sent


def flood(pid: int, port: int, clients: int, total: int, header: bytes) -> dict[str, object]:
    before = tree_rss(pid)
    peak = [before]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss(pid))
            time.sleep(0.002)

    results: list[tuple[float, str, int]] = []
    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=lambda c=i % 2 == 1: results.append(
        post(port, total, c, header))) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    ms = sorted(r[0] * 1000 for r in results)
    return {"statuses": sorted({r[1] for r in results}), "ms": [round(x, 1) for x in ms],
            "ms_max": round(ms[-1], 1), "ms_median": round(statistics.median(ms), 1),
            "sent_max_bytes": max(r[2] for r in results),
            "tree_rss_growth_mb": round((peak[0] - before) / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collection", required=True)
    ap.add_argument("--milvus-uri", required=True)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--megabytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    token = secrets.token_urlsafe(32)
    port = free_port()
    env = {**os.environ, "SITUATE_API_TOKEN": token}
    proc = subprocess.Popen([SITUATE, "api", "--collection", args.collection, "--milvus-uri",
                             args.milvus_uri, "--port", str(port), "--mode", "bm25"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        import httpx

        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        total = args.megabytes * 1_000_000
        report: dict[str, object] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "load_before": os.getloadavg(), "clients": args.clients, "bytes": total,
            "unauthenticated": [], "oversized_with_token": []}
        for _ in range(args.rounds):
            report["unauthenticated"].append(flood(proc.pid, port, args.clients, total, b""))
            report["oversized_with_token"].append(flood(
                proc.pid, port, args.clients, total, f"Authorization: Bearer {token}\r\n".encode()))
        report["load_after"] = os.getloadavg()
    finally:
        stop_process(proc, timeout=30)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
