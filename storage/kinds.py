"""situate's own kinds of store, registered by URI scheme in the `situate.stores` entry-point
group (pyproject.toml) as another package registers its own: Milvus (a Milvus Lite file, a
server, Zilliz Cloud) and the store held in memory. Each names its own rules; opening one
imports its module then, not before."""

from __future__ import annotations

from dataclasses import dataclass

from situate.core.errors import InputError, StoreError
from situate.core.protocols import ChunkStore
from situate.core.uri import is_lite, uri_problem
from situate.storage.rows import validate_collection_name


def milvus_collection(name: str) -> str:
    """A Milvus collection name's rule (letters, digits and underscores), as one InputError."""
    try:
        return validate_collection_name(name)
    except StoreError as e:
        raise InputError(str(e)) from None


@dataclass(frozen=True)
class MilvusKind:
    """Milvus: a Lite file (a path ending in .db) or a server's http(s)://host:port."""

    def open(self, uri: str, token: str = "", *, retry_attempts: int | None = None,
             cache_dir: str | None = None) -> ChunkStore:
        from situate.storage.milvus import MilvusStore

        return MilvusStore(uri, token, retry_attempts=retry_attempts, cache_dir=cache_dir)

    def uri_problem(self, uri: str) -> str | None:
        return uri_problem(uri)

    def check_collection(self, name: str) -> str:
        return milvus_collection(name)

    def holds_in_memory(self, uri: str) -> bool:
        return is_lite(uri)  # Milvus Lite keeps every segment in memory; a server is elsewhere

    def shared_problem(self, uri: str) -> str | None:
        if not is_lite(uri):
            return None  # a server: each process connects to it
        return ("is a Milvus Lite file, which one process opens at a time: serve it "
                "(`milvus-lite server --data-dir DIR --port 19530`) or use a Milvus server's "
                "http://HOST:PORT")


@dataclass(frozen=True)
class MemoryKind:
    """`SCHEME://NAME`: a store held in this process, shared by the stores opened on one URI;
    its collections are named as Milvus's are, so a collection moves between the two."""

    def open(self, uri: str, token: str = "", *, retry_attempts: int | None = None,
             cache_dir: str | None = None) -> ChunkStore:
        from situate.storage.memory import MemoryStore

        return MemoryStore(uri)

    def uri_problem(self, uri: str) -> str | None:
        return None if uri.partition("://")[2] else "names no store: add a name after ://"

    def check_collection(self, name: str) -> str:
        return milvus_collection(name)

    def holds_in_memory(self, uri: str) -> bool:
        return True

    def shared_problem(self, uri: str) -> str | None:
        return ("is held in this process's memory, which another process does not see: use a "
                "Milvus server's http://HOST:PORT")


MILVUS = MilvusKind()
MEMORY = MemoryKind()
