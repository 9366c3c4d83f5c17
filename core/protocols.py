"""The interfaces the layers meet through: flows hand a `ChunkStore` (situate.storage) to the
tasks that search it, and a `ContextCache` (situate.storage) to the contextualizers that use it,
so tasks and storage never import each other.

A store is three parts: `SearchStore`, what searching needs (the Retriever holds one);
`ChunkStore`, that and what an ingest writes through; and `StoreUpkeep`, optional
(`ChunkStore.upkeep`), what a store that drifts from a fresh collection needs done (Milvus's).
Only what the flows and the search path call is here: a store's own extras (dropping a
collection, deleting by document) are its business and its tests'."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from situate.core.errors import InputError
from situate.core.records import CollectionInfo, EmbeddedDocument, Hit, StoredDocument
from situate.core.uri import credentials, shown

# The store's searches, one retriever each; fusing them (hybrid) and reranking are retrieval's
# (situate.tasks.retrieval.search), over any ChunkStore.
LEGS = ("dense", "bm25")


@runtime_checkable
class SearchStore(Protocol):
    """What searching a collection needs of a store: its searches, one leg at a time, and the
    collection's description. The Retriever holds one of these."""

    uri: str

    def exists(self, collection: str) -> bool: ...

    def describe(self, collection: str) -> CollectionInfo: ...

    def require(self, collection: str) -> None: ...

    def count(self, collection: str) -> int: ...

    def leg_search(self, collection: str, leg: str, query_text: str,
                   query_vector: Sequence[float] | None, limit: int) -> list[Hit]:
        """The top `limit` chunks of one retriever (`leg` in LEGS): dense cosine of
        `query_vector`, or BM25 of `query_text`; best first, scores higher-is-better."""
        ...

    def leg_scores(self, collection: str, leg: str, query_text: str,
                   query_vector: Sequence[float] | None, ids: Sequence[str]) -> dict[str, float]:
        """One retriever's own scores of the chunks `ids` (a search restricted to them), on the
        same scale as `leg_search`'s; BM25 gives 0 to a chunk sharing no term with the query."""
        ...

    def ranking(self, collection: str, leg: str, query_text: str,
                query_vector: Sequence[float] | None, limit: int) -> list[tuple[str, float]]:
        """`leg_search`'s ids and scores alone, in its order: what a fusion needs of its legs."""
        ...

    def hits(self, collection: str, ranked: Sequence[tuple[str, float]]) -> list[Hit]:
        """The chunks `ranked` names, in its order and with its scores (ids no longer stored
        left out)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ChunkStore(SearchStore, Protocol):
    """A store of situated, embedded chunks: one collection per corpus, searched one leg at a time;
    what an ingest writes through.

    It owns its rows: given documents' situated chunks and vectors it builds the schema's fields
    (ids, truncation to the field limits, the BM25 text) itself (`situate.storage.rows`).
    `write` replaces whole documents (a changed document's chunks it no longer has are deleted).
    The contract every implementation meets is `situate.testing.store`; `open_store`
    (situate.storage) finds an implementation by its URI's scheme (`StoreKind`).
    """

    @property
    def spec(self) -> StoreSpec:
        """What opens this store again, in this process or another (a Dask worker): its URI and
        options, never its credentials (`StoreSpec`)."""
        ...

    @property
    def upkeep(self) -> StoreUpkeep | None:
        """What keeps the store searching as a fresh one and spares a run reading it back
        (`StoreUpkeep`), or None for a store that needs none: the flows do without it."""
        ...

    def ensure_collection(self, collection: str, dim: int, embedder: str, backend: str = "",
                          precision: str = "") -> None:
        """The collection created if missing, recording the embedder (`name:model`) and how it
        ran; one built with another embedder or dimension refused (EmbedderMismatch, by
        `situate.core.records.same_embedder`)."""
        ...

    def require_embedder(self, collection: str, embedder: str) -> None:
        """An existing collection made ready for `embedder`'s vectors, or EmbedderMismatch (the
        same rule), before any model is loaded to learn the dimension."""
        ...

    def record_ingest(self, collection: str, contexts: str, ingested: str) -> None:
        """Record what the last ingest gave the chunks and when it ended (`describe` says)."""
        ...

    def write(self, collection: str, documents: Iterable[EmbeddedDocument],
              batch_size: int = ..., absent: Collection[str] = ...,
              stored: Mapping[str, Collection[str]] | None = ...) -> int:
        """Whole documents, each replacing what the collection held for it; the rows written.
        `absent` (documents with no rows) and `stored` (each document's row ids) are what the
        caller already knows, so a store need not read them back."""
        ...

    def delete_ids(self, collection: str, ids: Iterable[str]) -> int:
        """Rows deleted by id (documents gone from the corpus); the rows deleted."""
        ...

    def rows(self, collection: str, fields: Sequence[str] = ...) -> Iterator[dict[str, Any]]:
        """Every row, the `fields` asked for, streamed."""
        ...

    def stored_documents(self, collection: str) -> dict[str, StoredDocument]:
        """doc id -> what the collection holds for it (fingerprint, chunk indexes), read in
        one streaming pass: what an incremental ingest plans with."""
        ...


@runtime_checkable
class StoreUpkeep(Protocol):
    """What a store may need beyond reading and writing, and the ingest flow does when a store
    offers it (`ChunkStore.upkeep`): Milvus keeps BM25 statistics per segment, rows deleted or
    replaced included, so a collection kept up to date drifts from a fresh one (drift,
    rebuild, tidy, flush); and reading its rows back is slow, so a run keeps a local copy of
    what it holds, trusted while the token recorded in the store agrees (manifest tokens)."""

    def drift(self, collection: str) -> int:
        """Rows written or deleted since the collection was built in one go or last rebuilt: how
        far its BM25 statistics may be from those of a fresh collection of the same rows."""
        ...

    def add_drift(self, collection: str, rows: int) -> int:
        """Count `rows` more written or deleted (before they are); returns the drift now. Clears
        the manifest token: the rows are about to change."""
        ...

    def rebuild(self, collection: str, order: Iterable[str] = ..., batch_size: int = ...,
                stored: Mapping[str, StoredDocument] | None = ...) -> int:
        """The collection rebuilt from its own rows (documents in `order` first, then chunk
        index) so that it searches like a fresh one, and swapped in whole; drift back to 0.
        `stored`: what it holds per document, when the caller knows (else read). Returns the
        rows copied."""
        ...

    def tidy(self, collection: str) -> None:
        """Whatever a rebuild stopped half-way left behind, finished or undone."""
        ...

    def flush(self, collection: str) -> None:
        """What was written sealed into the store's segments (the end of a run)."""
        ...

    def manifest_token(self, collection: str) -> str:
        """The token of the local copy of `stored_documents` last written for the collection as
        it is ("" when none may be trusted: a run has written since)."""
        ...

    def set_manifest_token(self, collection: str, token: str) -> None: ...


@dataclass(frozen=True)
class StoreSpec:
    """A store as another process opens it again: what `open_store` (situate.storage) takes,
    short of the token. Small and picklable, so a store goes to a Dask worker as its spec and is
    reopened there by the kind its URI's scheme names (`situate.storage.reopen`), the token read
    from that process's own settings (SITUATE_MILVUS_TOKEN): a store need not pickle, and no
    secret travels with a task or shows in its parameters. A URI carrying a user name and
    password is refused, for the same reason."""

    uri: str
    retry_attempts: int | None = None  # the store's retry budget (`open_store`'s)
    cache_dir: str | None = None  # where it keeps what it derives (Milvus Lite's lexical index)

    def __post_init__(self) -> None:
        if credentials(self.uri):
            raise InputError(f"the store URI {shown(self.uri)!r} carries a user name and "
                             "password, which a store opened again elsewhere never takes along: "
                             "give the URI without them and the token (user:password) in "
                             "SITUATE_MILVUS_TOKEN")


@runtime_checkable
class ContextCache(Protocol):
    """Generated contexts by key (get/put); the key covers everything that changes the output."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, context: str) -> None: ...


@runtime_checkable
class StoreKind(Protocol):
    """A kind of store, registered by the URI schemes it opens in the `situate.stores`
    entry-point group (situate.core.plugins; a path without a scheme is `file`): how to open one,
    and the rules its URIs and collections follow, so that nothing above the store applies one
    backend's rules to another. Whether a store needs upkeep is the store's own
    `ChunkStore.upkeep` (None: it needs none)."""

    def open(self, uri: str, token: str = "", *, retry_attempts: int | None = None,
             cache_dir: str | None = None) -> ChunkStore:
        """The store at `uri` (opened: a StoreError says why not)."""
        ...

    def uri_problem(self, uri: str) -> str | None:
        """Why `uri` names no store of this kind (a phrase after the URI), None when it does."""
        ...

    def check_collection(self, name: str) -> str:
        """`name` when a collection may be called so, else an InputError saying what may be."""
        ...

    def holds_in_memory(self, uri: str) -> bool:
        """Whether the store at `uri` keeps its collections in this machine's memory, so that an
        ingest estimates their size and warns before it is over the memory available
        (situate.storage.capacity); False for a server elsewhere."""
        ...

    def shared_problem(self, uri: str) -> str | None:
        """Why other processes (Dask's workers) cannot use the store at `uri` while this one
        does, as a phrase after the URI (a file one process opens at a time, a store held in
        this process's memory); None when they can: each reopens it from its `StoreSpec`."""
        ...
