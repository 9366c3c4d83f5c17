"""Listing an S3 prefix of many small objects in bounded memory, and what a re-run costs as the
keys grow: moto's S3 server on 127.0.0.1 (its own process, filled directly in its backend so
that the setup costs seconds), then, per size, in a fresh process each:

- `list`: the S3 source's listing alone (every key and ETag, streamed a page at a time): its time
  and the process's peak RSS;
- `seed`: the first sync into a mirror, with the downloads replaced by an empty body (what is
  measured is the listing and the mirror's record of markers, not 100,000 GETs);
- `rerun`: the real sync again (the S3 source, nothing changed): listing, one marker comparison
  per key, no download. Its time is what a scheduled run pays to learn that nothing changed.

    .venv/bin/python benchmarks/bench_source_listing.py --sizes 10000 100000 \\
        --out benchmarks/results/source-listing-s3.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path


def serve(n: int, port: int) -> None:
    """moto's S3 server holding bucket `bench` with `n` objects under `p/`."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_bucket("bench", "us-east-1")
    for i in range(n):
        backend.put_object("bench", f"p/{i // 1000:03}/{i:07}.txt", f"object {i}\n".encode())
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes the pipe
    server.stop()


def measure(step: str, cache: str) -> None:
    """One step in this process; prints a JSON line of seconds, keys and peak RSS."""
    from situate.tasks.sources.mirror import sync
    from situate.tasks.sources.objects import S3Source

    url = "s3://bench/p/"
    started = time.perf_counter()
    if step == "list":
        source = S3Source(url, Path(cache))

        class Nothing:
            def marker(self, doc_id: str) -> None:
                return None

            def body(self, doc_id: str, limit: int) -> None:
                return None

        keys = sum(1 for _ in source.entries(Nothing()))
        done = {"keys": keys}
    else:
        source = S3Source(url, Path(cache))
        if step == "seed":
            source.fetch = lambda entry, limit: b""  # type: ignore[method-assign]
        report = sync(url, cache, 10**6, source=source)
        done = {"keys": report.listed, "fetched": report.fetched, "unchanged": report.unchanged}
    seconds = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({**done, "seconds": round(seconds, 2), "peak_rss_mib": round(rss / 2**20, 1)}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--out", default="")
    parser.add_argument("--serve", type=int, nargs=2, metavar=("N", "PORT"))
    parser.add_argument("--step", nargs=2, metavar=("STEP", "CACHE"))
    args = parser.parse_args()
    if args.serve:
        return serve(*args.serve)
    if args.step:
        return measure(*args.step)
    results = []
    for n in args.sizes:
        port = free_port()
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(n), str(port)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                   "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                   "AWS_DEFAULT_REGION": "us-east-1"}
            row: dict[str, object] = {"objects": n}
            with tempfile.TemporaryDirectory() as cache:
                for step in ("list", "seed", "rerun"):
                    out = subprocess.run([sys.executable, __file__, "--step", step, cache],
                                         env=env, capture_output=True, text=True, check=True)
                    row[step] = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            results.append(row)
        finally:
            if server.stdin is not None:
                server.stdin.close()
            server.wait(timeout=60)
    record = {"benchmark": "source-listing-s3", "finished": datetime.now(UTC).isoformat(timespec="seconds"),
              "command": "python " + " ".join(sys.argv),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
              "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
