"""A real Milvus server for tests: `milvus-lite server` on a free loopback port, stopped afterwards.

Clients reach it over gRPC at http://127.0.0.1:PORT, the same code path a Milvus Standalone,
Distributed or Zilliz Cloud user takes, and several processes (Dask workers, a Prefect worker) can
share it, which a Milvus Lite file does not allow.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (free unless someone races for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def stop_process(proc: subprocess.Popen, timeout: float = 15, sig: int = signal.SIGTERM) -> None:
    """Signal the process group we started (SIGTERM by default), then SIGKILL it if it does not go."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout)


def milvus_lite_command() -> str:
    exe = Path(sys.executable).with_name("milvus-lite")
    return str(exe) if exe.exists() else (shutil.which("milvus-lite") or "milvus-lite")


@contextmanager
def milvus_server(data_dir: Path, log: Path | None = None, timeout: float = 60) -> Iterator[str]:
    """Run `milvus-lite server` on DATA_DIR; yields its URI and stops it (and its children) on exit."""
    port = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = log or data_dir.parent / f"milvus-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [milvus_lite_command(), "server", "--data-dir", str(data_dir), "--host", "127.0.0.1",
             "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc, timeout, "milvus-lite server")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


ROW_FIELDS = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash", "chunk_hash")


def snapshot(uri: str, collection: str, token: str = "") -> list[tuple]:
    """Every stored row of COLLECTION as sorted tuples of ROW_FIELDS: what 'same rows' means."""
    from storage.milvus import open_store

    rows = open_store(uri, token).rows(collection, fields=ROW_FIELDS)
    return sorted(tuple(r[f] for f in ROW_FIELDS) for r in rows)
