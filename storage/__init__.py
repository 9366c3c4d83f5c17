"""situate.storage: where chunks and contexts are kept (Milvus, memory, the context disk cache);
imports only the core. `open_store` is the one place that names the stores' implementations:
flows and the Retriever meet them through `situate.core.protocols` only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from situate.core.protocols import ChunkStore

MEMORY = "memory://"


def open_store(uri: str, token: str = "", *, retry_attempts: int | None = None,
               cache_dir: str | None = None) -> ChunkStore:
    """The store at `uri`: a Milvus Lite file, a Milvus server or Zilliz Cloud (their URI), or
    `memory://NAME`, a store held in this process (tests, notebooks: nothing is persisted, and
    stores opened on one NAME share it). `token` and `retry_attempts` are a Milvus server's;
    `cache_dir` keeps a Milvus Lite collection's lexical index between processes
    (`situate.storage.lexical`)."""
    if uri.startswith(MEMORY):
        from situate.storage.memory import MemoryStore

        return MemoryStore(uri)
    from situate.storage.milvus import MilvusStore

    return MilvusStore(uri, token, retry_attempts=retry_attempts, cache_dir=cache_dir)


def open_existing(uri: str, collection: str, token: str = "", *,
                  retry_attempts: int | None = None, cache_dir: str | None = None) -> ChunkStore:
    """The store holding `collection`, for reading: a Milvus Lite file that does not exist is not
    created (opening one would create it), and a missing collection is one CollectionNotFound
    that says to ingest first."""
    from situate.core.errors import CollectionNotFound

    CollectionNotFound.unless_lite_file(collection, uri)
    store = open_store(uri, token, retry_attempts=retry_attempts, cache_dir=cache_dir)
    try:
        store.require(collection)
    except BaseException:
        store.close()
        raise
    return store
