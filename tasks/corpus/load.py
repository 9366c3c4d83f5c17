"""Loading corpora in their three forms, validating them, and chunking whole documents.

Forms: a pre-chunked JSON (the codebase benchmark's format), a JSONL file of documents, or a
directory (or single file) of text, Markdown and source files. Every problem with the input becomes
one InputError naming the file, the place and what to do; nothing is written before loading is done.

Odd pieces of a corpus never refuse the whole of it; they are repaired or left out, visibly. Every
document of every form is built by `_document`, which removes NUL bytes and replaces lone
surrogates (Milvus refuses both) and skips a chunk too long for its field; a directory's files over
`max_file_bytes` are skipped unread. Each is counted on the `Corpus` and said in the
`situate.load` log.

A directory is read as its own files only (situate.tasks.corpus.files): a link out of it, a file
of /proc, a pipe or device, a file that cannot be read are each a counted skip. Documents (PDF,
Office, EPUB, HTML, Markdown, notebooks) are read in the reader process, within a CPU budget and a
memory limit (situate.tasks.corpus.sandbox).

The forms are read in `forms` (the pre-chunked JSON, JSONL, and the building of every document)
and `directory` (a directory or a single file); here they are loaded whole, scanned for a plan, or
streamed for a run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Iterator, KeysView, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from situate.core.errors import InputError
from situate.core.records import Document, Indexes, index_key
from situate.core.secrets import block_credentials
from situate.core.settings import get_settings
from situate.tasks.corpus.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, make_chunks
from situate.tasks.corpus.clean import (
    MAX_CHUNK_BYTES,
    LoadOptions,
    Tally,
    clean_text,
)
from situate.tasks.corpus.directory import (
    _given_file,
    _iter_directory,
    _OverLimit,
    _read_document,
    _read_text_file,
    _text_document,
)
from situate.tasks.corpus.filetypes import TEXT_SUFFIXES
from situate.tasks.corpus.forms import _iter_jsonl, _iter_prechunked, iter_jsonl
from situate.tasks.corpus.readers import LEGACY, Unreadable, document_suffixes
from situate.tasks.sources.base import is_source
from situate.tasks.sources.mirror import SyncReport, check_mirror, sync, with_versions


@dataclass(frozen=True, kw_only=True)
class CorpusCounts:
    """What a read of a corpus skipped and cleaned, by kind: the counters a loaded corpus
    (`Corpus`) and a checking pass (`CorpusScan`) both report (`counted`)."""

    skipped_empty: int = 0
    skipped_files: int = 0
    # Files over `max_file_bytes` (directory form), never read.
    skipped_large_files: int = 0
    # Chunks too long for Milvus's text field (documents left with none are dropped too).
    skipped_chunks: int = 0
    # NUL bytes removed and lone surrogates replaced (with U+FFFD) in texts and metadata.
    cleaned_chars: int = 0
    # Documents read per format, units read (pages, slides...), document files skipped by reason.
    formats: tuple[tuple[str, int], ...] = ()
    units: tuple[tuple[str, int], ...] = ()
    skipped: tuple[tuple[str, int], ...] = ()


def counted(tally: Tally) -> dict[str, Any]:
    """A read's `CorpusCounts`, from what its `Tally` counted."""
    formats, units, skipped = (tuple(sorted(c.items()))
                               for c in (tally.formats, tally.units, tally.reasons))
    return {"skipped_empty": tally.empty, "skipped_files": tally.skipped_files,
            "skipped_large_files": tally.large_files, "skipped_chunks": tally.skipped_chunks,
            "cleaned_chars": tally.cleaned_chars, "formats": formats, "units": units,
            "skipped": skipped}


@dataclass(frozen=True)
class Corpus(CorpusCounts):
    """What a loader returns: the documents, the form it read, and what it skipped."""

    path: str
    form: str
    documents: tuple[Document, ...]

    @property
    def chunk_count(self) -> int:
        return sum(len(d.chunks) for d in self.documents)


class ScannedDocument(NamedTuple):
    """What the checking pass keeps of one document, without its text: what its fingerprint is
    made of (the hash of its text, how it was cut when not as plain text) and its chunks'
    indexes (`index_key`). A plan compares it with what the collection holds."""

    hash: str
    cut: str
    indexes: Indexes


@dataclass(frozen=True)
class CorpusScan(CorpusCounts):
    """What a checking pass over a corpus found, without its texts: counts, each document's
    `ScannedDocument` (in corpus order: the order a run writes them), and what it skipped. The
    ingest flow plans with it, then reads again only the documents its plan processes."""

    path: str
    form: str
    documents: int
    chunks: int
    scanned: Mapping[str, ScannedDocument]
    seconds: float = 0.0  # how long the pass took
    # Documents whose read was slow, kept whole (KEEP_SLOWER_THAN, KEEP_BYTES) for the run.
    kept: Mapping[str, Document] = field(default_factory=dict, repr=False)
    # A source's sync before the pass (situate.tasks.sources.mirror.SyncReport); None: a local
    # corpus. A sync that is not `complete` (a failed fetch) prunes nothing.
    sync: SyncReport | None = None

    @property
    def ids(self) -> KeysView[str]:
        return self.scanned.keys()

    @property
    def order(self) -> tuple[str, ...]:
        """The document ids in corpus order."""
        return tuple(self.scanned)


def load_corpus(path: str | Path, chunk_size: int = DEFAULT_CHUNK_SIZE,
                chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
                max_file_bytes: int | None = None, code_chunks: str | None = None,
                follow_links: bool | None = None) -> Corpus:
    """Read a whole corpus in any of the three forms into memory; InputError on anything unusable.

    For corpora that fit in memory (evaluation, tests, small runs); the ingest flow uses
    `scan_corpus` and `stream_corpus` instead, which hold one document at a time.
    `max_file_bytes` (default: the `max_file_bytes` setting) bounds one file of a directory, or a
    single text file given alone; JSONL and pre-chunked JSON files are not bounded by it.
    `code_chunks` ("syntax" or "text"; default: the setting) is how source files are cut.
    `follow_links` (default: the setting) reads what links in a directory point to outside it.
    """
    tally = _tally(path, max_file_bytes, quiet=False, code_chunks=code_chunks,
                   follow_links=follow_links)
    documents = tuple(iter_corpus(path, chunk_size, chunk_overlap, tally))
    tally.summarize()
    return Corpus(str(path), tally.form, documents, **counted(tally))


# A document whose read (reading, cleaning, cutting) took this long is kept whole by the checking
# pass, up to KEEP_BYTES of text in all, and handed to the run instead of being read again: a
# slow file costs one read, not two. Ordinary files take milliseconds and are read again.
KEEP_SLOWER_THAN = 1.0  # seconds


KEEP_BYTES = 64 * 2**20


def scan_corpus(path: str | Path, chunk_size: int = DEFAULT_CHUNK_SIZE,
                chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
                max_file_bytes: int | None = None, code_chunks: str | None = None,
                follow_links: bool | None = None, cache_dir: str | None = None,
                credentials_block: str | None = None) -> CorpusScan:
    """Check a whole corpus as `load_corpus` does (the same errors, the same log lines) while
    keeping, per document, only what a plan needs (`ScannedDocument`): memory grows with the
    number of documents, not their text.

    Every document is read in full here: its fingerprint is of the text its reader extracts (a
    file's bytes would not tell a new reader's text from the old one's), and a corpus is checked
    whole before anything is written. What the run then reads again is only what its plan
    processes (`stream_corpus(wanted=...)`): an unchanged document is read once, and so is a
    slow one (kept whole from here: `KEEP_SLOWER_THAN`).

    A source's URL (`situate.tasks.sources`) is synced first into its mirror in `cache_dir`
    (default: the setting): only documents whose change marker moved are fetched; the mirror is
    then scanned as a folder is, and the scan carries the sync's report. `credentials_block`:
    the Prefect block the source's credentials are read from (`--credentials-block`)."""
    if isinstance(path, str) and is_source(path):
        report = sync(path, cache_dir or get_settings().cache_dir,
                      max(get_settings().max_document_bytes, get_settings().max_file_bytes),
                      credentials=block_credentials(credentials_block))
        if report.complete and not any(f.is_file() for f in Path(report.root).rglob("*")):
            # The source's whole listing holds nothing: an empty corpus, so that --prune removes
            # what it held (a folder found empty says "no documents": an unmounted disk looks
            # like that; a listing that failed raised above and deletes nothing).
            logging.getLogger("situate.sources").warning(f"{report.url}: the source lists no "
                                                          "documents")
            return CorpusScan(report.url, "directory", 0, 0, {}, sync=report)
        try:
            scan = scan_corpus(report.root, chunk_size, chunk_overlap, max_file_bytes, code_chunks,
                               follow_links=False)
        except InputError as e:
            raise InputError(f"{report.url}: {str(e).removeprefix(report.root + ': ')}") from None
        return replace(scan, path=report.url, sync=report)
    started = time.perf_counter()
    tally = _tally(path, max_file_bytes, quiet=False, code_chunks=code_chunks,
                   follow_links=follow_links)
    chunks = kept_bytes = 0
    scanned: dict[str, ScannedDocument] = {}
    kept: dict[str, Document] = {}
    documents = iter_corpus(path, chunk_size, chunk_overlap, tally)
    while True:
        began = time.perf_counter()
        doc = next(documents, None)
        if doc is None:
            break
        chunks += len(doc.chunks)
        scanned[doc.id] = ScannedDocument(doc.hash, str(doc.metadata.get("chunks") or ""),
                                          index_key(c.index for c in doc.chunks))
        if time.perf_counter() - began >= KEEP_SLOWER_THAN:
            size = len(doc.text) + sum(len(c.text) for c in doc.chunks)
            if kept_bytes + size <= KEEP_BYTES:
                kept[doc.id] = doc
                kept_bytes += size
    tally.summarize()
    return CorpusScan(str(path), tally.form, len(scanned), chunks, scanned, **counted(tally),
                      seconds=time.perf_counter() - started, kept=kept)


def stream_corpus(path: str | Path, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
                  max_file_bytes: int | None = None,
                  code_chunks: str | None = None,
                  follow_links: bool | None = None,
                  wanted: Collection[str] | None = None,
                  kept: Mapping[str, Document] | None = None,
                  cache_dir: str | None = None) -> Iterator[Document]:
    """The documents of a corpus `scan_corpus` has checked, one at a time, in corpus order, saying
    nothing the scan said already. JSONL and directories are read lazily; a pre-chunked JSON is
    parsed whole (its format is one JSON value). With `wanted`, only those documents: the others
    are passed over without being read (a directory's files are not opened), cleaned or cut.
    `kept` (the scan's `kept`, with `wanted` in corpus order) are handed over, not read again.
    A source's URL is read from the mirror its scan synced, in `cache_dir`; nothing is fetched."""
    if isinstance(path, str) and is_source(path):  # its mirror, each document with its version
        tree = check_mirror(path, cache_dir or get_settings().cache_dir)
        return with_versions(stream_corpus(tree, chunk_size, chunk_overlap, max_file_bytes,
                                           code_chunks, False, wanted, kept), tree)
    if not kept or wanted is None:
        tally = _tally(path, max_file_bytes, quiet=True, code_chunks=code_chunks,
                       follow_links=follow_links, wanted=wanted)
        documents = iter_corpus(path, chunk_size, chunk_overlap, tally)
        return documents if wanted is None else (d for d in documents if d.id in wanted)
    unread = {d for d in wanted if d not in kept}
    tally = _tally(path, max_file_bytes, quiet=True, code_chunks=code_chunks,
                   follow_links=follow_links, wanted=unread)
    read = (d for d in iter_corpus(path, chunk_size, chunk_overlap, tally) if d.id in unread)
    return _merged(read, wanted, kept)


def _merged(read: Iterator[Document], order: Iterable[str],
            kept: Mapping[str, Document]) -> Iterator[Document]:
    """The documents read and the kept ones, in `order` (the kept ones of `order` only)."""
    position = {doc_id: i for i, doc_id in enumerate(order)}
    waiting = sorted((position[d], d) for d in kept if d in position)
    k = 0
    for doc in read:
        here = position.get(doc.id, -1)
        while k < len(waiting) and waiting[k][0] < here:
            yield kept[waiting[k][1]]
            k += 1
        yield doc
    for _, doc_id in waiting[k:]:
        yield kept[doc_id]


def _tally(path: str | Path, max_file_bytes: int | None, quiet: bool,
           code_chunks: str | None = None, follow_links: bool | None = None,
           wanted: Collection[str] | None = None) -> Tally:
    """A load's counters, and its options from the arguments given, else from the settings."""
    settings = get_settings()
    limit = max_file_bytes if max_file_bytes is not None else settings.max_file_bytes
    return Tally(LoadOptions(
        str(path), limit, document_limit=settings.max_document_bytes,
        code_chunks=code_chunks or settings.code_chunks,
        follow_links=settings.follow_links if follow_links is None else follow_links,
        read_seconds=settings.read_seconds, read_memory=int(settings.read_memory),
        max_pages=settings.max_pdf_pages, quiet=quiet, wanted=wanted))


def iter_corpus(path: str | Path, chunk_size: int, chunk_overlap: int,
                tally: Tally) -> Iterator[Document]:
    """Every document of the corpus at `path`, lazily, checked as it is read; `tally` counts what
    was skipped and cleaned, and gets the form read."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"corpus not found: {p} (give a pre-chunked .json, a .jsonl of documents, "
                         "or a directory of text and source files)")
    if p.is_dir():
        tally.form = "directory"
        return _iter_directory(p, chunk_size, chunk_overlap, tally)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        tally.form = "jsonl"
        return _iter_jsonl(p, chunk_size, chunk_overlap, tally)
    if suffix == ".json":
        tally.form = "prechunked-json"
        return _iter_prechunked(p, tally)
    if suffix in document_suffixes() and suffix not in TEXT_SUFFIXES:
        tally.form = "file"
        real, st = _given_file(p)
        size = st.st_size
        if size > tally.options.document_limit:
            raise InputError(f"{p}: {size} bytes, over the {tally.options.document_limit}-byte limit for one "
                             "document; split it, or raise SITUATE_MAX_DOCUMENT_BYTES")
        try:
            doc = _read_document(p, p.name, str(p), tally, chunk_size, chunk_overlap, real, st)
        except Unreadable as e:
            raise InputError(f"{p}: {e}; nothing to ingest") from None
        if doc is None:
            raise InputError(f"{p}: the document has no text; nothing to ingest")
        return iter((doc,))
    if suffix in LEGACY:
        raise InputError(f"{p}: {LEGACY[suffix]}; situate does not read this format")
    if suffix in TEXT_SUFFIXES or suffix == "":
        tally.form = "file"
        real, st = _given_file(p)
        size = st.st_size
        if size > tally.options.limit:
            raise InputError(f"{p}: {size} bytes, over the {tally.options.limit}-byte limit for one "
                             "file; split it, or raise SITUATE_MAX_FILE_BYTES")
        if suffix in document_suffixes():  # Markdown: text, read by its structure
            try:
                doc = _read_document(p, p.name, str(p), tally, chunk_size, chunk_overlap, real, st)
            except Unreadable as e:
                if not e.kind.startswith("not "):
                    raise InputError(f"{p}: {e}; nothing to ingest") from None
                doc = None
        else:
            try:
                body = _read_text_file(real, st, tally.options.limit)
            except Unreadable as e:
                raise InputError(f"{p}: {e}; nothing to ingest") from None
            except _OverLimit:
                raise InputError(f"{p}: over the {tally.options.limit}-byte limit for one file; split it, "
                                 "or raise SITUATE_MAX_FILE_BYTES") from None
            doc = None if body is None else _text_document(p, p.name, str(p), body, tally,
                                                           chunk_size, chunk_overlap)
        if doc is None:
            raise InputError(f"{p}: the file is empty or not UTF-8 text; nothing to ingest")
        return iter((doc,))
    raise InputError(f"{p}: unknown corpus form {suffix!r}; give a pre-chunked .json, a .jsonl of "
                     "documents, a directory, or a text, source, PDF, HTML, DOCX, PPTX, XLSX, EPUB "
                     "or notebook file")


__all__ = ["MAX_CHUNK_BYTES", "Corpus", "CorpusScan", "ScannedDocument", "clean_text", "iter_corpus",
           "iter_jsonl", "load_corpus", "make_chunks", "scan_corpus", "stream_corpus"]
