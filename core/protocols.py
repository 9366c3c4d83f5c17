"""The interfaces the layers meet through: flows hand a `ChunkStore` (situate.storage) to the
tasks that search it, and a `ContextCache` (situate.storage) to the contextualizers that use it,
so tasks and storage never import each other."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from situate.core.records import EmbeddedDocument, Hit

SEARCH_MODES = ("dense", "bm25", "hybrid")


@runtime_checkable
class ChunkStore(Protocol):
    """A store of situated, embedded chunks: one collection per corpus, searchable three ways.

    It owns its rows: given documents' situated chunks and vectors it builds the schema's fields
    (ids, truncation to the field limits, the BM25 text) itself. `write` replaces whole documents
    (a changed document's chunks it no longer has are deleted); `fingerprints` gives, per document
    id, each stored chunk id and the fingerprint it was written with. The contract every
    implementation meets is `tests/store_contract.py`.
    """

    uri: str

    def exists(self, collection: str) -> bool: ...

    def ensure_collection(self, collection: str, dim: int, embedder: str) -> None: ...

    def check_embedder(self, collection: str, embedder: str) -> None: ...

    def describe(self, collection: str) -> dict[str, Any]: ...

    def require(self, collection: str) -> None: ...

    def drop(self, collection: str) -> None: ...

    def write(self, collection: str, documents: Iterable[EmbeddedDocument],
              batch_size: int = ..., absent: Collection[str] = ...) -> int: ...

    def fingerprints(self, collection: str,
                     doc_ids: Sequence[str] | None = None) -> dict[str, dict[str, str]]: ...

    def document_ids(self, collection: str) -> set[str]: ...

    def delete_documents(self, collection: str, doc_ids: Sequence[str]) -> int: ...

    def delete_ids(self, collection: str, ids: Sequence[str]) -> int: ...

    def count(self, collection: str) -> int: ...

    def rows(self, collection: str, fields: Sequence[str] = ...) -> Iterator[dict[str, Any]]: ...

    def search(self, collection: str, mode: str, query_text: str,
               query_vector: Sequence[float] | None, limit: int,
               fusion: str | None = None) -> list[Hit]: ...

    def close(self) -> None: ...


@runtime_checkable
class ContextCache(Protocol):
    """Generated contexts by key (get/put); the key covers everything that changes the output."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, context: str) -> None: ...
