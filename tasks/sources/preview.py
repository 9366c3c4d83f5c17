"""A source priced without syncing it (`situate ingest --dry-run`): its listing, compared with the
mirror's markers, and the mirror scanned as it stands.

Nothing is fetched beyond the listing and nothing is written: an S3 prefix is listed (its keys,
sizes and ETags); a website with a sitemap is listed from the sitemap, its pages not requested
(a page the mirror already holds is "to check": the sync will ask for it with a conditional
request, a 304 when it has not changed); a git repository's listing is its shallow fetch, which
it needs to know the tree. A website without a sitemap can only be listed by crawling it: its
pages are then requested (conditionally, with the mirror's ETags), bounded by the same limits as
a sync, and the preview says so (`fetched_to_list`).

The plan's own figures (documents, chunks, tokens, requests, price) are those of the mirror's
current copy against the collection; what the sync would fetch is counted here, with its bytes
when the listing gives sizes, so that the price of the documents not yet mirrored can be
estimated from their bytes (`chars_per_token`).
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from situate.core.secrets import block_credentials
from situate.core.settings import get_settings
from situate.tasks.corpus.load import CorpusScan, scan_corpus
from situate.tasks.sources.base import Entry, open_source, shown
from situate.tasks.sources.mirror import _Previous, mirror_root, safe_id


@dataclass
class SourcePreview:
    """What a sync of the source would do, from its listing alone: documents new to the mirror,
    changed (another marker), unchanged (the same marker: not fetched), to check (held, but the
    listing has no marker: a sitemap's page, asked conditionally), gone (only when the listing
    saw the whole source), failed, over the byte limit; the bytes to fetch where the listing
    knows sizes, and how many it does not."""

    url: str
    listed: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    to_check: int = 0
    gone: int = 0
    failed: int = 0
    too_large: int = 0
    bytes_to_fetch: int = 0
    sizes_unknown: int = 0
    complete: bool = True
    fetched_to_list: bool = False
    failures: list[tuple[str, str]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"listed": self.listed, "new": self.new, "changed": self.changed,
                "unchanged (not fetched)": self.unchanged, "to check (conditional request)":
                self.to_check, "gone": self.gone, "failed": self.failed,
                "over the limit": self.too_large, "bytes to fetch": self.bytes_to_fetch,
                "sizes unknown": self.sizes_unknown}

    def note(self) -> str:
        """How the listing was made, in one line for the dry run's text."""
        how = ("the site has no sitemap: its pages were requested to find their links "
               "(conditionally, within SITUATE_WEB_MAX_PAGES / SITUATE_WEB_MAX_SECONDS), "
               "none written" if self.fetched_to_list else
               "listed only: no document fetched into the mirror, nothing written to it or to the "
               "collection")
        gone = "" if self.complete else "; the listing was incomplete, so nothing would be pruned"
        return (f"source {self.url}: {how}{gone}; the plan prices the mirror's current copy, "
                f"and the sync would fetch {self.new + self.changed} document(s) "
                f"({self.bytes_to_fetch:,} bytes listed"
                + (f", {self.sizes_unknown} of unknown size" if self.sizes_unknown else "") + ")")


def preview(url: str, cache_dir: str | Path, limit: int,
            credentials: Mapping[str, Any] | None = None) -> SourcePreview:
    """The listing of `url` against the markers of its mirror (see the module's docstring)."""
    root = mirror_root(url, cache_dir)
    state_file = root / "state.sqlite"
    if state_file.is_file():
        db = sqlite3.connect(f"file:{state_file}?mode=ro", uri=True)
    else:
        db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE entries (id TEXT PRIMARY KEY, marker TEXT, size INTEGER, "
                   "run TEXT)")
    db.execute("CREATE TEMP TABLE listed (id TEXT PRIMARY KEY)")
    tree = root / "tree"
    result = SourcePreview(shown(url))
    with tempfile.TemporaryDirectory(prefix="situate-preview-") as scratch:
        workdir = root / "work" if (root / "work").is_dir() else Path(scratch)
        source = open_source(url, workdir, credentials)
        held = _Previous(_Markers(db), tree)  # type: ignore[arg-type]
        try:
            listing = getattr(source, "listing", None)
            entries = listing(held) if listing else source.entries(held)
            for entry in entries:
                if not safe_id(entry.id) or db.execute(
                        "INSERT OR IGNORE INTO listed VALUES (?)", (entry.id,)).rowcount == 0:
                    continue
                _count(result, entry, held.marker(entry.id), limit)
            result.complete = bool(source.complete) and not result.failed
            result.fetched_to_list = bool(getattr(source, "fetched_to_list", False))
        finally:
            source.close()
    if result.complete:
        result.gone = db.execute("SELECT count(*) FROM entries WHERE marker IS NOT NULL AND id "
                                 "NOT IN (SELECT id FROM temp.listed)").fetchone()[0]
    db.close()
    return result


def _count(result: SourcePreview, entry: Entry, held: str | None, limit: int) -> None:
    result.listed += 1
    if entry.failed:
        result.failed += 1
        if len(result.failures) < 20:
            result.failures.append((entry.id, shown(entry.failed)))
        return
    size = entry.size if entry.size is not None else (
        len(entry.body) if entry.body is not None else None)
    if entry.too_large or (size is not None and size > limit):
        result.too_large += 1
        return
    if held is not None and entry.marker == "":
        result.to_check += 1
        return
    if held is not None and held == entry.marker:
        result.unchanged += 1
        return
    if held is None:
        result.new += 1
    else:
        result.changed += 1
    if size is None:
        result.sizes_unknown += 1
    else:
        result.bytes_to_fetch += size


class _Markers:
    """The mirror's recorded markers, read only (what `mirror._Previous` asks of its state)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def marker(self, doc_id: str) -> str | None:
        row = self.db.execute("SELECT marker FROM entries WHERE id = ?", (doc_id,)).fetchone()
        return None if row is None else row[0]


def preview_scan(url: str, chunk_size: int, chunk_overlap: int, code_chunks: str | None,
                 cache_dir: str, credentials_block: str | None = None
                 ) -> tuple[CorpusScan, SourcePreview]:
    """The dry run's scan of a source: its mirror as it stands (read as a folder; an empty scan
    when there is none yet), and the preview of its sync (a document's limit: a sync's)."""
    settings = get_settings()
    seen = preview(url, cache_dir, max(settings.max_document_bytes, settings.max_file_bytes),
                   block_credentials(credentials_block))
    tree = mirror_root(url, cache_dir) / "tree"
    if tree.is_dir() and any(tree.iterdir()):
        scan = scan_corpus(str(tree), chunk_size, chunk_overlap, None, code_chunks,
                           follow_links=False)
        return replace(scan, path=seen.url), seen
    return CorpusScan(seen.url, "directory", 0, 0, {}), seen
