"""What a hostile client costs `situate api` (a token set), as docs/how-to/serving-safely.md's
table says: the time to refuse a path of 32 KB and 100 KB of `a.` (no token, a foreign Host, the
token) and the latency of a /healthz sent from 127.0.0.2 meanwhile; /healthz and a search from
127.0.0.7 while 300 bodies that never finish are held from 127.0.0.1 with rotating
X-Forwarded-For; the status of JSON nested 1,000 deep; and an 8,192-character query's median time
against a short query's on the same server (the ratio is the figure: the same run, the same
machine).

    .venv/bin/python benchmarks/bench_serving_hostile.py --collection sample \\
        --milvus-uri data/milvus.db --rounds 15
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.milvus_server import free_port, stop_process  # noqa: E402

SITUATE = str(Path(sys.executable).with_name("situate"))
SHORT = "how is the retry delay computed?"
LONG = ("how does the worker retry a failed job with backoff and jitter " * 200)[:8_192]


def raw(port: int, request: bytes, source: str = "127.0.0.1") -> tuple[int, float, bytes]:
    """(status, seconds to the whole answer, body) of one request on its own connection."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=120,
                                  source_address=(source, 0)) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    return int(data.split(b" ", 2)[1]), time.perf_counter() - started, data.partition(
        b"\r\n\r\n")[2]


def get(path: str, host: str = "127.0.0.1", token: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n".encode()


def post(body: bytes, token: str) -> bytes:
    return (f"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def ms(seconds: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(seconds) * 1000, 1),
            "max_ms": round(max(seconds) * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", required=True)
    parser.add_argument("--milvus-uri", required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", help="write the figures here as JSON too")
    args = parser.parse_args()
    token = secrets.token_urlsafe(32)
    port = free_port()
    env = {**os.environ, "SITUATE_API_TOKEN": token}
    log = open(os.devnull, "wb")  # noqa: SIM115 - the server's whole life
    proc = subprocess.Popen([SITUATE, "api", "--collection", args.collection, "--milvus-uri",
                             args.milvus_uri, "--port", str(port)], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    figures: dict[str, object] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if raw(port, get("/healthz"))[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.3)
        for size in (32_000, 100_000):
            path = "/" + "a." * (size // 2)
            for name, request in (("no token", get(path)), ("foreign Host", get(path, "evil.example")),
                                  ("token", get(path, token=token))):
                answers = [raw(port, request) for _ in range(5)]
                figures[f"path {size // 1000} KB, {name}"] = {
                    "status": answers[0][0], **ms([s for _, s, _ in answers])}
            waits = []
            for _ in range(5):
                sender = threading.Thread(target=raw, args=(port, get(path)))
                sender.start()
                waits.append(raw(port, get("/healthz"), "127.0.0.2")[1])
                sender.join()
            figures[f"/healthz from 127.0.0.2 during a {size // 1000} KB path"] = ms(waits)
        nested = b"[" * 1_000 + b"]" * 1_000
        figures["JSON nested 1,000 deep"] = raw(port, post(nested, token))[0]
        short, long = [], []
        for _ in range(args.rounds):
            for query, times in ((SHORT, short), (LONG, long)):
                status, seconds, body = raw(port, post(json.dumps({"query": query}).encode(),
                                                       token))
                assert status == 200, body[:300]
                times.append(seconds)
        figures["short query"] = ms(short)
        figures["8,192-character query"] = ms(long)
        figures["long / short (medians)"] = round(statistics.median(long)
                                                  / statistics.median(short), 2)
        figures["warnings"] = json.loads(body)["warnings"]
        held = []
        try:
            for i in range(300):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(f"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                             f"{token}\r\nX-Forwarded-For: 10.9.{i // 250}.{i % 250 + 1}\r\n"
                             "Content-Length: 100\r\n\r\n{\"query\"".encode())
                held.append(sock)
            time.sleep(1)
            figures["300 held bodies: /healthz from 127.0.0.7"] = raw(
                port, get("/healthz"), "127.0.0.7")[0]
            figures["300 held bodies: search from 127.0.0.7"] = raw(
                port, post(json.dumps({"query": SHORT}).encode(), token), "127.0.0.7")[0]
        finally:
            for sock in held:
                sock.close()
    finally:
        stop_process(proc, timeout=30)
        log.close()
    print(json.dumps(figures, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
