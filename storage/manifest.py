"""What a collection holds, per document and without its texts (`StoredDocument`: the fingerprint
its rows were written with and its chunks' indexes), read from the store in one pass or kept on
local disk between runs.

An incremental ingest compares its corpus with this. Read from the store, it costs one streaming
pass over the rows' ids, document ids, indexes and fingerprints (`from_rows`); on Milvus Lite each
page of that pass costs a pass over the whole collection, tens of seconds at 100,000 rows. So a
run leaves it on local disk too (`Manifest`, SQLite in the cache directory), stamped with a token
it also writes into the collection's properties (`situate.manifest`); the next run trusts the
file only when the token and the row count still agree with the store. Any run that writes to the
collection clears the store's token before its first write (with the drift it counts), so a run
stopped half-way, another machine's run, or a file from another time is never trusted: the next
run reads the store instead, and writes the file anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import uuid
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from situate.core.records import StoredDocument, chunk_id, index_key
from situate.core.uri import is_lite

TOKEN = "situate.manifest"  # the collection property holding the token of the manifest written
FIELDS = ("id", "doc_id", "chunk_index", "doc_hash")  # what a row tells of its document
# A document's chunk indexes are a count (0..n-1, as situate cuts) or, rarely, JSON lists in
# `indexes` and `other`: loading a manifest decodes no JSON for an ordinary document.
_SCHEMA = ("CREATE TABLE IF NOT EXISTS documents (doc_id TEXT PRIMARY KEY, fingerprint TEXT, "
           "n INTEGER NOT NULL, indexes TEXT NOT NULL, other TEXT NOT NULL);"
           "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);")


def from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, StoredDocument]:
    """doc id -> what the collection holds for it, from rows with `id`, `doc_id`, `chunk_index` and
    `doc_hash` (in any order: one streaming pass, a list of indexes per document meanwhile)."""
    seen: dict[str, tuple[set[str], list[int], list[tuple[int, str]]]] = {}
    for row in rows:
        doc_id, index, row_id = row["doc_id"], int(row["chunk_index"]), row["id"]
        entry = seen.get(doc_id)
        if entry is None:
            entry = seen[doc_id] = (set(), [], [])
        entry[0].add(row["doc_hash"])
        if row_id == chunk_id(doc_id, index):
            entry[1].append(index)
        else:
            entry[2].append((index, row_id))
    return {doc_id: StoredDocument(next(iter(hashes)) if len(hashes) == 1 else None,
                                   index_key(indexes), tuple(sorted(other)))
            for doc_id, (hashes, indexes, other) in seen.items()}


def _encode(doc: StoredDocument) -> tuple[str | None, int, str, str]:
    if isinstance(doc.indexes, int):
        n, indexes = doc.indexes, ""
    else:
        n, indexes = len(doc.indexes), json.dumps(doc.indexes)
    return (doc.fingerprint, n, indexes,
            json.dumps([list(p) for p in doc.other]) if doc.other else "")


def _decode(fingerprint: str | None, n: int, indexes: str, other: str) -> StoredDocument:
    if not indexes and not other:
        return StoredDocument(fingerprint, int(n))
    return StoredDocument(fingerprint, tuple(json.loads(indexes)) if indexes else int(n),
                          tuple((int(i), str(r)) for i, r in json.loads(other)) if other else ())


def cache_key(uri: str, collection: str) -> str:
    """The name of what the cache directory keeps for one collection of one store (a Milvus Lite
    file by whatever path it is named)."""
    if is_lite(uri):
        uri = str(Path(uri).expanduser().resolve())
    return hashlib.sha256(f"{uri}\x1f{collection}".encode()).hexdigest()[:24]


class Manifest:
    """The local copy of one collection's `StoredDocument`s: a SQLite file under `directory`
    (created private: 0700, the file 0600), named for the store's URI and the collection."""

    def __init__(self, directory: str | Path, uri: str, collection: str) -> None:
        self.path = Path(directory).expanduser() / "manifests" / f"{cache_key(uri, collection)}.sqlite"

    def load(self, token: str, rows: int) -> dict[str, StoredDocument] | None:
        """The documents the file holds, when it was written under `token` for a collection of
        `rows` rows; else None (no file, another token, another count, an unreadable file)."""
        if not token or not self.path.is_file():
            return None
        try:
            with closing(sqlite3.connect(self.path)) as db:
                meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
                if meta.get("token") != token or meta.get("rows") != str(rows):
                    return None
                return {d: _decode(f, n, i, o) for d, f, n, i, o in db.execute(
                    "SELECT doc_id, fingerprint, n, indexes, other FROM documents")}
        except (sqlite3.Error, ValueError, TypeError):
            return None  # a damaged file: the store is read instead

    def save(self, documents: Mapping[str, StoredDocument], changed: Iterable[str] | None = None,
             ) -> str:
        """Write the documents (only those named in `changed`, when the file already holds the
        others, else all of them) under a new token, which the caller then records in the store;
        returns the token. One transaction: a stop leaves the old file or the new one."""
        token = uuid.uuid4().hex
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fresh = changed is None or not self.path.is_file()
        tmp = self.path.with_suffix(".tmp") if fresh else self.path
        if fresh:
            tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)
        with closing(sqlite3.connect(tmp)) as db, db:
            db.executescript(_SCHEMA)
            names = documents.keys() if fresh or changed is None else changed
            gone = [(d,) for d in names if d not in documents]
            db.executemany("DELETE FROM documents WHERE doc_id = ?", gone)
            db.executemany("INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?, ?)",
                           ((d, *_encode(documents[d])) for d in names if d in documents))
            rows = sum(doc.rows for doc in documents.values())
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                           [("token", token), ("rows", str(rows))])
        if fresh:
            os.replace(tmp, self.path)
        return token

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)
