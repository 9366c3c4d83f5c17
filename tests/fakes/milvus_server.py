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
import threading
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


class MilvusServer:
    """`milvus-lite server` on one data dir and port, which a test can kill and start again: the
    same URI before and after, the same rows (what was acknowledged survives a SIGKILL)."""

    def __init__(self, data_dir: Path, log: Path | None = None, port: int | None = None,
                 timeout: float = 60) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.log = log or data_dir.parent / f"milvus-{self.port}.log"
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> str:
        """Start the server (it must not be running) and wait until it listens; returns its URI."""
        assert not self.running, "milvus-lite server already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [milvus_lite_command(), "server", "--data-dir", str(self.data_dir), "--host",
                 "127.0.0.1", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port(self.port, self.proc, self.timeout, "milvus-lite server")
        return self.uri

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it (and its children): SIGTERM by default, SIGKILL to kill it mid-write."""
        if self.proc is not None:
            stop_process(self.proc, sig=sig)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart_later(self, delay: float) -> threading.Thread:
        """Start the server again after `delay` seconds, from another thread (join it)."""
        def run() -> None:
            time.sleep(delay)
            self.start()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


@contextmanager
def milvus_server(data_dir: Path, log: Path | None = None, timeout: float = 60) -> Iterator[str]:
    """Run `milvus-lite server` on DATA_DIR; yields its URI and stops it (and its children) on exit."""
    server = MilvusServer(data_dir, log, timeout=timeout)
    try:
        yield server.start()
    finally:
        server.stop()


ROW_FIELDS = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash", "chunk_hash")


def snapshot(uri: str, collection: str, token: str = "") -> list[tuple]:
    """Every stored row of COLLECTION as sorted tuples of ROW_FIELDS: what 'same rows' means."""
    from situate.storage.milvus import MilvusStore

    with MilvusStore(uri, token) as store:
        return sorted(tuple(r[f] for f in ROW_FIELDS)
                      for r in store.rows(collection, fields=ROW_FIELDS))
