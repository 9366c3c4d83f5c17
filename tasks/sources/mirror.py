"""A source synced into a local mirror folder, which the ingest then reads as a directory corpus.

The mirror lives in the cache directory (`sources/<key>/tree`, private), beside a SQLite file of
what it holds: per document id, the change marker of the bytes on disk. A sync lists the source
and fetches only the documents whose marker differs from the one recorded (or whose file is
missing): an unchanged document costs its line of the listing and nothing else. Each file is
written whole (a temporary file renamed over the old one) before its marker is recorded, so a
sync stopped at any point leaves every file either old or new, and the next sync fetches only
what it has not recorded.

Documents the source no longer lists leave the mirror only after a listing that saw the whole
source without a failed fetch (`SyncReport.complete`); a sync with failures keeps the last good
copy of every document and says which failed, and the ingest that follows prunes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from situate.core.errors import InputError
from situate.core.records import Document
from situate.tasks.sources.base import Entry, FetchFailed, Source, TooLarge, open_source, shown

log = logging.getLogger("situate.sources")
_SCHEMA = ("CREATE TABLE IF NOT EXISTS entries (id TEXT PRIMARY KEY, marker TEXT, size INTEGER, "
           "run TEXT NOT NULL)")
FAILED_SHOWN = 20  # failures named one by one in the report (the count is always whole)
_COMMIT_EVERY = 500


@dataclass
class SyncReport:
    """What one sync did: documents listed, fetched, left unfetched (same marker), deleted from
    the mirror (gone from the source), over the byte limit, refused (an id that is no safe
    relative path), and failed (id, reason); `complete` when the listing saw the whole source
    with no failure, the only case in which anything is deleted."""

    url: str
    root: str
    listed: int = 0
    fetched: int = 0
    unchanged: int = 0
    deleted: int = 0
    too_large: int = 0
    refused: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    failed_count: int = 0
    complete: bool = True
    seconds: float = 0.0
    fetched_bytes: int = 0
    revision: str = ""  # what the source was at, when it says (a git source: the commit)

    def counts(self) -> dict[str, int]:
        return {"listed": self.listed, "fetched": self.fetched, "unchanged (not fetched)":
                self.unchanged, "gone": self.deleted, "over the limit": self.too_large,
                "refused": self.refused, "failed": self.failed_count}


def mirror_key(url: str) -> str:
    """The mirror's folder name for `url`: its hash, without the URL's user information (a
    token that changes keeps the mirror)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    bare = urlunsplit((parts.scheme.lower(), netloc.lower(), parts.path, parts.query, ""))
    return hashlib.sha256(bare.encode()).hexdigest()[:24]


def mirror_root(url: str, cache_dir: str | Path) -> Path:
    """Where the mirror of `url` is kept: its files under `tree/`, its markers in `state.sqlite`."""
    return Path(cache_dir).expanduser() / "sources" / mirror_key(url)


def safe_id(doc_id: str) -> bool:
    """A document id the mirror may hold: a relative "/"-separated path with no empty, "." or
    ".." part, no backslash or NUL, no hidden part (a folder corpus leaves those out too)."""
    if not doc_id or doc_id.startswith("/") or "\\" in doc_id or "\x00" in doc_id:
        return False
    return all(p and p not in (".", "..") and not p.startswith(".") for p in doc_id.split("/"))


class _State:
    """The mirror's record of markers, in SQLite (one row per document; nothing per document is
    held in memory, so a listing of a million keys is streamed)."""

    def __init__(self, root: Path) -> None:
        self.db = sqlite3.connect(root / "state.sqlite")
        self.db.execute(_SCHEMA)
        self.run = uuid.uuid4().hex
        self.pending = 0

    def marker(self, doc_id: str) -> str | None:
        row = self.db.execute("SELECT marker FROM entries WHERE id = ?", (doc_id,)).fetchone()
        return None if row is None else row[0]

    def seen(self, doc_id: str) -> bool:
        """Whether this run listed `doc_id` already (marks it listed when not)."""
        row = self.db.execute("SELECT run FROM entries WHERE id = ?", (doc_id,)).fetchone()
        if row is not None and row[0] == self.run:
            return True
        self.db.execute("INSERT INTO entries VALUES (?, NULL, NULL, ?) ON CONFLICT(id) DO UPDATE "
                        "SET run = excluded.run", (doc_id, self.run))
        self._tick()
        return False

    def record(self, doc_id: str, marker: str | None, size: int | None) -> None:
        self.db.execute("UPDATE entries SET marker = ?, size = ? WHERE id = ?",
                        (marker, size, doc_id))
        self._tick()

    def forget(self, doc_id: str) -> None:
        self.db.execute("DELETE FROM entries WHERE id = ?", (doc_id,))
        self._tick()

    def _tick(self) -> None:
        self.pending += 1
        if self.pending >= _COMMIT_EVERY:
            self.commit()

    def commit(self) -> None:
        self.db.commit()
        self.pending = 0

    def unseen(self) -> Iterator[str]:
        """The ids this run did not list, in batches read off the database."""
        while True:
            batch = [r[0] for r in self.db.execute(
                "SELECT id FROM entries WHERE run != ? LIMIT 1000", (self.run,))]
            if not batch:
                return
            yield from batch
            self.db.executemany("DELETE FROM entries WHERE id = ?", [(i,) for i in batch])
            self.commit()

    def close(self) -> None:
        self.commit()
        self.db.close()


class _Previous:
    """What the last sync left, for a source's listing (`situate.tasks.sources.base.Previous`)."""

    def __init__(self, state: _State, tree: Path) -> None:
        self.state, self.tree = state, tree

    def marker(self, doc_id: str) -> str | None:
        if not safe_id(doc_id) or not (self.tree / doc_id).is_file():
            return None
        return self.state.marker(doc_id)

    def body(self, doc_id: str, limit: int) -> bytes | None:
        if not safe_id(doc_id):
            return None
        try:
            with open(self.tree / doc_id, "rb") as f:
                return f.read(limit)
        except OSError:
            return None


def _write(tree: Path, doc_id: str, body: bytes) -> None:
    """`body` at `tree/doc_id`, whole: written beside it under a hidden name (a folder corpus
    never reads those), then renamed over it."""
    path = tree / doc_id
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.parent / f".situate-{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise


def _remove(tree: Path, doc_id: str) -> None:
    if not safe_id(doc_id):
        return
    path = tree / doc_id
    with suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
        path.unlink()
    parent = path.parent
    while parent != tree:  # folders left empty go too
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def sync(url: str, cache_dir: str | Path, limit: int, source: Source | None = None,
         credentials: Mapping[str, Any] | None = None) -> SyncReport:
    """Bring the mirror of `url` up to date (see the module's docstring) and say what it did.

    `limit`: the most bytes one document may have (a larger one is left out, as a folder's
    file over its limit is). `credentials`: a Prefect block's fields for the source
    (`--credentials-block`). InputError (one line) when the source cannot be listed at all."""
    started = time.perf_counter()
    root = mirror_root(url, cache_dir)
    tree = root / "tree"
    # the source opens (or refuses its URL, credentials) before its mirror's folders are made:
    # a refused URL leaves no empty mirror behind; a source works in its folder only when listed
    source = source or open_source(url, root / "work", credentials)
    tree.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    (root / "work").mkdir(mode=0o700, exist_ok=True)
    report = SyncReport(shown(url), str(tree))
    state = _State(root)
    try:
        for entry in source.entries(_Previous(state, tree)):
            _take(entry, source, state, tree, limit, report)
        report.complete = bool(source.complete) and not report.failed_count
        report.revision = str(getattr(source, "commit", "") or "")
        state.commit()
        if report.complete:
            for doc_id in state.unseen():
                _remove(tree, doc_id)
                report.deleted += 1
        else:
            log.warning(f"{report.url}: the sync saw only part of the source "
                        f"({report.failed_count} failed); nothing is deleted on its word")
    finally:
        state.close()
        source.close()
    report.seconds = time.perf_counter() - started
    return report


def _take(entry: Entry, source: Source, state: _State, tree: Path, limit: int,
          report: SyncReport) -> None:
    """One listed entry into the mirror: left alone when its marker is the one recorded, else
    fetched (unless the listing brought its bytes) and written."""
    if not safe_id(entry.id):
        report.refused += 1
        log.warning(f"{report.url}: {entry.id[:200]!r} is no safe relative path; skipped")
        return
    if state.seen(entry.id):
        return
    report.listed += 1
    if entry.failed:
        _failed(report, entry.id, entry.failed)
        return
    if entry.body is None and state.marker(entry.id) == entry.marker and (tree / entry.id).is_file():
        report.unchanged += 1
        return
    try:
        if entry.too_large:
            raise TooLarge
        body = entry.body if entry.body is not None else source.fetch(entry, limit)
        if len(body) > limit:
            raise TooLarge
        _write(tree, entry.id, body)
    except TooLarge:
        report.too_large += 1
        log.warning(f"{report.url}: {entry.id} is over its byte limit (SITUATE_MAX_FILE_BYTES for "
                    "text, SITUATE_MAX_DOCUMENT_BYTES for others); skipped")
        _remove(tree, entry.id)
        state.forget(entry.id)
        return
    except FetchFailed as e:
        _failed(report, entry.id, str(e))
        return
    except OSError as e:  # a path the mirror cannot hold (a file where a folder is)
        _failed(report, entry.id, f"cannot be written to the mirror ({e.strerror})")
        return
    state.record(entry.id, entry.marker, len(body))
    report.fetched += 1
    report.fetched_bytes += len(body)


def _failed(report: SyncReport, doc_id: str, why: str) -> None:
    report.failed_count += 1
    if len(report.failed) < FAILED_SHOWN:
        report.failed.append((doc_id, shown(why)))
    log.warning(f"{report.url}: {doc_id} failed: {shown(why)}")


def with_versions(documents: Iterator[Document], tree: Path) -> Iterator[Document]:
    """`documents` read from the mirror `tree`, each with its source version in its metadata
    (`version`: the change marker the mirror recorded for it: a git blob hash, an ETag or
    Last-Modified). A marker changes exactly when the document's bytes do, so a document's rows
    carry the same version whether they were written by a fresh ingest or an update."""
    db = sqlite3.connect(f"file:{tree.parent / 'state.sqlite'}?mode=ro", uri=True)
    try:
        for doc in documents:
            row = db.execute("SELECT marker FROM entries WHERE id = ?", (doc.id,)).fetchone()
            yield replace(doc, metadata={**doc.metadata, "version": row[0] if row else ""})
    finally:
        db.close()


def check_mirror(url: str, cache_dir: str | Path) -> Path:
    """The mirror's folder of `url` for a run that reads it after its sync; InputError if there
    is none."""
    tree = mirror_root(url, cache_dir) / "tree"
    if not tree.is_dir():
        raise InputError(f"{shown(url)}: not synced yet (no mirror under {cache_dir})")
    return tree
