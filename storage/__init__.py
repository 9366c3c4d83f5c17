"""situate.storage: where chunks and contexts are kept (Milvus, memory, the context disk cache);
imports only the core. A store is found by its URI's scheme in the `situate.stores` entry-point
group (`store_kind`), situate's own as another package's: flows and the Retriever meet stores
through `situate.core.protocols` only."""

from __future__ import annotations

from situate.core.errors import InputError
from situate.core.protocols import ChunkStore, StoreKind, StoreSpec
from situate.core.registry import Registry

STORES: Registry[StoreKind] = Registry("store", group="situate.stores")


def scheme(uri: str) -> str:
    """The scheme a store is registered under: `http` for http://host, `file` for a path."""
    head, sep, _ = uri.strip().partition("://")
    return head.lower() if sep else "file"


def uri_problem(uri: str) -> str | None:
    """Why no store opens `uri` (a phrase to follow it), None when one does: its scheme is
    registered and that kind of store takes the URI."""
    name = scheme(uri)
    if not uri.strip():
        return "is empty: give a Milvus Lite file (a path ending in .db) or a server's http(s)://host:port"
    if name not in STORES:
        return (f"has an unknown scheme {name!r}: give a Milvus Lite file (a path ending in .db) "
                f"or one of {', '.join(s + '://' for s in STORES.names() if s != 'file')}")
    return STORES.get(name).uri_problem(uri)


def store_kind(uri: str) -> StoreKind:
    """The kind of store `uri` names, by its scheme (`situate.stores`), the URI checked by that
    kind: one InputError saying why not."""
    from situate.core.uri import shown

    problem = uri_problem(uri)
    if problem is not None:
        raise InputError(f"store URI {shown(uri.strip())!r} {problem}")
    return STORES.get(scheme(uri))


def open_store(uri: str, token: str = "", *, retry_attempts: int | None = None,
               cache_dir: str | None = None) -> ChunkStore:
    """The store at `uri`, opened by the kind its scheme names (`store_kind`): a Milvus Lite
    file, a Milvus server or Zilliz Cloud (their URI), `memory://NAME`, a store held in this
    process (tests, notebooks: nothing is persisted, and stores opened on one NAME share it), or
    a store another package registers. `token` and `retry_attempts` are a Milvus server's;
    `cache_dir` keeps a Milvus Lite collection's lexical index between processes
    (`situate.storage.lexical`)."""
    return store_kind(uri).open(uri, token, retry_attempts=retry_attempts, cache_dir=cache_dir)


def reopen(spec: StoreSpec, token: str = "") -> ChunkStore:
    """The store `spec` names (`ChunkStore.spec`), opened again as `open_store` opens it, here
    or in another process (a Dask worker): `token` is that process's own, never the spec's."""
    return open_store(spec.uri, token, retry_attempts=spec.retry_attempts,
                      cache_dir=spec.cache_dir)


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


def import_store_clients() -> None:
    """The client library situate's own stores open with (pymilvus), imported now: a process
    that runs flows calls this before any run starts (`situate.storage.client.
    import_client_library` says why)."""
    from situate.storage.client import import_client_library

    import_client_library()
