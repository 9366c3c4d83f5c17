"""A directory corpus (or a single file): the walk over its own files (situate.tasks.corpus.files:
a link out of it, a file of /proc, a pipe or device, a file that cannot be read are each a counted
skip), text and source files read and cut (source along its syntax tree), and documents (PDF,
Office, EPUB, HTML, Markdown, reStructuredText, notebooks) read by their readers in the reader
process, within a CPU budget and a memory limit (situate.tasks.corpus.sandbox).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from situate.core.errors import InputError
from situate.core.records import Document
from situate.tasks.corpus.clean import (
    Tally,
)
from situate.tasks.corpus.files import (
    cannot_read,
    inside,
    is_system_file,
    open_checked,
    read_bounded,
)
from situate.tasks.corpus.filetypes import TEXT_SUFFIXES
from situate.tasks.corpus.forms import Cut, _document
from situate.tasks.corpus.readers import LEGACY, Unreadable, document_suffixes
from situate.tasks.corpus.sandbox import read_request, reader_process

_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv",
                        ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", "dist", "build"})


def _walk(root: Path, tally: Tally) -> Iterator[Path]:
    """The files under `root`, sorted, hidden and tool directories left out. A linked directory
    is not entered (one whose target is outside the corpus is counted as a link out), unless
    `tally.options.follow_links`: then each directory is entered once, however many links lead to it
    (a link to an ancestor does not loop), and never one on /proc, /sys or /dev."""
    root_real = os.path.realpath(root)
    entered: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=tally.options.follow_links):
        if tally.options.follow_links:
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
            if not tally.options.follow_links and sub.is_symlink():
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
    `tally.options.follow_links`), a file of /proc, /sys or /dev, a FIFO, device or socket (reading
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
        if not tally.options.follow_links and not inside(real, root_real):
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
        if st.st_size > (tally.options.document_limit if binary else tally.options.limit):
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
                body = _read_text_file(real, st, tally.options.limit)
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
    text. Counted by its suffix (`py`, `txt`; `text` without one), as a document is by its
    reader's format, so that the formats add up to the files read."""
    tally.formats[f.suffix.lower().lstrip(".") or "text"] += 1
    metadata = _file_metadata(f, doc_id)
    cut: Cut | None = None
    if tally.options.code_chunks == "syntax":
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
    request = read_request(real, str(f), st, max_bytes=tally.options.document_limit,
                           max_pages=tally.options.max_pages, seconds=tally.options.read_seconds, size=size,
                           overlap=overlap)
    got = reader_process(tally.options.read_memory).read(request)
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
