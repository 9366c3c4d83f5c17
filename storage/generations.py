"""A collection behind an alias, rebuilt from its own rows into a new generation.

Milvus Lite (and `milvus-lite server`, the same engine) computes BM25 statistics (number of
documents, document frequencies, average length) per stored segment, from every row written to
it: rows deleted since, and the old versions an upsert has replaced, are kept out of the results
but still counted, and rows written by a later run sit in a segment of their own, scored with
statistics of their own (milvus-lite 3.2: `engine/collection.py`, `index/sparse_inverted.py`;
`compact()` does nothing there, and flush, release/load and reopening change nothing). So a
collection kept up to date by incremental ingests scores BM25 differently from a fresh ingest of
the same corpus, and more so with every run. A rebuild fixes that exactly: the rows it holds,
read back and inserted into a new collection in the order a fresh ingest inserts them (corpus
order, then chunk index: tied scores rank alike), with no context paid and nothing embedded.

The name a user gives is an alias of a physical collection `NAME__gN` (generation N). A rebuild
writes generation N+1 whole and checks its row count, then points the alias at it in one call
(`alter_alias`) and drops generation N: a search by the name always reads a whole collection,
and a rebuild killed at any point loses nothing (before the switch the name still stands for the
old generation, and the next `tidy` drops the half-built one; after it, the new one is whole and
`tidy` drops the old). A collection made before situate used aliases is a physical collection of
that name: its first rebuild renames it to `NAME__g0` and makes the alias, a moment in which the
name is unknown to a reader on another connection; `tidy` finishes that step if it was cut.

Drift, the rows written or deleted in the collection since it was built in one go (a fresh
ingest) or last rebuilt, is kept as the collection property `situate.drift`; ingest adds to it
before it writes, so a run stopped half-way still leaves its drift counted.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from situate.core.errors import CollectionNotFound, StoreError
from situate.core.records import StoredDocument, batched
from situate.storage.manifest import FIELDS as STORED_FIELDS
from situate.storage.manifest import TOKEN, from_rows
from situate.storage.rows import INPUT_FIELDS

DRIFT = "situate.drift"
GENERATION = re.compile(r"^(?P<name>.+)__g(?P<n>\d+)$")
COPY_BATCH = 1000  # rows fetched by id and inserted per step of the copy


def generation_name(name: str, n: int) -> str:
    return f"{name}__g{n}"


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did: the rows it copied, into which generation, in how long."""

    rows: int
    physical: str
    seconds: float


class _NoClientTimestamp(logging.Filter):
    """Milvus Lite has no timestamp service: pymilvus's query iterator falls back to the client's
    clock (right for a local file) and warns about it on every scan; that warning is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to get mvccTs" not in record.getMessage()


logging.getLogger("pymilvus.client.iterator.query_iterator").addFilter(_NoClientTimestamp())


class AliasedStore(Protocol):
    """What a rebuild needs of the store whose generations it keeps (`situate.storage.milvus`'s
    MilvusStore): its client, its one way of calling Milvus, a read that survives a released
    collection, and its batched upsert."""

    client: Any
    uri: str

    def _call(self, what: str, fn: Any, *, write: bool = False) -> Any: ...

    def _read(self, what: str, collection: str, read: Any) -> Any: ...

    def schema(self, collection: str) -> Any: ...

    def index_and_load(self, collection: str) -> None: ...

    def load(self, collection: str) -> None: ...

    def count(self, collection: str) -> int: ...

    def rows(self, collection: str, fields: Sequence[str] = ..., filter: str = "",
             page: int | None = None) -> Iterator[dict[str, Any]]: ...

    def upsert(self, collection: str, rows: Iterable[dict[str, Any]], batch_size: int = ...
               ) -> int: ...


class Generations:
    """The alias and generations of the collections of one store."""

    def __init__(self, store: AliasedStore) -> None:
        self.store = store

    @property
    def client(self) -> Any:
        return self.store.client

    def _call(self, what: str, fn: Any, write: bool = False) -> Any:
        return self.store._call(what, fn, write=write)

    def physical(self, name: str) -> str | None:
        """The collection the name stands for: its alias's target, or itself (a collection made
        before aliases), or None when there is neither."""
        def look() -> str | None:
            if not self.client.has_collection(name):
                return None
            return str(self.client.describe_collection(name).get("collection_name") or name)

        return self._call(f"resolving collection {name!r}", look)  # type: ignore[no-any-return]

    def create(self, name: str, schema: Any, properties: dict[str, str]) -> str:
        """A new collection behind the alias `name`: generation 1. Safe to repeat."""
        physical = generation_name(name, 1)

        def create() -> None:
            if not self.client.has_collection(physical):
                self.client.create_collection(physical, schema=schema, consistency_level="Strong",
                                              properties=properties)
            if not self.client.has_collection(name):
                self.client.create_alias(physical, name)

        self._call(f"creating collection {name!r}", create, write=True)
        return physical

    # --- drift -------------------------------------------------------------------------------

    def _described(self, name: str) -> tuple[dict[str, str], str]:
        """(the collection's properties, the physical collection) from one description."""
        info = self._call(f"describing collection {name!r}",
                          lambda: self.client.describe_collection(name))
        properties = {str(k): str(v) for k, v in (info.get("properties") or {}).items()}
        return properties, str(info.get("collection_name") or name)

    def properties(self, name: str) -> dict[str, str]:
        return self._described(name)[0]

    def set_properties(self, name: str, properties: dict[str, str]) -> None:
        physical = self._described(name)[1]
        self._call(f"recording properties of {name!r}", lambda: self.client.
                   alter_collection_properties(physical, properties=properties), write=True)

    def drift(self, name: str) -> int:
        """Rows written or deleted since the collection was built or last rebuilt."""
        return _int(self.properties(name).get(DRIFT))

    def add_drift(self, name: str, rows: int) -> int:
        """Count `rows` more written or deleted; returns the collection's drift now. The same
        call clears the token of the local manifest (`situate.storage.manifest`): the rows are
        about to change, so no copy of them kept elsewhere may be trusted until one is written
        anew."""
        properties, physical = self._described(name)
        total = _int(properties.get(DRIFT)) + rows
        if rows:
            self._call(f"recording the drift of {name!r}", lambda: self.client.
                       alter_collection_properties(physical, properties={DRIFT: str(total),
                                                                         TOKEN: ""}),
                       write=True)
        return total

    # --- rebuild -----------------------------------------------------------------------------

    def rebuild(self, name: str, order: Iterable[str], batch_size: int = COPY_BATCH,
                stored: Mapping[str, StoredDocument] | None = None) -> Rebuilt:
        """Copy every row of `name` into a new generation, the documents in `order` first (the
        corpus's order: the order a fresh ingest inserts them), then any other document the
        collection holds (by id), each document's chunks by index; check the copy's row count;
        then point the name at it and drop the old generation. Rows are inserted `batch_size` per
        call.

        What the collection holds per document (`stored`, else read in one pass over ids,
        document ids and indexes) gives every row's id in that order, a document at a time: the
        rows are fetched by primary key, COPY_BATCH at a time, and no list of every row id is
        held (a million rows are a few tens of MB of per-document entries, not of ids)."""
        started = time.monotonic()
        store = self.store
        old = self.tidy(name)
        if old is None:
            raise CollectionNotFound(name, store.uri)
        new = generation_name(name, self._highest(name) + 1)
        info = self._call(f"describing collection {name!r}",
                          lambda: self.client.describe_collection(old))
        properties = {str(k): str(v) for k, v in (info.get("properties") or {}).items()}
        properties[DRIFT] = "0"
        schema = store.schema(old)
        self._call(f"creating collection {new!r}", lambda: self.client.create_collection(
            new, schema=schema, consistency_level="Strong", properties=properties), write=True)
        store.index_and_load(new)
        expected = store.count(old)
        if stored is None:
            stored = from_rows(store.rows(old, fields=STORED_FIELDS))
        copied = self._copy(old, new, _in_order(stored, order), batch_size)
        self._call(f"flushing {new!r}", lambda: self.client.flush(new), write=True)
        held = store.count(new)
        if copied != expected or held != expected:
            self._call(f"dropping collection {new!r}", lambda: self.client.drop_collection(new),
                       write=True)
            raise StoreError(f"rebuilding collection {name!r} at {store.uri}: the copy holds "
                             f"{held} rows, the collection {expected}; nothing was changed. "
                             "Run the same command again")
        retired = self._swap(name, old, new)
        self._call(f"dropping collection {retired!r}",
                   lambda: self.client.drop_collection(retired), write=True)
        store.load(name)
        return Rebuilt(copied, new, time.monotonic() - started)

    def _copy(self, old: str, new: str, ids: Iterable[str], batch_size: int) -> int:
        """The rows of `old` with `ids` inserted into `new` in that order, `COPY_BATCH` at a
        time (each a lookup by primary key)."""
        copied = 0
        for batch in batched(ids, COPY_BATCH):
            wanted = list(batch)
            rows = self.store._read(f"reading rows of {old!r}", old, partial(
                self.client.get, old, ids=wanted, output_fields=list(INPUT_FIELDS)))
            position = {row_id: i for i, row_id in enumerate(wanted)}
            rows = sorted(rows, key=lambda r: position[r["id"]])
            copied += self.store.upsert(new, [{k: r[k] for k in INPUT_FIELDS} for r in rows],
                                        batch_size)
        return copied

    def _swap(self, name: str, old: str, new: str) -> str:
        """Point `name` at `new` in one call; returns the collection it stood for. A collection
        from before aliases (named `name` itself) is renamed to generation 0 first."""
        if old != name:
            self._call(f"switching {name!r} to {new!r}",
                       lambda: self.client.alter_alias(new, name), write=True)
            return old
        retired = generation_name(name, 0)

        def convert() -> None:
            if name in self.client.list_collections():
                self.client.rename_collection(name, retired)
            if not self.client.has_collection(name):
                self.client.create_alias(new, name)

        self._call(f"switching {name!r} to {new!r}", convert, write=True)
        return retired

    def drop(self, name: str) -> None:
        """The alias and every generation of `name` gone (or the collection, from before aliases)."""
        physical = self.physical(name)
        if physical is not None and physical != name:
            self._call(f"dropping alias {name!r}", lambda: self.client.drop_alias(name), write=True)
        for c in ([physical] if physical is not None else []) + self._generations(name):
            if c is not None:
                self._call(f"dropping collection {c!r}",
                           lambda c=c: self.client.drop_collection(c), write=True)

    # --- after a stop ------------------------------------------------------------------------

    def tidy(self, name: str) -> str | None:
        """Finish or undo a rebuild that was stopped: drop the generations of `name` the name
        does not stand for; when a stop cut the first rebuild of a collection from before
        aliases between its rename and its alias, point the name at generation 0 (whole: the
        collection as it was) first. Returns the collection the name stands for (None: none)."""
        physical = self.physical(name)
        generations = self._generations(name)
        if physical is None and generation_name(name, 0) in generations:
            physical = generation_name(name, 0)
            self._call(f"restoring {name!r}", lambda: self.client.create_alias(physical, name),
                       write=True)
        if physical is None:
            return None
        for c in generations:
            if c != physical:
                self._call(f"dropping collection {c!r}",
                           lambda c=c: self.client.drop_collection(c), write=True)
        return physical

    def _generations(self, name: str) -> list[str]:
        listed = self._call("listing collections", self.client.list_collections)
        return [c for c in listed if (m := GENERATION.match(c)) and m.group("name") == name]

    def _highest(self, name: str) -> int:
        """The highest generation number of `name` in use (0 for a collection before aliases)."""
        return max((int(m.group("n")) for c in self._generations(name)
                    if (m := GENERATION.match(c))), default=0)


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _in_order(stored: Mapping[str, StoredDocument], order: Iterable[str]) -> Iterator[str]:
    """Every row id of `stored`, lazily, in rebuild order: the documents in `order` (once each),
    then the others by id; each document's rows by chunk index."""
    placed: set[str] = set()
    for doc_id in order:
        if doc_id in stored and doc_id not in placed:
            placed.add(doc_id)
            yield from stored[doc_id].ids(doc_id)
    for doc_id in sorted(set(stored) - placed):
        yield from stored[doc_id].ids(doc_id)
