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
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Collection, Iterable, Iterator, KeysView, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from situate.core.errors import InputError
from situate.core.records import Chunk, Document, Indexes, index_key
from situate.core.settings import get_settings
from situate.tasks.corpus.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, make_chunks
from situate.tasks.corpus.clean import MAX_CHUNK_BYTES, Tally, clean_text, clean_value, id_problem
from situate.tasks.corpus.files import (
    cannot_read,
    inside,
    is_system_file,
    open_checked,
    read_bounded,
)
from situate.tasks.corpus.filetypes import TEXT_SUFFIXES
from situate.tasks.corpus.readers import LEGACY, Unreadable, document_suffixes
from situate.tasks.corpus.sandbox import read_request, reader_process

_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv",
                        ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", "dist", "build"})


@dataclass(frozen=True)
class Corpus:
    """What a loader returns: the documents, the form it read, and what it skipped."""

    path: str
    form: str
    documents: tuple[Document, ...]
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
class CorpusScan:
    """What a checking pass over a corpus found, without its texts: counts, each document's
    `ScannedDocument` (in corpus order: the order a run writes them), and what it skipped. The
    ingest flow plans with it, then reads again only the documents its plan processes."""

    path: str
    form: str
    documents: int
    chunks: int
    scanned: Mapping[str, ScannedDocument]
    skipped_empty: int = 0
    skipped_files: int = 0
    skipped_large_files: int = 0
    skipped_chunks: int = 0
    cleaned_chars: int = 0
    formats: tuple[tuple[str, int], ...] = ()
    units: tuple[tuple[str, int], ...] = ()
    skipped: tuple[tuple[str, int], ...] = ()
    seconds: float = 0.0  # how long the pass took
    # Documents whose read was slow, kept whole (KEEP_SLOWER_THAN, KEEP_BYTES) for the run.
    kept: Mapping[str, Document] = field(default_factory=dict, repr=False)

    @property
    def ids(self) -> KeysView[str]:
        return self.scanned.keys()

    @property
    def order(self) -> tuple[str, ...]:
        """The document ids in corpus order."""
        return tuple(self.scanned)


# --- loaders -------------------------------------------------------------------------------------

Cut = Callable[[str], "list[tuple[int, str, dict[str, Any]]] | None"]


def _document(tally: Tally, where: str, doc_id: str, text: str, title: str,
              metadata: dict[str, Any], pieces: list[tuple[int, str]] | None = None,
              size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_CHUNK_OVERLAP,
              cut: Cut | None = None) -> Document | None:
    """The one place every loader makes a Document: clean its texts, chunk it (or take the given
    `pieces`, (index, text) pairs of a pre-chunked document), drop chunks too long to store.
    `cut` chunks the cleaned text along the document's own structure ((start, text, where)
    triples; None from it: cut as plain text).

    None when nothing of it can be stored: blank (counted as empty), or every chunk too long.
    """
    problem = id_problem(doc_id)
    if problem:
        raise InputError(f"{where}: document id {doc_id!r} contains {problem}; ids are kept exact, "
                         "so it is not cleaned: give the document an id without it")
    text, count = clean_text(text)
    title, _ = clean_text(title)  # derived from the metadata or the id: counted there
    metadata, n = clean_value(metadata)
    count += n
    chunks: list[Chunk] = []
    structured = cut(text) if cut is not None and text.strip() else None
    if structured is not None:
        chunks = [Chunk(doc_id, i, piece, start, place)
                  for i, (start, piece, place) in enumerate(structured)]
    elif pieces is None:
        chunks = list(make_chunks(doc_id, text, size, overlap)) if text.strip() else []
    elif text.strip():
        cursor = 0
        for index, piece in pieces:
            piece, n = clean_text(piece)
            count += n
            start = text.find(piece, cursor)
            if start < 0:
                start = text.find(piece)
            else:
                cursor = start + len(piece)
            if piece.strip():
                chunks.append(Chunk(doc_id, index, piece, start))
    tally.cleaned(doc_id, count)
    if not text.strip() or (pieces is not None and not pieces):
        tally.empty += 1
        return None
    kept = []
    for c in chunks:
        nbytes = len(c.text.encode())
        if nbytes > MAX_CHUNK_BYTES:
            tally.oversize_chunk(doc_id, c.index, nbytes)
        else:
            kept.append(c)
    if chunks and not kept:
        return None
    return Document(doc_id, text, tuple(kept), title, metadata)


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
    return Corpus(str(path), tally.form, documents, tally.empty, tally.skipped_files,
                  tally.large_files, tally.skipped_chunks, tally.cleaned_chars, *_counts(tally))


# A document whose read (reading, cleaning, cutting) took this long is kept whole by the checking
# pass, up to KEEP_BYTES of text in all, and handed to the run instead of being read again: a
# slow file costs one read, not two. Ordinary files take milliseconds and are read again.
KEEP_SLOWER_THAN = 1.0  # seconds
KEEP_BYTES = 64 * 2**20


def scan_corpus(path: str | Path, chunk_size: int = DEFAULT_CHUNK_SIZE,
                chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
                max_file_bytes: int | None = None, code_chunks: str | None = None,
                follow_links: bool | None = None) -> CorpusScan:
    """Check a whole corpus as `load_corpus` does (the same errors, the same log lines) while
    keeping, per document, only what a plan needs (`ScannedDocument`): memory grows with the
    number of documents, not their text.

    Every document is read in full here: its fingerprint is of the text its reader extracts (a
    file's bytes would not tell a new reader's text from the old one's), and a corpus is checked
    whole before anything is written. What the run then reads again is only what its plan
    processes (`stream_corpus(wanted=...)`): an unchanged document is read once, and so is a
    slow one (kept whole from here: `KEEP_SLOWER_THAN`)."""
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
    formats, units, skipped = _counts(tally)
    return CorpusScan(str(path), tally.form, len(scanned), chunks, scanned, tally.empty,
                      tally.skipped_files, tally.large_files, tally.skipped_chunks,
                      tally.cleaned_chars, formats, units, skipped,
                      seconds=time.perf_counter() - started, kept=kept)


def stream_corpus(path: str | Path, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
                  max_file_bytes: int | None = None,
                  code_chunks: str | None = None,
                  follow_links: bool | None = None,
                  wanted: Collection[str] | None = None,
                  kept: Mapping[str, Document] | None = None) -> Iterator[Document]:
    """The documents of a corpus `scan_corpus` has checked, one at a time, in corpus order, saying
    nothing the scan said already. JSONL and directories are read lazily; a pre-chunked JSON is
    parsed whole (its format is one JSON value). With `wanted`, only those documents: the others
    are passed over without being read (a directory's files are not opened), cleaned or cut.
    `kept` (the scan's `kept`, with `wanted` in corpus order) are handed over, not read again."""
    tally = _tally(path, max_file_bytes, quiet=True, code_chunks=code_chunks,
                   follow_links=follow_links)
    if not kept or wanted is None:
        tally.wanted = wanted
        documents = iter_corpus(path, chunk_size, chunk_overlap, tally)
        return documents if wanted is None else (d for d in documents if d.id in wanted)
    tally.wanted = {d for d in wanted if d not in kept}
    read = (d for d in iter_corpus(path, chunk_size, chunk_overlap, tally) if d.id in tally.wanted)
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
           code_chunks: str | None = None, follow_links: bool | None = None) -> Tally:
    settings = get_settings()
    limit = max_file_bytes if max_file_bytes is not None else settings.max_file_bytes
    return Tally(str(path), limit, quiet=quiet, document_limit=settings.max_document_bytes,
                 code_chunks=code_chunks or settings.code_chunks,
                 follow_links=settings.follow_links if follow_links is None else follow_links,
                 read_seconds=settings.read_seconds, read_memory=int(settings.read_memory),
                 max_pages=settings.max_pdf_pages)


def _counts(tally: Tally) -> tuple[tuple[tuple[str, int], ...], ...]:
    return tuple(tuple(sorted(c.items())) for c in (tally.formats, tally.units, tally.reasons))


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
        if size > tally.document_limit:
            raise InputError(f"{p}: {size} bytes, over the {tally.document_limit}-byte limit for one "
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
        if size > tally.limit:
            raise InputError(f"{p}: {size} bytes, over the {tally.limit}-byte limit for one file; split "
                             "it, or raise SITUATE_MAX_FILE_BYTES")
        if suffix in document_suffixes():  # Markdown: text, read by its structure
            try:
                doc = _read_document(p, p.name, str(p), tally, chunk_size, chunk_overlap, real, st)
            except Unreadable as e:
                if not e.kind.startswith("not "):
                    raise InputError(f"{p}: {e}; nothing to ingest") from None
                doc = None
        else:
            try:
                body = _read_text_file(real, st, tally.limit)
            except Unreadable as e:
                raise InputError(f"{p}: {e}; nothing to ingest") from None
            except _OverLimit:
                raise InputError(f"{p}: over the {tally.limit}-byte limit for one file; split it, "
                                 "or raise SITUATE_MAX_FILE_BYTES") from None
            doc = None if body is None else _text_document(p, p.name, str(p), body, tally,
                                                           chunk_size, chunk_overlap)
        if doc is None:
            raise InputError(f"{p}: the file is empty or not UTF-8 text; nothing to ingest")
        return iter((doc,))
    raise InputError(f"{p}: unknown corpus form {suffix!r}; give a pre-chunked .json, a .jsonl of "
                     "documents, a directory, or a text, source, PDF, HTML, DOCX, PPTX, XLSX, EPUB "
                     "or notebook file")


def _read_text(p: Path) -> str:
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot be read ({e.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - raw.rfind(b"\n", 0, e.start)
        raise InputError(f"{p}: line {line} is not UTF-8 text (byte {column} of the line); convert "
                         "the file to UTF-8") from None


def _iter_prechunked(p: Path, tally: Tally) -> Iterator[Document]:
    text = _read_text(p)
    if not text.strip():
        raise InputError(f"{p}: the file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: bad JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(data, list):
        raise InputError(f"{p}: expected a JSON list of documents with 'doc_id', 'content' and "
                         "'chunks' (the codebase_chunks.json format); for plain documents use JSONL")
    del text
    seen: set[str] = set()
    for n, item in enumerate(data):
        where = f"{p}: document #{n + 1}"
        if not isinstance(item, dict):
            raise InputError(f"{where} is not an object")
        doc_id = item.get("doc_id", item.get("original_uuid"))
        content = item.get("content")
        chunks = item.get("chunks")
        if not isinstance(doc_id, str) or not doc_id:
            raise InputError(f"{where} has no 'doc_id' string")
        if not isinstance(content, str):
            raise InputError(f"{where} ({doc_id}) has no 'content' string")
        if not isinstance(chunks, list):
            raise InputError(f"{where} ({doc_id}) has no 'chunks' list")
        if doc_id in seen:
            raise InputError(f"{where}: duplicate doc_id {doc_id!r}; ids must be unique")
        seen.add(doc_id)
        if tally.passes_over(doc_id):
            continue
        pieces: list[tuple[int, str]] = []
        indexes: set[int] = set()
        for m, c in enumerate(chunks):
            if not isinstance(c, dict) or not isinstance(c.get("content"), str):
                raise InputError(f"{where} ({doc_id}), chunk #{m + 1}: no 'content' string")
            index = c.get("original_index", m)
            if not isinstance(index, int) or isinstance(index, bool) or index in indexes:
                raise InputError(f"{where} ({doc_id}), chunk #{m + 1}: 'original_index' must be "
                                 "a unique integer")
            indexes.add(index)
            pieces.append((index, c["content"]))
        metadata = {k: v for k, v in item.items() if k not in ("content", "chunks", "doc_id")}
        metadata.update(item.get("metadata") or {})
        title = str(metadata.get("relative_path") or metadata.get("title") or "")
        doc = _document(tally, where, doc_id, content, title, metadata, pieces)
        if doc is not None:
            yield doc


def iter_jsonl(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line, read one line at a time; InputError at the
    first line that is not UTF-8 or not a JSON object, or at the end if no line had content.

    Each line is decoded on its own, so a bad byte is reported at its exact line. The caller has
    checked that the file exists.
    """
    try:
        f = p.open("rb")
    except OSError as e:
        raise InputError(f"{p}: cannot be read ({e.strerror})") from None
    any_content = False
    with f:
        for number, raw in enumerate(f, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte-order mark
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{p}: line {number} is not UTF-8 text (byte {e.start + 1} of the "
                                 "line); convert the file to UTF-8") from None
            if not line.strip():
                continue
            any_content = True
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{p}: bad JSON at line {number}, column {e.colno}: "
                                 f"{e.msg}") from None
            if not isinstance(item, dict):
                raise InputError(f"{p}: line {number} is not a JSON object")
            yield number, item
    if not any_content:
        raise InputError(f"{p}: the file is empty")


def _iter_jsonl(p: Path, size: int, overlap: int, tally: Tally) -> Iterator[Document]:
    found = 0
    seen: dict[str, int] = {}
    for number, item in iter_jsonl(p):
        doc_id, body = item.get("id"), item.get("text")
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id:
            raise InputError(f"{p}: line {number} has no 'id' (a string or an integer)")
        if not isinstance(body, str):
            raise InputError(f"{p}: line {number} ({doc_id}) has no 'text' string")
        metadata = item.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InputError(f"{p}: line {number} ({doc_id}): 'metadata' must be an object")
        if doc_id in seen:
            raise InputError(f"{p}: line {number}: duplicate id {doc_id!r} (first on line "
                             f"{seen[doc_id]}); ids must be unique")
        seen[doc_id] = number
        if tally.passes_over(doc_id):
            found += 1
            continue
        title = str(metadata.get("title") or metadata.get("path") or doc_id)
        doc = _document(tally, f"{p}: line {number}", doc_id, body, title, metadata, None, size,
                        overlap)
        if doc is not None:
            found += 1
            yield doc
    if not found and not tally.empty and not tally.skipped_chunks:
        raise InputError(f"{p}: no documents in the file")


def _walk(root: Path, tally: Tally) -> Iterator[Path]:
    """The files under `root`, sorted, hidden and tool directories left out. A linked directory
    is not entered (one whose target is outside the corpus is counted as a link out), unless
    `tally.follow_links`: then each directory is entered once, however many links lead to it
    (a link to an ancestor does not loop), and never one on /proc, /sys or /dev."""
    root_real = os.path.realpath(root)
    entered: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=tally.follow_links):
        if tally.follow_links:
            try:
                here = os.stat(dirpath)
            except OSError:
                dirnames[:] = []
                continue
            if (here.st_dev, here.st_ino) in entered or is_system_file(here, os.path.realpath(dirpath)):
                dirnames[:] = []
                continue
            entered.add((here.st_dev, here.st_ino))
        kept = []
        for d in sorted(dirnames):
            if d in _SKIP_DIRS or d.startswith("."):
                continue
            sub = Path(dirpath) / d
            if not tally.follow_links and sub.is_symlink():
                target = os.path.realpath(sub)
                if not inside(target, root_real):
                    tally.link_out(sub, target)
                continue
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def _corpus_file(f: Path, root_real: str, tally: Tally) -> tuple[str, os.stat_result] | None:
    """Where file `f` of a directory corpus really is and what it is, when it is the corpus's own
    regular file; None, counted, when it is not: a link out of the corpus (unless
    `tally.follow_links`), a file of /proc, /sys or /dev, a FIFO, device or socket (reading
    could block or never end), a dangling link."""
    try:
        st = os.lstat(f)
    except OSError as e:  # gone since the walk listed it, or its directory cannot be searched
        why = cannot_read(e)
        tally.skip(f, why.kind, why.detail)
        return None
    real = os.path.abspath(f)
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(f)
        if not tally.follow_links and not inside(real, root_real):
            tally.link_out(f, real)
            return None
        try:
            st = os.stat(real)
        except OSError:
            tally.skipped_files += 1  # a dangling link
            return None
    if is_system_file(st, real):
        tally.skip(f, "system file", "a file of /proc, /sys or /dev is never read")
        return None
    if not stat.S_ISREG(st.st_mode):
        tally.skipped_files += 1  # a FIFO, device or socket
        return None
    return real, st


def _given_file(p: Path) -> tuple[str, os.stat_result]:
    """A corpus given as one file: where it is and what it is; InputError for a file that is no
    regular file or is one of /proc, /sys or /dev."""
    real = os.path.realpath(p)
    try:
        st = os.stat(real)
    except OSError as e:
        raise InputError(f"{p}: cannot be read ({e.strerror})") from None
    if is_system_file(st, real) or not stat.S_ISREG(st.st_mode):
        raise InputError(f"{p}: not a regular file (a pipe, device, socket, or a file of /proc, "
                         "/sys or /dev); give a file or a directory of documents")
    return real, st


class _OverLimit(Exception):
    """A file that held more than its limit once read, whatever size it claimed."""


def _read_text_file(real: str, st: os.stat_result, limit: int) -> str | None:
    """A file's text, or None for a binary (a NUL early on) or non-UTF-8 file. `_OverLimit` for
    one that holds more than `limit` bytes once read, `Unreadable` when it cannot be read."""
    fd = open_checked(real, (st.st_dev, st.st_ino))
    try:
        raw = read_bounded(fd, limit)
    finally:
        os.close(fd)
    if raw is None:
        raise _OverLimit
    if b"\x00" in raw[:4096]:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _file_metadata(p: Path, doc_id: str) -> dict[str, Any]:
    return {"path": doc_id, "suffix": p.suffix.lower()}


def _iter_directory(root: Path, size: int, overlap: int, tally: Tally) -> Iterator[Document]:
    found = 0
    root_real = os.path.realpath(root)
    for f in _walk(root, tally):
        suffix = f.suffix.lower()
        document = suffix in document_suffixes()
        if suffix in LEGACY:
            tally.skip(f, LEGACY[suffix].split(":")[0], LEGACY[suffix].split(": ", 1)[-1])
            continue
        if suffix not in TEXT_SUFFIXES and suffix and not document:
            tally.skipped_files += 1
            continue
        checked = _corpus_file(f, root_real, tally)
        if checked is None:
            continue
        real, st = checked
        binary = document and suffix not in TEXT_SUFFIXES
        if st.st_size > (tally.document_limit if binary else tally.limit):
            tally.large_file(f, st.st_size, binary)
            continue
        rel = f.relative_to(root).as_posix()
        if tally.passes_over(rel):
            found += 1
            continue
        where = f"{root}: file {rel!r}"
        if document:
            try:
                doc = _read_document(f, rel, where, tally, size, overlap, real, st)
            except Unreadable as e:
                if binary or not e.kind.startswith("not "):
                    tally.skip(f, e.kind, e.detail)
                else:
                    tally.skipped_files += 1  # a text format that is binary or not UTF-8
                continue
        else:
            try:
                body = _read_text_file(real, st, tally.limit)
            except Unreadable as e:
                tally.skip(f, e.kind, e.detail)
                continue
            except _OverLimit:
                tally.large_file(f, None)
                continue
            if body is None:
                tally.skipped_files += 1
                continue
            doc = _text_document(f, rel, where, body, tally, size, overlap)
        if doc is not None:
            found += 1
            yield doc
    if not found and not tally.empty and not tally.large_files and not tally.skipped_chunks:
        skipped = ", ".join(f"{n} {kind}" for kind, n in tally.reasons.most_common())
        raise InputError(f"{root}: no documents, text, Markdown or source files found in the "
                         "directory" + (f" (skipped: {skipped})" if skipped else ""))


def _text_document(f: Path, doc_id: str, where: str, body: str, tally: Tally, size: int,
                   overlap: int) -> Document | None:
    """A text or source file: source code cut along its syntax tree where the language has a
    grammar and `code_chunks` is "syntax", everything else (and code that does not parse) as
    text."""
    metadata = _file_metadata(f, doc_id)
    cut: Cut | None = None
    if tally.code_chunks == "syntax":
        from situate.tasks.corpus.code import chunk_code, language_for

        if language_for(f.suffix.lower()):
            suffix = f.suffix.lower()

            def cut(text: str) -> list[tuple[int, str, dict[str, Any]]] | None:
                pieces = chunk_code(text, suffix, size, overlap)
                if pieces is None:
                    return None
                return [(p.start, p.text, {"symbols": list(p.symbols)} if p.symbols else {})
                        for p in pieces]

            metadata["chunks"] = "syntax"
    return _document(tally, where, doc_id, body, doc_id, metadata, None, size, overlap, cut)


def _read_document(f: Path, doc_id: str, where: str, tally: Tally, size: int, overlap: int,
                   real: str, st: os.stat_result) -> Document | None:
    """A PDF, HTML, Office, EPUB, Markdown or notebook file through its reader, cut along its
    structure, in the reader process (situate.tasks.corpus.sandbox: a CPU budget, a memory
    limit). Unreadable (counted by the caller) when the reader refuses it, also midway through,
    or when it runs past a limit."""
    request = read_request(real, str(f), st, max_bytes=tally.document_limit,
                           max_pages=tally.max_pages, seconds=tally.read_seconds, size=size,
                           overlap=overlap)
    got = reader_process(tally.read_memory).read(request)
    tally.cleaned(doc_id, int(got["cleaned"]))
    fmt = str(got["format"])
    metadata = {**_file_metadata(f, doc_id), **got["metadata"], "format": fmt}
    title = str(got["title"]).strip()
    if title:
        metadata["document_title"] = title
    tally.formats[fmt] += 1
    if got["unit"] and got["units"]:
        tally.units[str(got["unit"])] += int(got["units"])
    text = str(got["text"])
    pieces = [(start, text[start:start + n], place) for start, n, place in got["pieces"]]
    return _document(tally, where, doc_id, text, doc_id, metadata, None, size, overlap,
                     lambda _: pieces)
