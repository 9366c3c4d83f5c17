"""The chunk store on Milvus: one collection per corpus, with a dense vector and Milvus's own BM25
sparse vector, written from situated, embedded documents.

Works the same on Milvus Lite, a Milvus server or Zilliz Cloud, each call made and retried by
its `Connection` (`situate.storage.client`). The rows themselves (fields, limits, BM25 text) are
built in `situate.storage.rows`. `MilvusStore` implements `situate.core.protocols.ChunkStore`.
Every write is idempotent (deterministic ids, upserts, deletes by id), so a retried call, or the
next run after a failed one, never duplicates a row.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from situate.core.errors import CollectionNotFound, EmbedderMismatch, StoreError, suggestion
from situate.core.protocols import LEGS, StoreSpec, StoreUpkeep
from situate.core.records import (
    CollectionInfo,
    EmbeddedDocument,
    Hit,
    StoredDocument,
    batched,
    same_embedder,
)
from situate.storage.client import (
    RETRY_ATTEMPTS,
    RETRY_BASE,
    RETRY_CAP,
    Connection,
    vectors_decoded,
)
from situate.storage.coalesce import Coalescer, rows_of
from situate.storage.cosines import cosines, float32
from situate.storage.faults import is_not_loaded, writing
from situate.storage.generations import GENERATION, Generations
from situate.storage.lexical import BUILD_PAGE, POLL_SECONDS, Bm25, LexicalLeg, Stamp
from situate.storage.manifest import FIELDS as STORED_FIELDS
from situate.storage.manifest import TOKEN, Manifest, cache_key, from_rows
from situate.storage.rows import (
    WRITE_BATCH,
    collection_schema,
    dense_search_params,
    doc_filter,
    document_rows,
    groups_of_documents,
    indexes_for,
    lexical_text,
    validate_collection_name,
)

DELETE_BATCH = 4096  # primary keys per delete call
# Rows per page of a read: the query iterator's most when the fields are narrow, else fewer.
SCAN_PAGE = 16384
WIDE_PAGE = 1000
# The hex digits of a chunk id that cut a read on Milvus Lite into slices (`_slices`).
ID_DIGITS = 6
ID_SPACE = 16 ** ID_DIGITS
# Slices of a read on Milvus Lite asked for ahead of the one being taken (`MilvusStore._sliced`).
SLICES_AHEAD = 2
NARROW_FIELDS = frozenset({"id", "doc_id", "chunk_index", "doc_hash", "chunk_hash"})
HIT_FIELDS = ["doc_id", "chunk_index", "text", "context", "metadata"]
# What the lexical index reads of a row (`situate.storage.lexical`).
LEXICAL_FIELDS = ["id", "doc_id", "doc_hash", "lexical", "dense"]
BUILD_DIM = 384  # the vectors' dimension for which the index's build reads BUILD_PAGE rows a page
# How a `milvus-lite server` names its version: its BM25 is Lite's, answered by the lexical index.
LITE_SERVER = "milvus_lite"
# Hits asked for beyond a search's limit, so that chunks tying with the last one kept are seen
# and the cut between equal scores is made by id (`MilvusStore.search`); Milvus's top-k ceiling.
TIE_MARGIN = 16
MAX_TOPK = 16_384
# How long rows read with a search's dense scores (`MilvusStore.leg_scores` on Milvus Lite) may
# stand for the same chunks' hits (`MilvusStore.hits`): one query's fusion, not longer than the
# lexical index trusts its stamp.
FETCHED_SECONDS = POLL_SECONDS
# What a collection records of itself, as collection properties (a rebuild copies them).
EMBEDDER, CONTEXTS, INGESTED = "situate.embedder", "situate.contexts", "situate.ingested"
# How the embedder ran when the collection was made (torch, onnx-int8, ...; fp32, int8, ...).
BACKEND, PRECISION = "situate.embedder.backend", "situate.embedder.precision"
T = TypeVar("T")
log = logging.getLogger("situate.storage.milvus")
# Loads of a collection that still reads "not loaded" afterwards, before giving up (`load`).
LOAD_TRIES = 5
__all__ = ["RETRY_ATTEMPTS", "RETRY_BASE", "RETRY_CAP", "WRITE_BATCH", "MilvusStore"]


def _sparse_ready() -> None:
    """Import scipy.sparse now, in the thread that opens the store, before any search.

    pymilvus imports scipy.sparse on a search's first check of its data (`client.utils`), in the
    searching thread; the lexical index imports it on its first BM25 search, in another. Two
    threads importing scipy's modules at once can meet in Python's import locks the other way
    round ("deadlock detected by _ModuleLock('scipy.sparse')" failed a hybrid search's dense
    leg). Imported once here, neither imports it again: the first search would pay it anyway."""
    import scipy.sparse  # noqa: F401


class MilvusStore(Connection):
    """Schema, rows, batched writes, deletes by document and one-leg searches over one client.

    A collection is an alias of its current generation (`situate.storage.generations`), which a
    rebuild replaces whole.

    On Milvus Lite (a file, or a `milvus-lite server`), BM25 searches and scores are answered by
    a lexical index derived from the collection's rows (`situate.storage.lexical`), kept under
    `cache_dir` when one is given (else built in memory by each process); `native_bm25` leaves
    them to Lite. A Milvus server computes BM25 itself."""

    cache_dir: str | None = None
    native_bm25: bool = False
    _lite_engine: bool | None = None
    _lexical: dict[str, LexicalLeg] | None = None
    _fetched: dict[tuple[str, str], tuple[float, dict[str, Any]]] | None = None
    _coalescer: Coalescer[Any, Any] | None = None

    def __init__(self, uri: str, token: str = "", db_name: str = "", *,
                 retry_attempts: int | None = None, retry_base: float | None = None,
                 retry_cap: float | None = None, stop: threading.Event | None = None,
                 cache_dir: str | None = None, native_bm25: bool = False) -> None:
        _sparse_ready()
        super().__init__(uri, token, db_name, retry_attempts=retry_attempts,
                         retry_base=retry_base, retry_cap=retry_cap, stop=stop)
        self.cache_dir = cache_dir
        self.native_bm25 = native_bm25

    @property
    def spec(self) -> StoreSpec:
        """The URI, the retry budget and the lexical index's directory: what `open_store` opens
        this store with again, elsewhere; the token stays here."""
        return StoreSpec(self._uri, self.retry.max_attempts, self.cache_dir)

    @property
    def generations(self) -> Generations:
        return Generations(self)

    @property
    def upkeep(self) -> StoreUpkeep:
        """Itself: drift, rebuilds, flushes and manifest tokens are a Milvus store's own."""
        return self

    # --- schema ----------------------------------------------------------------------------------

    def exists(self, collection: str) -> bool:
        name = validate_collection_name(collection)
        return bool(self._call(f"looking up collection {name!r}",
                               lambda: self.client.has_collection(name)))

    def ensure_collection(self, collection: str, dim: int, embedder: str, backend: str = "",
                          precision: str = "") -> None:
        """Create the collection if missing, recording the embedder and how it ran (`backend`,
        `precision`); refuse one built with another embedder (`same_embedder`: another
        precision of the same model is the same vector space, allowed) or dimension.

        Each step is safe to repeat: a run cut off between creating the collection and indexing
        it (or a retried create whose first attempt went through) finishes the job next time.
        """
        validate_collection_name(collection)
        if self.exists(collection):
            info = self.describe(collection)
            if info.dim != dim or not same_embedder(info.embedder, embedder):
                raise EmbedderMismatch(collection, self.uri, info.embedder, embedder, info.dim, dim)
            self._ensure_indexes(collection)
            self.load(collection)
            return
        self.generations.create(collection, collection_schema(self.client, dim, mmap=not self.is_local),
                                {EMBEDDER: embedder, BACKEND: backend, PRECISION: precision})
        self.index_and_load(collection)

    def index_and_load(self, collection: str) -> None:
        """Every index the collection needs, created where missing, and the collection loaded."""
        self._ensure_indexes(collection)
        self.load(collection)

    def schema(self, collection: str) -> Any:
        """A new collection's schema for the vectors of `collection` (situate's one schema)."""
        dim = self.describe(collection).dim
        if dim is None:
            raise StoreError(f"collection {collection!r} at {self.uri} has no dense vector field")
        return collection_schema(self.client, dim, mmap=not self.is_local)

    def _ensure_indexes(self, collection: str) -> None:
        """Create whichever of the collection's indexes is missing (all of them when new): on a
        server, HNSW for the dense vectors (`rows.SERVER_INDEXES`); in Milvus Lite, AUTOINDEX."""
        wanted = indexes_for(server=not self.is_local)

        def create() -> None:
            present = set(self.client.list_indexes(collection))
            missing = [f for f in wanted if f not in present]
            if not missing:
                return
            index = self.client.prepare_index_params()
            for field in missing:
                index.add_index(field_name=field, index_name=field, **wanted[field])
            # sync=False: waiting on index builds needs a timestamp service Milvus Lite lacks;
            # load_collection waits for what a search needs on every deployment.
            self.client.create_index(collection, index, sync=False)

        self._call(f"indexing collection {collection!r}", create, write=True)

    def require_embedder(self, collection: str, embedder: str) -> None:
        """An existing collection indexed and loaded for `embedder`'s vectors; one built with
        another embedder refused (`same_embedder`)."""
        stored = self.describe(collection).embedder
        if not same_embedder(stored, embedder):
            raise EmbedderMismatch(collection, self.uri, stored, embedder)
        self._ensure_indexes(collection)
        self.load(collection)

    def describe(self, collection: str) -> CollectionInfo:
        info = self._call(f"describing collection {collection!r}",
                          lambda: self.client.describe_collection(collection))
        dim = next((f.get("params", {}).get("dim") for f in info.get("fields", [])
                    if f.get("name") == "dense"), None)
        properties = info.get("properties") or {}
        return CollectionInfo(int(dim) if dim is not None else None, properties.get(EMBEDDER, ""),
                              properties.get(CONTEXTS, ""), properties.get(INGESTED, ""),
                              properties.get(BACKEND, ""), properties.get(PRECISION, ""))

    def record_ingest(self, collection: str, contexts: str, ingested: str) -> None:
        """What the last ingest gave the collection's chunks (`contexts`) and when it ended,
        recorded on the collection for `describe`."""
        def record() -> None:
            physical = str(self.client.describe_collection(collection).get("collection_name")
                           or collection)
            self.client.alter_collection_properties(
                physical, properties={CONTEXTS: contexts, INGESTED: ingested})

        self._call(f"recording the ingest of {collection!r}", record, write=True)

    def require(self, collection: str) -> None:
        if not self.exists(collection):
            raise CollectionNotFound(collection, self.uri, suggestion(collection, self._names()))
        self.load(collection)

    def _names(self) -> list[str]:
        """The collections by the names they were made with (a generation by its name)."""
        listed = self._call("listing collections", self.client.list_collections)
        return [m.group("name") if (m := GENERATION.match(c)) else c for c in listed]

    def drop(self, collection: str) -> None:
        """The collection gone: its alias and every generation."""
        self.generations.drop(validate_collection_name(collection))
        if self._lexical is not None:
            self._lexical.pop(collection, None)

    # --- drift and rebuild (situate.storage.generations) ---------------------------------------

    def drift(self, collection: str) -> int:
        return self.generations.drift(collection)

    def add_drift(self, collection: str, rows: int) -> int:
        self._changed(collection)
        return self.generations.add_drift(collection, rows)

    def rebuild(self, collection: str, order: Iterable[str] = (),
                batch_size: int = WRITE_BATCH,
                stored: Mapping[str, StoredDocument] | None = None) -> int:
        """The collection rewritten from its own rows, in `order` of documents, and put in the
        place of the old one in one step (see `Generations.rebuild`); returns the rows copied."""
        self._changed(collection)
        return self.generations.rebuild(validate_collection_name(collection), order,
                                        batch_size, stored).rows

    def tidy(self, collection: str) -> None:
        """Whatever a stopped rebuild left, finished or undone (`Generations.tidy`)."""
        self.generations.tidy(validate_collection_name(collection))

    # --- writes ----------------------------------------------------------------------------------

    def write(self, collection: str, documents: Iterable[EmbeddedDocument],
              batch_size: int = WRITE_BATCH, absent: Collection[str] = (),
              stored: Mapping[str, Collection[str]] | None = None) -> int:
        """Write whole documents: each one's rows replace whatever the collection held for it.

        Documents are grouped into upserts of about `batch_size` rows, never split unless one alone
        is larger. Per group, the chunk ids already stored for its documents are read first and
        those the documents no longer produce are deleted once the new rows are in: a changed
        document that lost chunks keeps none of them. Every step is idempotent, so a call retried
        after its first attempt went through (in part or whole) leaves the same rows. A run that
        stops in between leaves stale rows next to the new ones, which a fingerprint comparison
        sees as a changed document. Returns the rows written.

        What the caller knows is not read back: `absent` names documents with no rows stored
        (new ones of an incremental plan), and `stored` gives the ids stored for each document it
        names (a plan's `StoredDocument.ids`), any document it does not name having none.
        """
        written = 0
        with writing():
            for group in groups_of_documents(documents, batch_size):
                rows = [row for doc in group for row in document_rows(doc)]
                if stored is None:
                    held = self._stored_ids(collection,
                                            [d.doc.id for d in group if d.doc.id not in absent])
                else:
                    held = {i for d in group for i in stored.get(d.doc.id, ())}
                written += self.upsert(collection, rows, batch_size)
                self.delete_ids(collection, sorted(held - {r["id"] for r in rows}))
        return written

    def upsert(self, collection: str, rows: Iterable[dict[str, Any]],
               batch_size: int = WRITE_BATCH) -> int:
        """Upsert rows already in this schema (as `document_rows` builds them, or read back from
        bulk files) in batches; each batch is one atomic Milvus call, retried whole. Returns rows
        written."""
        written = 0
        self._changed(collection)
        leg = (self._lexical or {}).get(collection)
        for batch in batched(rows, batch_size):
            data = list(batch)
            self._call(f"upsert into {collection!r}",
                       partial(self.client.upsert, collection, data), write=True)
            if leg is not None:
                leg.upserted(data)
            written += len(data)
        return written

    def _stored_ids(self, collection: str, doc_ids: Sequence[str]) -> set[str]:
        return {r["id"] for expr in _doc_filters(doc_ids)
                for r in self.rows(collection, fields=("id",), filter=expr)}

    def delete_documents(self, collection: str, doc_ids: Sequence[str]) -> int:
        if not doc_ids:
            return 0
        deleted = 0
        self._changed(collection)
        for expr in _doc_filters(doc_ids):
            res = self._call(f"deleting documents from {collection!r}",
                             partial(self.client.delete, collection, filter=expr), write=True)
            deleted += _deleted_count(res)
        if (leg := (self._lexical or {}).get(collection)) is not None:
            leg.deleted(documents=doc_ids)
        return deleted

    def delete_ids(self, collection: str, ids: Iterable[str]) -> int:
        """Delete rows by primary key, DELETE_BATCH a call (each call a lookup of those keys, on
        Milvus Lite too: no pass over the collection); returns the rows deleted."""
        deleted = 0
        self._changed(collection)
        leg = (self._lexical or {}).get(collection)
        for batch in batched(ids, DELETE_BATCH):
            deleted += _deleted_count(self._call(
                f"deleting rows from {collection!r}",
                partial(self.client.delete, collection, ids=list(batch)), write=True))
            if leg is not None:
                leg.deleted(ids=batch)
        return deleted

    # --- reads -----------------------------------------------------------------------------------

    def count(self, collection: str) -> int:
        self.load(collection)
        return self._count(collection)

    def _count(self, collection: str, filter: str = "") -> int:
        """The rows `filter` keeps, counted by Milvus (the collection loaded)."""
        res = self._read(f"counting rows of {collection!r}", collection, lambda: self.client.query(
            collection, filter=filter, output_fields=["count(*)"]))
        return int(res[0]["count(*)"]) if res else 0

    def stored_documents(self, collection: str) -> dict[str, StoredDocument]:
        """doc id -> what the collection holds for it (fingerprint, chunk indexes), in one
        streaming pass over four narrow fields: what an incremental ingest plans with."""
        return from_rows(self.rows(collection, fields=STORED_FIELDS))

    def fingerprints(self, collection: str,
                     doc_ids: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
        """doc id -> {chunk id: fingerprint} of the stored rows of `doc_ids` (of every document
        when None), from one pass over the collection (`stored_documents`)."""
        wanted = None if doc_ids is None else set(doc_ids)
        return {d: dict.fromkeys(s.ids(d), s.fingerprint or "")
                for d, s in self.stored_documents(collection).items()
                if wanted is None or d in wanted}

    def document_ids(self, collection: str) -> set[str]:
        """The ids of every document with rows in the collection."""
        return set(self.stored_documents(collection))

    def rows(self, collection: str, fields: Sequence[str] = ("id", "doc_id", "chunk_index", "text",
                                                              "context", "doc_hash", "chunk_hash"),
             filter: str = "", page: int | None = None, strict_float32: bool = False
             ) -> Iterator[dict[str, Any]]:
        """Every row (selected fields), page by page, in primary-key order, each page retried on
        its own, so a restart of the server mid-read neither repeats nor skips rows:

        - on a Milvus server, through Milvus's query iterator, whose cursor is the primary key (a
          read is linear in the rows; offset paging is not);
        - on Milvus Lite, one query a slice of the primary keys (`_slices`, `_sliced`). Lite's
          iterator sorts every row left after its cursor on each page: reading a 100,000-row
          collection with its vectors cost Lite 8.6-9.7 s of CPU that way, 7.1-8.0 s by slices
          (docs/benchmarks: the lexical index built from the rows).

        Pages hold `page` rows: by default the iterator's most (16,384) when every field is
        narrow (ids, indexes, hashes), else 1,000 (texts and vectors: a page stays far under
        gRPC's 256 MiB); a slice holds at most three quarters of a page. With `strict_float32`,
        each row's vector is a float32 array (`vectors_decoded` on Milvus Lite), not a list of
        Python floats.

        The next page is asked for while the caller takes this one (one page ahead, so at most
        two are held; on Milvus Lite SLICES_AHEAD slices, so three): the store builds a page
        while the reader works, instead of each waiting for the other (on Milvus Lite, whose
        server builds every row in Python, that halves the time a lexical index takes to be
        built from the rows).
        """
        self.load(collection)
        if page is None:
            page = SCAN_PAGE if set(fields) <= NARROW_FIELDS else WIDE_PAGE
        what = f"reading rows of {collection!r}"
        if self._on_lite(what):
            yield from self._sliced(collection, what, list(fields), filter, page, strict_float32)
            return
        pages = self._iterated(collection, what, list(fields), filter, page, strict_float32)
        ahead = ThreadPoolExecutor(1, thread_name_prefix="situate-read")
        try:
            coming = ahead.submit(next, pages, None)
            while (batch := coming.result()) is not None:
                coming = ahead.submit(next, pages, None)
                yield from batch
        finally:
            ahead.shutdown(wait=True, cancel_futures=True)  # the page in flight, then close
            pages.close()

    def _iterated(self, collection: str, what: str, fields: list[str], filter: str, page: int,
                  strict_float32: bool) -> Generator[list[dict[str, Any]], None, None]:
        """The pages of Milvus's query iterator over the rows `filter` keeps (`rows`)."""
        it = self._read(what, collection, lambda: self.client.query_iterator(
            collection, batch_size=page, filter=filter, output_fields=fields,
            strict_float32=strict_float32))
        try:
            while batch := self._read(what, collection, it.next):
                yield batch
        finally:
            it.close()

    def _sliced(self, collection: str, what: str, fields: list[str], filter: str, page: int,
                strict_float32: bool) -> Iterator[dict[str, Any]]:
        """The rows `filter` keeps, one query a slice of the primary keys (`_slices`), each
        slice's rows sorted by id (`rows` on Milvus Lite), SLICES_AHEAD slices asked for ahead of
        the one the caller takes: Lite builds one while this process decodes another. A slice
        holding a whole page may hold more (ids that are not situate's hex digests crowd a
        slice): it is read again through the query iterator."""
        slices = _slices(filter, self._count(collection, filter), page)

        def read(expr: str) -> list[dict[str, Any]] | None:
            batch = vectors_decoded(self._read(what, collection, lambda: self.client.query(
                collection, filter=expr, output_fields=fields, limit=page,
                strict_float32=strict_float32)))
            return None if len(batch) >= page else sorted(batch, key=lambda row: str(row["id"]))

        ahead = ThreadPoolExecutor(SLICES_AHEAD, thread_name_prefix="situate-read")
        try:
            coming = deque(ahead.submit(read, expr) for expr in slices[:SLICES_AHEAD])
            for at, expr in enumerate(slices):
                batch = coming.popleft().result()
                if at + SLICES_AHEAD < len(slices):
                    coming.append(ahead.submit(read, slices[at + SLICES_AHEAD]))
                if batch is not None:
                    yield from batch
                    continue
                crowded = self._iterated(collection, what, fields, expr, page, strict_float32)
                try:
                    for batch in crowded:
                        yield from batch
                finally:
                    crowded.close()
        finally:
            ahead.shutdown(wait=True, cancel_futures=True)  # the slices in flight

    def manifest_token(self, collection: str) -> str:
        """The token of the local manifest written for the collection as it is (`manifest`)."""
        return self.generations.properties(collection).get(TOKEN, "")

    def set_manifest_token(self, collection: str, token: str) -> None:
        """Record the token of the manifest just written; on Milvus Lite, with a cache directory,
        the lexical index is then brought up to the collection as it is (caught up from that
        manifest) and saved, so that the next process to search loads it at once."""
        self.generations.set_properties(collection, {TOKEN: token})
        if self.cache_dir is not None and self.lexical_here:
            try:
                self._lexical_leg(collection).refresh()
            except OSError as e:  # the rows are written: the next search builds the index
                log.warning(f"lexical index of {collection!r} not saved ({e}): the next search "
                            "builds it from the collection's rows")

    def flush(self, collection: str) -> None:
        """The rows written so far sealed into stored segments, as the end of a Milvus Lite
        process or a server restart would do at some later moment: done at the end of a run, so a
        collection's segments (and the BM25 statistics each keeps) do not depend on when its
        process ends."""
        self._call(f"flushing {collection!r}", lambda: self.client.flush(collection), write=True)

    def load(self, collection: str) -> None:
        """Load the collection for reads (a reopened Milvus Lite file starts released).

        pymilvus's own wait after the load polls the loading progress with no end, and Milvus Lite
        can answer "not loaded" for good after a load it reported done: it opens a collection
        object on first use without a lock, so two first calls at once can leave a second,
        released object in its cache (`situate evaluate` waited there forever, about once in 40
        runs on a loaded machine). So the load is asked without that wait, and its state read
        back: a collection still (or again) not loaded is loaded again, up to LOAD_TRIES times,
        then one StoreError. A server's collection that is loading is waited for as before (its
        load takes its time); Milvus Lite loads before its call returns, so there "loading"
        afterwards is as stuck as "not loaded"."""
        what = f"loading collection {collection!r}"
        synchronous = self._on_lite(what)
        self._call(what, lambda: self._load(collection, synchronous))

    def _load(self, collection: str, synchronous: bool) -> None:
        from pymilvus.client.types import LoadState

        for _ in range(LOAD_TRIES):
            self.client.load_collection(collection, _async=True)
            wait = 0.01
            while (state := self.client.get_load_state(collection).get("state")) == \
                    LoadState.Loading and not synchronous:
                time.sleep(wait)
                wait = min(2 * wait, 1.0)
            if state == LoadState.Loaded:
                return
            log.info(f"collection {collection!r} is {state} after its load: loading it again")
        raise StoreError(f"collection {collection!r} at {self.uri} did not load after "
                         f"{LOAD_TRIES} tries: run the same command again")

    def leg_search(self, collection: str, leg: str, query_text: str,
                   query_vector: Sequence[float] | None, limit: int) -> list[Hit]:
        """The top `limit` chunks of one retriever: dense cosine of `query_vector`, or BM25 of
        `query_text` (its identifiers split as the rows' are, `rows.lexical_text`).

        Milvus orders chunks of equal score as its segments and threads happen to return them
        (BM25 ties are common: chunks sharing the query's terms equally), so the same search
        could rank, or cut at `limit`, differently from one call to the next. TIE_MARGIN more
        hits are asked for and the chunks sorted by score, then id: equal scores rank by id,
        and the cut at `limit` keeps the same chunks every time unless more than TIE_MARGIN
        chunks tie across it.

        On Milvus Lite, BM25 is the lexical index's (`situate.storage.lexical`): its ranking is
        exact (every chunk tying with the last one kept is weighed), and the hits are read from
        the collection by id. Its dense hits are ranked by cosines computed here (`cosines`)
        from their vectors (kept in the lexical index beside their terms, else read with each
        hit), not by Lite's: Lite scores a call holding several queries with
        other kernels than a call holding one (`situate.storage.coalesce`), so its scores of the
        same chunk could differ in a float32's last bits between an evaluation's shared calls and
        an app's lone one, and a near tie could fall the other way."""
        if leg == "bm25" and self._lexical_for(f"{leg} search in {collection!r}"):
            return self.hits(collection, self.ranking(collection, leg, query_text, None, limit))
        if self._dense_here(collection, leg, query_vector) is not None:
            return self.hits(collection, self.ranking(collection, leg, query_text, query_vector,
                                                      limit))
        res = self._client_search(collection, leg, query_text, query_vector, limit, HIT_FIELDS)
        hits = sorted(self._hits(res, leg, self._rescoring(leg, query_vector)),
                      key=lambda h: (-h.score, h.id))
        return hits[:limit]

    def ranking(self, collection: str, leg: str, query_text: str,
                query_vector: Sequence[float] | None, limit: int) -> list[tuple[str, float]]:
        """`leg_search`'s ids and scores alone, cut at `limit` by the same rule. A hybrid search
        fuses each leg's top 100 and keeps ten: fetching the 200 candidates' texts, contexts and
        metadata with their scores was most of the server's work on a hybrid query
        (docs/benchmarks: concurrent queries)."""
        if leg == "bm25" and self._lexical_for(f"{leg} search in {collection!r}"):
            return self._lexical_leg(collection).current().top(query_text, limit)
        local = self._dense_here(collection, leg, query_vector)
        if local is not None and query_vector is not None:  # ids alone: cosines from the index
            res = self._client_search(collection, leg, query_text, query_vector, limit, ["id"],
                                      vectors=False)
            found = res[0] if res else []
            ids = getattr(found, "ids", None)
            ids = [str(i) for i in ids] if ids is not None else [_hit_id(h) for h in found]
            here = self._cosines_here(collection, local, query_vector, ids)
            return sorted(here.items(), key=lambda p: (-p[1], p[0]))[:limit]
        res = self._client_search(collection, leg, query_text, query_vector, limit, ["id"])
        found = res[0] if res else []
        rescore = self._rescoring(leg, query_vector)
        columns = _search_columns(found) if rescore is not None else None
        if rescore is not None and columns is not None:  # ids and vectors only: no hit is made
            ids, vectors = columns
            scored = list(zip(ids, cosines(rescore, vectors), strict=True))
        else:
            scores = (_rescored(found, rescore) if rescore is not None
                      else [_hit_score(h, leg) for h in found])
            scored = [(_hit_id(h), s) for h, s in zip(found, scores, strict=True)]
        return sorted(scored, key=lambda p: (-p[1], p[0]))[:limit]

    def _rescoring(self, leg: str, query_vector: Sequence[float] | None
                   ) -> Sequence[float] | None:
        """The query vector whose cosines rank a dense search here (`leg_search`): on Milvus Lite
        (asked once), else None (a server's scores stand)."""
        if leg != "dense" or query_vector is None or not self._on_lite("dense search"):
            return None
        return query_vector

    def _dense_here(self, collection: str, leg: str, query_vector: Sequence[float] | None
                    ) -> Bm25 | None:
        """The index whose vectors score a dense search's hits here (`_local_vectors`), for a
        dense leg on Milvus Lite; else None."""
        if leg != "dense" or query_vector is None or not self._on_lite(
                f"{leg} search in {collection!r}"):
            return None
        return self._local_vectors(collection, f"{leg} search in {collection!r}")

    def _cosines_here(self, collection: str, index: Bm25 | None, query_vector: Sequence[float],
                      ids: Sequence[str]) -> dict[str, float]:
        """The cosine of `query_vector` with each of `ids` still stored, computed here as Lite
        computes them (`cosines`): from the vectors `index` (the lexical index) keeps, else from
        rows `prefetch` read already; for the rest, from the rows read by id (with the fields of a
        hit, kept for `hits`: one call for both)."""
        if index is not None:
            scores = index.cosines(query_vector, ids)
        else:
            fetched = self._take_fetched(collection, ids, keep=True)
            scores = dict(zip(fetched, cosines(query_vector, [r["dense"] for r in fetched.values()]),
                              strict=True))
        missing = [i for i in ids if i not in scores]
        if missing:
            rows = self._read_scored(collection, missing)
            self._keep_fetched(collection, rows)
            scores.update(zip((str(r["id"]) for r in rows),
                              cosines(query_vector, [r["dense"] for r in rows]), strict=True))
        return scores

    def _client_search(self, collection: str, leg: str, query_text: str,
                       query_vector: Sequence[float] | None, limit: int,
                       fields: list[str], vectors: bool = True) -> Any:
        """pymilvus's search of one leg (what `leg_search` and `ranking` read): `fields` of up
        to TIE_MARGIN more hits than `limit`; on Milvus Lite, a dense search's hits with their
        vectors unless not `vectors`."""
        data, field, metric = self._leg(leg, query_text, query_vector)
        asked = min(limit + TIE_MARGIN, MAX_TOPK)
        lite = leg == "dense" and self._on_lite(f"{leg} search in {collection!r}")
        if lite and vectors:  # each hit's vector, to score it here (`leg_search`, `ranking`)
            fields = [*fields, "dense"]

        def call(queries: list[Any]) -> Any:
            return self._read(f"{leg} search in {collection!r}", collection,
                              lambda: self.client.search(
                                  collection, data=queries, anns_field=field, limit=asked,
                                  output_fields=fields,
                                  search_params=self._search_params(metric, asked)))

        if lite:
            # Milvus Lite: concurrent dense searches share one call (`situate.storage.coalesce`)
            with _LEGS_LOCK:
                if self._coalescer is None:
                    self._coalescer = Coalescer()
            key = (collection, field, asked, tuple(fields))
            return [self._coalescer.run(key, data[0],
                                        lambda queries: rows_of(call(queries), len(queries)))]
        return call(data)

    def hits(self, collection: str, ranked: Sequence[tuple[str, float]]) -> list[Hit]:
        """The chunks `ranked` names, read from the collection by id: those whose rows this
        query's dense scores read already (`leg_scores` on Milvus Lite, within FETCHED_SECONDS)
        are not read twice."""
        if not ranked:
            return []
        by_id = self._take_fetched(collection, [i for i, _ in ranked])
        ids = [i for i, _ in ranked if i not in by_id]
        if ids:
            rows = self._read(f"reading hits of {collection!r}", collection,
                              lambda: self.client.get(collection, ids=ids,
                                                      output_fields=["id", *HIT_FIELDS]))
            by_id.update((str(r["id"]), r) for r in rows)
        return [Hit(id=i, doc_id=r["doc_id"], index=int(r["chunk_index"]), text=r["text"],
                    context=r["context"], score=score, metadata=r.get("metadata") or {})
                for i, score in ranked if (r := by_id.get(i)) is not None]

    # --- the lexical index beside Milvus Lite (situate.storage.lexical) ----------------------

    @property
    def lexical_here(self) -> bool:
        """Whether BM25 is answered by the lexical index: on Milvus Lite, a file or a
        `milvus-lite server` (its version says so: one call, once), unless `native_bm25`."""
        return self._lexical_for("asking the server's version")

    def _lexical_for(self, what: str) -> bool:
        """`lexical_here`, its one call to the server named as the step that needs it (`what`),
        so that a server that is down fails that step as it did before the question."""
        return not self.native_bm25 and self._on_lite(what)

    @property
    def on_lite(self) -> bool:
        """Whether the store is Milvus Lite (a file, or a `milvus-lite server`): one process
        that answers one call at a time and walks every row in each dense search."""
        return self._on_lite("asking the server's version")

    def _on_lite(self, what: str) -> bool:
        """Whether the store is Milvus Lite (a file, or a `milvus-lite server`: its version
        says so, asked once, the call named `what`)."""
        if self._lite_engine is None:
            if self.is_local:
                self._lite_engine = True
            else:
                version = self._call(what, self.client.get_server_version)
                self._lite_engine = str(version).startswith(LITE_SERVER)
        return self._lite_engine

    def lexical_path(self, collection: str) -> Path | None:
        """Where the collection's lexical index is kept: the cache directory, by the store's URI
        and the collection (as the manifest), so that every process on this machine that opens
        the same store finds it; None without a cache directory."""
        if self.cache_dir is None:
            return None
        return Path(self.cache_dir).expanduser() / "lexical" / f"{cache_key(self.uri, collection)}.npz"

    def lexical_stamp(self, collection: str, counted: bool = True) -> Stamp:
        """The collection's stamp as it is now: its generation, manifest token and row count (-1
        unless `counted`); a failure is the BM25 search's: the stamp is asked for before it
        answers."""
        def stamp() -> Stamp:
            info = self.client.describe_collection(collection)
            properties = info.get("properties") or {}
            rows = -1
            if counted:
                found = self.client.query(collection, filter="", output_fields=["count(*)"])
                rows = int(found[0]["count(*)"]) if found else 0
            return Stamp(str(info.get("collection_name") or collection),
                         str(properties.get(TOKEN, "")), rows)

        return self._read(f"bm25 search in {collection!r}", collection, stamp)

    def _lexical_leg(self, collection: str) -> LexicalLeg:
        with _LEGS_LOCK:
            if self._lexical is None:
                self._lexical = {}
            leg = self._lexical.get(collection)
            if leg is None:
                manifest = (Manifest(self.cache_dir, self.uri, collection)
                            if self.cache_dir is not None else None)
                leg = self._lexical[collection] = LexicalLeg(
                    stamp=lambda counted: self.lexical_stamp(collection, counted),
                    rows=lambda: self.rows(collection, fields=LEXICAL_FIELDS,
                                           page=self._build_page(collection),
                                           strict_float32=True),
                    fetch=lambda ids: vectors_decoded(self._read(
                        f"reading rows of {collection!r}", collection, lambda: self.client.get(
                            collection, ids=ids, output_fields=LEXICAL_FIELDS,
                            strict_float32=True))),
                    manifest=(manifest.load if manifest is not None
                              else lambda token, rows: None),
                    path=self.lexical_path(collection))
            return leg

    def _build_page(self, collection: str) -> int:
        """Rows a page when the lexical index is built from the collection: BUILD_PAGE of
        384-d vectors (a page of about 90 MiB at most), fewer as the vectors are wider."""
        dim = self.describe(collection).dim or BUILD_DIM
        return max(WIDE_PAGE, BUILD_PAGE * BUILD_DIM // max(dim, BUILD_DIM))

    def _local_vectors(self, collection: str, what: str) -> Bm25 | None:
        """The lexical index when it holds the rows' vectors (Milvus Lite, unless
        `native_bm25`): a search scores its candidates' cosines from them instead of reading the
        vectors from Lite, whose Python builds every row it returns."""
        if not self._lexical_for(what):
            return None
        index = self._lexical_leg(collection).current()
        return index if index.dense and index.vectors is not None else None

    def _changed(self, collection: str) -> None:
        """This process writes to the collection: its lexical index asks for the stamp again
        before the next search; kept in a cache directory, the index follows the writes
        (`LexicalLeg.writing`), so that the ingest's end need not read the rows back."""
        leg = self._writing_leg(collection)
        if leg is not None:
            leg.writing()
        else:
            leg = (self._lexical or {}).get(collection)
            if leg is not None:
                leg.written()
        if self._fetched:
            with _FETCHED_LOCK:
                for key in [k for k in self._fetched if k[0] == collection]:
                    del self._fetched[key]

    def _writing_leg(self, collection: str) -> LexicalLeg | None:
        """The lexical leg that follows this process's writes to `collection`: on Milvus Lite
        with a cache directory (the ingest's end saves the index there), for a collection by its
        name (not a generation a rebuild is filling). Whether a server is Milvus Lite is asked
        once, without retries: a server that is down fails the write itself, by its name."""
        if self.cache_dir is None or self.native_bm25 or GENERATION.match(collection):
            return None
        if self._lite_engine is None and not self.is_local:
            try:
                self._lite_engine = str(self.client.get_server_version()).startswith(LITE_SERVER)
            except Exception:  # noqa: BLE001 - the write that follows reports it
                return None
        if not self._lexical_for("asking the server's version"):
            return None
        return self._lexical_leg(collection)

    def prefetch(self, collection: str, ids: Sequence[str]) -> None:
        """The rows of `ids` read now, with their vectors and a hit's fields, and kept
        FETCHED_SECONDS for this query's dense scores (`leg_scores`) and `hits`: on Milvus Lite,
        where a hybrid search reads its BM25 candidates' rows to score them, it reads them while
        the query is embedded (`situate.tasks.retrieval.search.hybrid`), for they do not depend
        on its vector. Nothing where the lexical index holds the rows' vectors (their cosines are
        computed from them, and only the hits' rows are read), nor on a server (it scores them
        itself)."""
        if not ids or not self._on_lite(f"reading rows of {collection!r}"):
            return
        if self._local_vectors(collection, f"reading rows of {collection!r}") is not None:
            return  # their cosines come from the index, and only the hits are read
        self._keep_fetched(collection, self._read_scored(collection, ids))

    def _read_scored(self, collection: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The rows of `ids` (those still stored) with their vectors and a hit's fields."""
        # strict_float32: pymilvus reads the vectors once into one float32 array and gives each
        # row its slice, instead of a list of Python floats a row (100 rows: 1.2 ms, not 3.7).
        rows: list[dict[str, Any]] = vectors_decoded(self._read(
            f"dense scores in {collection!r}", collection, lambda: self.client.get(
                collection, ids=list(ids), output_fields=["id", "dense", *HIT_FIELDS],
                strict_float32=True)))
        for r in rows:
            r["dense"] = float32(r["dense"])
        return rows

    def _keep_fetched(self, collection: str, rows: Iterable[dict[str, Any]]) -> None:
        """Rows just read by id, kept FETCHED_SECONDS for this query's `hits`."""
        now = time.monotonic()
        with _FETCHED_LOCK:
            if self._fetched is None:
                self._fetched = {}
            kept = self._fetched
            for key in [k for k, (t, _) in kept.items() if now - t >= FETCHED_SECONDS]:
                del kept[key]
            kept.update(((collection, str(r["id"])), (now, r)) for r in rows)

    def _take_fetched(self, collection: str, ids: Iterable[str],
                      keep: bool = False) -> dict[str, dict[str, Any]]:
        """The rows of `ids` that `_keep_fetched` holds and are still fresh, taken out (left
        there with `keep`)."""
        if not self._fetched:
            return {}
        now = time.monotonic()
        found: dict[str, dict[str, Any]] = {}
        with _FETCHED_LOCK:
            for i in ids:
                kept = (self._fetched.get if keep else self._fetched.pop)((collection, i), None)
                if kept is not None and now - kept[0] < FETCHED_SECONDS:
                    found[i] = kept[1]
        return found

    def _read(self, what: str, collection: str, read: Callable[[], T]) -> T:
        """`read()`, one call to Milvus (`_call`), made again once the collection is loaded if the
        server had released it: a restarted server starts with every collection released, and a
        read then finds it so instead of waiting for the next command's `load`. Every read goes
        through here, those that `load` first too: a restart between that load and the read
        releases the collection again (a write's read of stored ids met it, the server killed
        mid-write)."""
        def call() -> T:
            try:
                return read()
            except Exception as e:
                if not is_not_loaded(e):
                    raise
            self.client.load_collection(collection)
            return read()

        return self._call(what, call)

    def _search_params(self, metric: str, limit: int) -> dict[str, Any]:
        if metric == "COSINE":
            return dense_search_params(server=not self.is_local, limit=limit)
        return {"metric_type": metric}

    @staticmethod
    def _leg(leg: str, query_text: str, query_vector: Sequence[float] | None
             ) -> tuple[list[Any], str, str]:
        """(data, field, metric) of one retriever's search: dense cosine or BM25."""
        if leg not in LEGS:
            raise StoreError(f"unknown search leg {leg!r}: use one of {', '.join(LEGS)}")
        if leg == "dense":
            if query_vector is None:
                raise StoreError("a dense search needs a query vector")
            return [list(query_vector)], "dense", "COSINE"
        return [lexical_text(query_text)], "sparse", "BM25"

    def leg_scores(self, collection: str, leg: str, query_text: str,
                   query_vector: Sequence[float] | None, ids: Sequence[str]) -> dict[str, float]:
        """One retriever's own scores of `ids` (a search restricted to them): their cosine, or
        their BM25 under the collection's statistics, 0 for a chunk sharing no term with the
        query (Milvus returns only chunks that score).

        Only the id comes back with each score: Milvus Lite reads `output_fields=[]` as every
        field, and sent each scored row whole (text, both vectors) for the score alone: on the
        codebase collection, scoring 100 rows cost 8.6 ms of CPU in the server and 3.7 ms here
        that way, 4.8 and 1.3 ms with the id (docs/benchmarks: concurrent queries)."""
        if not ids:
            return {}
        if leg == "bm25" and self._lexical_for(f"{leg} scores in {collection!r}"):
            return self._lexical_leg(collection).current().scores_of(query_text, ids)
        if leg == "dense" and query_vector is not None and self._on_lite(
                f"{leg} scores in {collection!r}"):
            return self._dense_scores(collection, query_vector, ids)
        data, field, metric = self._leg(leg, query_text, query_vector)
        res = self._read(f"{leg} scores in {collection!r}", collection, lambda: self.client.search(
            collection, data=data, anns_field=field, limit=len(ids),
            filter=f"id in {json.dumps(list(ids))}", output_fields=["id"],
            search_params=self._search_params(metric, len(ids))))
        scores = dict.fromkeys(ids, 0.0) if leg == "bm25" else {}
        scores.update((_hit_id(h), _hit_score(h, leg)) for h in (res[0] if res else []))
        return scores

    def _dense_scores(self, collection: str, query_vector: Sequence[float],
                      ids: Sequence[str]) -> dict[str, float]:
        """`leg_scores`' cosines on Milvus Lite, computed here (`_cosines_here`). Lite's own
        restricted search pays a pass over every row of the collection in Python
        (about 260 ms at 100,000 chunks, against 15 ms to read 100 rows by id), and with its
        HNSW index an id filter this narrow may miss some of the chunks asked for."""
        local = self._local_vectors(collection, f"dense scores in {collection!r}")
        return self._cosines_here(collection, local, query_vector, ids)

    @staticmethod
    def _hits(res: Any, mode: str, rescore: Sequence[float] | None = None) -> list[Hit]:
        """A search's hits, scored by the store, or with `rescore` by their cosines with it."""
        found = res[0] if res else []
        scores = (_rescored(found, rescore) if rescore is not None
                  else [_hit_score(h, mode) for h in found])
        hits: list[Hit] = []
        for h, score in zip(found, scores, strict=True):
            entity = h.get("entity", h)
            hits.append(Hit(id=_hit_id(h), doc_id=entity["doc_id"],
                            index=int(entity["chunk_index"]), text=entity["text"],
                            context=entity["context"], score=score,
                            metadata=entity.get("metadata") or {}))
        return hits


_LEGS_LOCK = threading.Lock()
_FETCHED_LOCK = threading.Lock()


def _search_columns(found: Any) -> tuple[list[str], np.ndarray] | None:
    """A search's hits' ids and vectors (a float32 row a hit), read from the columns of
    pymilvus's answer without making its hits: pymilvus makes each hit's vector a list of
    Python floats, one hit at a time (100 hits: about 3 ms of a hybrid query's CPU here). None
    where the answer is not pymilvus's lazy hits as 3.0 makes them, or a vector may be missing:
    the hits are then read one by one."""
    ids, start = getattr(found, "ids", None), getattr(found, "start", None)
    columns = getattr(found, "lazy_field_data", None)
    if ids is None or not isinstance(start, int) or columns is None or found.has_materialized:
        return None
    dense = [c for c in columns if c.field_name == "dense"]
    if len(dense) != 1 or len(dense[0].valid_data):
        return None
    dim, data = dense[0].vectors.dim, dense[0].vectors.float_vector.data
    if not dim or len(data) < (start + len(ids)) * dim:
        return None
    vectors = float32(data[start * dim:(start + len(ids)) * dim]).reshape(len(ids), dim)
    return [str(i) for i in ids], vectors


def _rescored(found: Sequence[Any], query: Sequence[float]) -> list[float]:
    """Each search hit's cosine with `query`, from the vector it came with (taken out of it)."""
    return cosines(query, [h.get("entity", h).pop("dense") for h in found])


def _hit_id(h: Any) -> str:
    return str(h.get("id", h.get("pk")))


def _hit_score(h: Any, mode: str) -> float:
    score = float(h.get("distance", h.get("score", 0.0)))
    return abs(score) if mode == "bm25" else score  # Lite reports BM25 as negative distances


def _doc_filters(doc_ids: Sequence[str]) -> list[str]:
    """Filter expressions selecting the rows of `doc_ids`, 256 documents each."""
    return [doc_filter(b) for b in batched(doc_ids, 256)]


def _deleted_count(res: Any) -> int:
    if isinstance(res, dict):
        return int(res.get("delete_count", len(res.get("ids", []) or [])))
    return len(res or [])


def _slices(filter: str, count: int, page: int) -> list[str]:
    """Filters that cut the rows `filter` keeps into slices of the primary keys, in order, each
    expected to hold at most three quarters of `page` of `count` rows: situate's chunk ids are
    hex digests (`chunk_id`), spread evenly over the hex strings, so equal ranges of their first
    six digits hold about equal shares. The first and last slices are open, so that every id
    falls in one slice, whatever it is."""
    parts = max(1, -(-4 * count // (3 * page)))
    cuts = [format(i * ID_SPACE // parts, f"0{ID_DIGITS}x") for i in range(1, parts)]
    slices = []
    for low, high in zip([None, *cuts], [*cuts, None], strict=True):
        terms = ([f"({filter})"] if filter else []) + ([f'id >= "{low}"'] if low else []) + \
            ([f'id < "{high}"'] if high else [])
        slices.append(" and ".join(terms))
    return slices
