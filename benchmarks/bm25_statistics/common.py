"""Shared helpers for the BM25-statistics experiments (issue 21).

Schema shape = situate's (storage/rows.py): VARCHAR pk `id`, `doc_id`, `lexical` VARCHAR with
enable_analyzer (standard tokenizer + lowercase), `sparse` = BM25 Function output with
SPARSE_INVERTED_INDEX/BM25, `dense` FLOAT_VECTOR (dim 4 here) AUTOINDEX/COSINE, Strong consistency.

Backends:
  LiteBackend(path)      MilvusClient("path/x.db")   (in-process gRPC server, milvus_lite.server_manager)
  ServerBackend(dir, p)  `milvus-lite server --data-dir DIR --port P` subprocess, MilvusClient(uri=...)
"""
from __future__ import annotations

import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

from pymilvus import DataType, Function, FunctionType, MilvusClient

VENV_BIN = os.path.dirname(sys.executable)


def schema_and_index(client: MilvusClient, dim: int = 4):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("doc_id", DataType.VARCHAR, max_length=64)
    schema.add_field("lexical", DataType.VARCHAR, max_length=8192, enable_analyzer=True,
                     analyzer_params={"tokenizer": "standard", "filter": ["lowercase"]})
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                 input_field_names=["lexical"], output_field_names=["sparse"]))
    index = client.prepare_index_params()
    index.add_index(field_name="dense", index_name="dense", index_type="AUTOINDEX",
                    metric_type="COSINE")
    index.add_index(field_name="sparse", index_name="sparse",
                    index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    return schema, index


def create(client: MilvusClient, name: str, dim: int = 4) -> None:
    if client.has_collection(name):
        client.drop_collection(name)
    schema, index = schema_and_index(client, dim)
    client.create_collection(name, schema=schema, index_params=index, consistency_level="Strong")
    client.load_collection(name)


def bm25_scores(client: MilvusClient, name: str, query: str, limit: int = 1000) -> dict[str, float]:
    """id -> BM25 score (Lite reports -score as distance; take abs)."""
    res = client.search(name, data=[query], anns_field="sparse", limit=limit,
                        search_params={"metric_type": "BM25"}, output_fields=["id"])
    return {h["id"]: abs(float(h["distance"])) for h in res[0]}


def dense_scores(client: MilvusClient, name: str, vec, limit: int = 1000) -> dict[str, float]:
    res = client.search(name, data=[vec], anns_field="dense", limit=limit,
                        search_params={"metric_type": "COSINE"}, output_fields=["id"])
    return {h["id"]: float(h["distance"]) for h in res[0]}


def compare(a: dict[str, float], b: dict[str, float]) -> tuple[bool, float, bool]:
    """(identical, max |diff| over common ids, same id set).

    identical = every id both lists hold has the same score AND the rank-wise score sequences are
    equal (so the lists differ at most in which of several equally-scored ids made the cut-off).
    """
    same_ids = set(a) == set(b)
    common = set(a) & set(b)
    maxdiff = max((abs(a[k] - b[k]) for k in common), default=0.0)
    seq_equal = sorted(a.values(), reverse=True) == sorted(b.values(), reverse=True)
    return (seq_equal and maxdiff == 0.0), maxdiff, same_ids


def same_ranking(a: dict[str, float], b: dict[str, float]) -> bool:
    """Same ids in the same order with the same scores (dicts keep the search's rank order)."""
    return list(a.items()) == list(b.items())


def data_files(root: str, name: str) -> list[str]:
    """Parquet data files (segments) of collection `name` under a Lite data dir."""
    return sorted(p for p in glob.glob(os.path.join(root, "**", "data_*.parquet"), recursive=True)
                  if f"{os.sep}{name}{os.sep}" in p)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiteBackend:
    kind = "lite"

    def __init__(self, path: str):
        self.path = path  # the .db path (a directory for milvus-lite 3.x)
        self.root = path
        self.client = MilvusClient(path)

    def reopen_client(self):
        """client.close() + new MilvusClient in the same process (the in-process server stays up)."""
        self.client.close()
        self.client = MilvusClient(self.path)
        return self.client

    def reopen_db(self):
        """Really close the DB (what process exit does via atexit) and reopen it."""
        from milvus_lite.server_manager import server_manager_instance
        self.client.close()
        server_manager_instance.release_server(self.path)
        self.client = MilvusClient(self.path)
        return self.client

    def stop(self):
        from milvus_lite.server_manager import server_manager_instance
        try:
            self.client.close()
        finally:
            server_manager_instance.release_server(self.path)


class ServerBackend:
    kind = "server"

    def __init__(self, data_dir: str, port: int | None = None):
        self.root = data_dir
        self.port = port or free_port()
        self.proc = None
        self.start()

    def start(self):
        log = open(os.path.join(os.path.dirname(self.root.rstrip("/")) or ".",
                                f"server_{self.port}.log"), "a")
        self.proc = subprocess.Popen(
            [f"{VENV_BIN}/milvus-lite", "server", "--data-dir", self.root,
             "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("server did not start")
        self.client = MilvusClient(uri=f"http://127.0.0.1:{self.port}")

    def reopen_client(self):
        self.client.close()
        self.client = MilvusClient(uri=f"http://127.0.0.1:{self.port}")
        return self.client

    def reopen_db(self, sig=signal.SIGINT):
        """Restart the server process (SIGINT = graceful: flush + close; SIGKILL = WAL replay)."""
        self.client.close()
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)
        self.start()
        return self.client

    def stop(self):
        try:
            self.client.close()
        except Exception:
            pass
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_backend(kind: str, workdir: str):
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    os.makedirs(workdir)
    if kind == "lite":
        return LiteBackend(os.path.join(workdir, "x.db"))
    return ServerBackend(os.path.join(workdir, "data"))


WORDS = None


def vocab(n: int = 5000, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = set()
    while len(out) < n:
        out.add("".join(rnd.choice(letters) for _ in range(rnd.randint(3, 9))))
    return sorted(out)


def zipf_text(rnd: random.Random, words: list[str], chars: int = 600) -> str:
    """~`chars` characters of Zipf-ish random words."""
    parts, size = [], 0
    n = len(words)
    while size < chars:
        # Zipf-like: index ~ n * u^3
        w = words[min(n - 1, int(n * rnd.random() ** 3))]
        parts.append(w)
        size += len(w) + 1
    return " ".join(parts)
