"""The interfaces the layers meet through: flows hand a `ChunkStore` (situate.storage; a
`SearchStore` is the part searching needs, `StoreUpkeep` the part that keeps it) to the tasks
that search it, and a `ContextCache` (situate.storage) to the contextualizers that use it,
so tasks and storage never import each other."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from situate.core.records import CollectionInfo, EmbeddedDocument, Hit, StoredDocument

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

    def rows(self, collection: str, fields: Sequence[str] = ...) -> Iterator[dict[str, Any]]: ...

    def search(self, collection: str, leg: str, query_text: str,
               query_vector: Sequence[float] | None, limit: int) -> list[Hit]:
        """The top `limit` chunks of one retriever (`leg` in LEGS): dense cosine of
        `query_vector`, or BM25 of `query_text`; best first, scores higher-is-better."""
        ...

    def leg_scores(self, collection: str, leg: str, query_text: str,
                   query_vector: Sequence[float] | None, ids: Sequence[str]) -> dict[str, float]:
        """One retriever's own scores of the chunks `ids` (a search restricted to them), on the
        same scale as `search`'s; BM25 gives 0 to a chunk sharing no term with the query."""
        ...

    def ranking(self, collection: str, leg: str, query_text: str,
                query_vector: Sequence[float] | None, limit: int) -> list[tuple[str, float]]:
        """`search`'s ids and scores alone, in its order: what a fusion needs of its legs."""
        ...

    def hits(self, collection: str, ranked: Sequence[tuple[str, float]]) -> list[Hit]:
        """The chunks `ranked` names, in its order and with its scores (ids no longer stored
        left out)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class StoreUpkeep(Protocol):
    """What a store may offer beyond reading and writing: keeping a collection's BM25 statistics
    fresh (drift, rebuild), finishing a rebuild cut short (tidy), and the token of the local copy
    of what it holds (manifest)."""

    def manifest_token(self, collection: str) -> str:
        """The token of the local copy of `stored_documents` last written for the collection as
        it is ("" when none may be trusted: a run has written since)."""
        ...

    def set_manifest_token(self, collection: str, token: str) -> None: ...

    def drift(self, collection: str) -> int:
        """Rows written or deleted since the collection was built in one go or last rebuilt: how
        far its BM25 statistics may be from those of a fresh collection of the same rows."""
        ...

    def add_drift(self, collection: str, rows: int) -> int:
        """Count `rows` more written or deleted (before they are); returns the drift now."""
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



@runtime_checkable
class ChunkStore(SearchStore, StoreUpkeep, Protocol):
    """A store of situated, embedded chunks: one collection per corpus, searched one leg at a time.

    It owns its rows: given documents' situated chunks and vectors it builds the schema's fields
    (ids, truncation to the field limits, the BM25 text) itself. `write` replaces whole documents
    (a changed document's chunks it no longer has are deleted); `fingerprints` gives, per document
    id, each stored chunk id and the fingerprint it was written with. The contract every
    implementation meets is `tests/store_contract.py`; `open_store` (situate.storage) is where
    the one implementation, Milvus, is named.
    """

    # A copy made in another process (a Dask worker), whose connection ends with its task.
    copied: bool

    def ensure_collection(self, collection: str, dim: int, embedder: str, backend: str = "",
                          precision: str = "") -> None: ...

    def check_embedder(self, collection: str, embedder: str) -> None: ...

    def record_ingest(self, collection: str, contexts: str, ingested: str) -> None:
        """Record what the last ingest gave the chunks and when it ended (`describe` says)."""
        ...

    def drop(self, collection: str) -> None: ...

    def write(self, collection: str, documents: Iterable[EmbeddedDocument],
              batch_size: int = ..., absent: Collection[str] = ...,
              stored: Mapping[str, Collection[str]] | None = ...) -> int: ...

    def stored_documents(self, collection: str) -> dict[str, StoredDocument]:
        """doc id -> what the collection holds for it (fingerprint, chunk indexes), read in
        one streaming pass."""
        ...

    def fingerprints(self, collection: str,
                     doc_ids: Sequence[str] | None = None) -> dict[str, dict[str, str]]: ...

    def document_ids(self, collection: str) -> set[str]: ...

    def delete_documents(self, collection: str, doc_ids: Sequence[str]) -> int: ...

    def delete_ids(self, collection: str, ids: Iterable[str]) -> int: ...

    def flush(self, collection: str) -> None:
        """What was written sealed into the store's segments (the end of a run)."""
        ...



@runtime_checkable
class ContextCache(Protocol):
    """Generated contexts by key (get/put); the key covers everything that changes the output."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, context: str) -> None: ...
