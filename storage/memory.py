"""A chunk store held in this process's memory: `open_store("memory://NAME")`.

For tests and notebooks: the same rows as Milvus writes (`situate.storage.rows`), searched
exactly, and nothing persisted. Stores opened on the same URI in one process share its
collections (as connections to one Milvus Lite file do) until the process ends; a store cannot
be sent to another process, and one opened there on its spec holds none of them. It keeps no
BM25 statistics apart from its rows, so it needs no upkeep (`upkeep` is None): a collection
always scores as a fresh one.

How it searches, next to Milvus (`situate.storage.milvus`): the dense leg is the exact cosine
of the query and every row (Milvus's COSINE metric; its indexes approximate it); the BM25 leg
is Okapi BM25 (k1 1.2, b 0.75, Milvus's defaults) over the rows' lexical text and the query's
(`rows.lexical_text`, identifier parts included), tokenized close to Milvus's analyzer
(`rows.collection_schema`: standard tokenizer, lowercase, the same stop words) by splitting on
what is not a word character. Scores come close to Milvus's, not equal; rankings follow the same
rules (higher first, equal scores by id, BM25 returning only chunks sharing a query term).
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from situate.core.errors import CollectionNotFound, EmbedderMismatch, StoreError, suggestion
from situate.core.protocols import LEGS, StoreSpec, StoreUpkeep
from situate.core.records import (
    CollectionInfo,
    EmbeddedDocument,
    Hit,
    StoredDocument,
    same_embedder,
)
from situate.storage.manifest import FIELDS as STORED_FIELDS
from situate.storage.manifest import from_rows
from situate.storage.rows import (
    STOP_WORDS,
    WRITE_BATCH,
    document_rows,
    groups_of_documents,
    lexical_text,
    validate_collection_name,
)

SCHEME = "memory://"  # the URI scheme situate registers this store under (`situate.storage.kinds`)
ROW_FIELDS = ("id", "doc_id", "chunk_index", "text", "context", "doc_hash", "chunk_hash")
# Okapi BM25's parameters as Milvus's BM25 function defaults them.
K1, B = 1.2, 0.75
_WORD = re.compile(r"\w+")
_STOP = frozenset(STOP_WORDS)


def tokens(text: str) -> list[str]:
    """The BM25 terms of `text`: its words, lowercased, stop words left out."""
    return [t for t in _WORD.findall(text.lower()) if t not in _STOP]


@dataclass
class _Collection:
    """One collection: its rows by id (in the order written), their terms and unit vectors."""

    info: CollectionInfo
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    terms: dict[str, Counter[str]] = field(default_factory=dict)
    units: dict[str, np.ndarray] = field(default_factory=dict)
    by_doc: dict[str, set[str]] = field(default_factory=dict)

    def put(self, row: dict[str, Any]) -> None:
        row_id = row["id"]
        old = self.rows.get(row_id)
        if old is not None and old["doc_id"] != row["doc_id"]:
            self.by_doc[old["doc_id"]].discard(row_id)
        vector = np.asarray(row["dense"], dtype=np.float64)
        norm = float(np.linalg.norm(vector))
        self.rows[row_id] = {k: v for k, v in row.items() if k not in ("dense", "lexical")}
        self.terms[row_id] = Counter(tokens(row["lexical"]))
        self.units[row_id] = vector / norm if norm else vector
        self.by_doc.setdefault(row["doc_id"], set()).add(row_id)

    def remove(self, row_id: str) -> bool:
        row = self.rows.pop(row_id, None)
        if row is None:
            return False
        del self.terms[row_id], self.units[row_id]
        held = self.by_doc.get(row["doc_id"])
        if held is not None:
            held.discard(row_id)
            if not held:
                del self.by_doc[row["doc_id"]]
        return True

    def scores(self, leg: str, query_text: str, query_vector: Sequence[float] | None,
               ids: Iterable[str]) -> dict[str, float]:
        """One leg's score of each row of `ids` that scores (BM25: shares a query term)."""
        if leg == "dense":
            assert query_vector is not None
            q = np.asarray(query_vector, dtype=np.float64)
            norm = float(np.linalg.norm(q))
            q = q / norm if norm else q
            return {i: float(self.units[i] @ q) for i in ids}
        query = set(tokens(lexical_text(query_text)))
        if not query or not self.rows:
            return {}
        n = len(self.rows)
        df = {t: sum(1 for c in self.terms.values() if t in c) for t in query}
        idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items() if d}
        mean = sum(sum(c.values()) for c in self.terms.values()) / n
        scores: dict[str, float] = {}
        for i in ids:
            counts = self.terms[i]
            length = sum(counts.values())
            score = 0.0
            for t, w in idf.items():
                tf = counts.get(t, 0)
                if tf:
                    score += w * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / (mean or 1)))
            if score > 0:
                scores[i] = score
        return scores


class _Space:
    """The collections of one `memory://NAME`, shared by every store opened on it here."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.collections: dict[str, _Collection] = {}


_SPACES: dict[str, _Space] = {}
_SPACES_LOCK = threading.Lock()


def is_memory(uri: str) -> bool:
    """A URI a memory store may be opened on: `SCHEME://NAME`, under situate's scheme or the one
    another package registers it under."""
    return bool(uri.partition("://")[2])


class MemoryStore:
    """A `ChunkStore` in this process's memory (module docstring); safe to share between
    threads."""

    upkeep: StoreUpkeep | None = None

    def __init__(self, uri: str = SCHEME) -> None:
        if not is_memory(uri):
            raise StoreError(f"{uri!r} is not a memory store's URI: use {SCHEME}NAME")
        self.uri = uri
        with _SPACES_LOCK:
            self._space = _SPACES.setdefault(uri, _Space())
        self._lock = self._space.lock

    @property
    def spec(self) -> StoreSpec:
        """Its URI: a store opened on it again in this process shares its collections (in
        another it would hold none of them: `MemoryKind.shared_problem`)."""
        return StoreSpec(self.uri)

    def __reduce__(self) -> Any:
        raise StoreError(f"the store {self.uri} is held in this process's memory and cannot be "
                         "sent to another process: use a Milvus store for distributed runs")

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to let go: the collections stay for the next store opened on the URI."""

    def _get(self, collection: str) -> _Collection:
        found = self._space.collections.get(validate_collection_name(collection))
        if found is None:
            raise CollectionNotFound(collection, self.uri,
                                     suggestion(collection, self._space.collections))
        return found

    # --- collections -----------------------------------------------------------------------

    def exists(self, collection: str) -> bool:
        return validate_collection_name(collection) in self._space.collections

    def describe(self, collection: str) -> CollectionInfo:
        with self._lock:
            return self._get(collection).info

    def require(self, collection: str) -> None:
        self._get(collection)

    def ensure_collection(self, collection: str, dim: int, embedder: str, backend: str = "",
                          precision: str = "") -> None:
        with self._lock:
            if self.exists(collection):
                info = self.describe(collection)
                if info.dim != dim or not same_embedder(info.embedder, embedder):
                    raise EmbedderMismatch(collection, self.uri, info.embedder, embedder,
                                           info.dim, dim)
                return
            self._space.collections[collection] = _Collection(
                CollectionInfo(dim, embedder, backend=backend, precision=precision))

    def require_embedder(self, collection: str, embedder: str) -> None:
        stored = self.describe(collection).embedder
        if not same_embedder(stored, embedder):
            raise EmbedderMismatch(collection, self.uri, stored, embedder)

    def record_ingest(self, collection: str, contexts: str, ingested: str) -> None:
        with self._lock:
            c = self._get(collection)
            c.info = CollectionInfo(c.info.dim, c.info.embedder, contexts, ingested,
                                    c.info.backend, c.info.precision)

    # --- writes ----------------------------------------------------------------------------

    def write(self, collection: str, documents: Iterable[EmbeddedDocument],
              batch_size: int = WRITE_BATCH, absent: Collection[str] = (),
              stored: Mapping[str, Collection[str]] | None = None) -> int:
        """Whole documents, each replacing what the collection held for it, a group of about
        `batch_size` rows at a time (as Milvus writes them: a document whose rows cannot be
        built leaves its group unwritten). `absent` and `stored` are hints a store that must
        read back what it holds uses; this one knows."""
        written = 0
        for group in groups_of_documents(documents, batch_size):
            rows = [row for doc in group for row in document_rows(doc)]
            with self._lock:
                c = self._get(collection)
                dim = c.info.dim
                for row in rows:
                    if len(row["dense"]) != dim:
                        raise StoreError(f"collection {collection!r} at {self.uri} holds "
                                         f"{dim}-d vectors, not {len(row['dense'])}-d")
                held = {i for d in group for i in c.by_doc.get(d.doc.id, ())}
                for row in rows:
                    c.put(row)
                for row_id in held - {r["id"] for r in rows}:
                    c.remove(row_id)
            written += len(rows)
        return written

    def delete_ids(self, collection: str, ids: Iterable[str]) -> int:
        with self._lock:
            c = self._get(collection)
            return sum(c.remove(i) for i in list(ids))

    # --- reads -----------------------------------------------------------------------------

    def count(self, collection: str) -> int:
        with self._lock:
            return len(self._get(collection).rows)

    def rows(self, collection: str, fields: Sequence[str] = ROW_FIELDS) -> Iterator[dict[str, Any]]:
        with self._lock:
            rows = list(self._get(collection).rows.values())
        for row in rows:
            yield {f: row[f] for f in fields}

    def stored_documents(self, collection: str) -> dict[str, StoredDocument]:
        return from_rows(self.rows(collection, fields=STORED_FIELDS))

    def leg_search(self, collection: str, leg: str, query_text: str,
                   query_vector: Sequence[float] | None, limit: int) -> list[Hit]:
        return self.hits(collection, self.ranking(collection, leg, query_text, query_vector,
                                                  limit))

    def ranking(self, collection: str, leg: str, query_text: str,
                query_vector: Sequence[float] | None, limit: int) -> list[tuple[str, float]]:
        _check_leg(leg, query_vector)
        with self._lock:
            c = self._get(collection)
            scores = c.scores(leg, query_text, query_vector, list(c.rows))
        return sorted(scores.items(), key=lambda p: (-p[1], p[0]))[:limit]

    def leg_scores(self, collection: str, leg: str, query_text: str,
                   query_vector: Sequence[float] | None, ids: Sequence[str]) -> dict[str, float]:
        if not ids:
            return {}
        _check_leg(leg, query_vector)
        with self._lock:
            c = self._get(collection)
            held = [i for i in dict.fromkeys(ids) if i in c.rows]
            found = c.scores(leg, query_text, query_vector, held)
        return {**dict.fromkeys(ids, 0.0), **found} if leg == "bm25" else found

    def hits(self, collection: str, ranked: Sequence[tuple[str, float]]) -> list[Hit]:
        with self._lock:
            rows = self._get(collection).rows
            return [Hit(id=i, doc_id=r["doc_id"], index=int(r["chunk_index"]), text=r["text"],
                        context=r["context"], score=score, metadata=dict(r.get("metadata") or {}))
                    for i, score in ranked if (r := rows.get(i)) is not None]


def _check_leg(leg: str, query_vector: Sequence[float] | None) -> None:
    if leg not in LEGS:
        raise StoreError(f"unknown search leg {leg!r}: use one of {', '.join(LEGS)}")
    if leg == "dense" and query_vector is None:
        raise StoreError("a dense search needs a query vector")
