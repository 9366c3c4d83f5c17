"""Loading corpora in their three forms, validating them, and chunking whole documents.

Forms: a pre-chunked JSON (the codebase benchmark's format), a JSONL file of documents, or a
directory (or single file) of text, Markdown and source files. Every problem with the input becomes
one InputError naming the file, the place and what to do; nothing is written before loading is done.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task

from tasks.errors import InputError
from tasks.records import Chunk, Document

DEFAULT_CHUNK_SIZE = 800
DEFAULT_CHUNK_OVERLAP = 100

TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .adoc .org .tex .csv .tsv .json .yaml .yml .toml .ini .cfg .xml .html "
    ".css .py .pyi .rs .go .js .mjs .cjs .ts .tsx .jsx .java .kt .kts .scala .c .h .cc .cpp .cxx .hpp "
    ".hh .cs .rb .php .swift .m .mm .sh .bash .zsh .sql .lua .pl .pm .r .jl .ex .exs .erl .hs .ml "
    ".clj .dart .vue .svelte .proto .graphql .gradle .cmake .dockerfile .tf".split()
)
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv",
                        ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", "dist", "build"})
_PROSE_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".rst", ".adoc", ".org", ".tex"})


@dataclass(frozen=True)
class Corpus:
    """What a loader returns: the documents, the form it read, and what it skipped."""

    path: str
    form: str
    documents: tuple[Document, ...]
    skipped_empty: int = 0
    skipped_files: int = 0

    @property
    def chunk_count(self) -> int:
        return sum(len(d.chunks) for d in self.documents)


# --- chunking ------------------------------------------------------------------------------------

_CODE_START = re.compile(
    r"^(?:(?:pub|export|default|public|private|protected|static|abstract|final|async|unsafe|const)\s+)*"
    r"(?:class|def|fn|struct|enum|trait|impl|interface|type|func|function|module|mod|@\w|#\[|///|/\*\*)"
)
_HEADING = re.compile(r"^#{1,6}\s")


def chunk_text(text: str, size: int = DEFAULT_CHUNK_SIZE,
               overlap: int = DEFAULT_CHUNK_OVERLAP) -> list[tuple[int, str]]:
    """Split `text` into (start offset, chunk) pieces of at most `size` characters.

    Cuts where a reader would: before a top-level definition or heading after a blank line, else at
    a blank line, else at a line break, else at a space; only a single line longer than `size` is
    cut mid-word. Consecutive chunks share up to `overlap` characters of whole lines.
    """
    if size <= 0:
        raise InputError(f"chunk size must be positive, got {size}")
    overlap = max(0, min(overlap, size // 2))
    n = len(text)
    if n <= size:
        return [(0, text)] if text.strip() else []
    # Priority of a cut before each line start.
    lines = text.splitlines(keepends=True)
    starts: list[int] = []
    priority: list[int] = []
    offset = 0
    previous_blank = True
    for line in lines:
        stripped = line.strip()
        p = 1
        if previous_blank and stripped:
            p = 2
            if line[:1] not in (" ", "\t") and (_CODE_START.match(line) or _HEADING.match(line)):
                p = 3
        starts.append(offset)
        priority.append(p)
        previous_blank = not stripped
        offset += len(line)

    pieces: list[tuple[int, str]] = []
    s = 0
    import bisect

    while s < n:
        limit = s + size
        if limit >= n:
            end = n
        else:
            lo = bisect.bisect_right(starts, s + size // 3)
            hi = bisect.bisect_right(starts, limit) - 1
            best, best_p = -1, 0
            for i in range(lo, hi + 1):
                if priority[i] >= best_p:
                    best, best_p = starts[i], priority[i]
            if best > s:
                end = best
            else:
                space = text.rfind(" ", s + size // 3, limit)
                end = space + 1 if space > s else limit
        piece = text[s:end]
        if piece.strip():
            pieces.append((s, piece))
        if end >= n:
            break
        # Next chunk starts at the first line start within `overlap` of the cut (whole lines only).
        nxt = end
        if overlap:
            i = bisect.bisect_left(starts, end - overlap)
            if i < len(starts) and s < starts[i] < end:
                nxt = starts[i]
        s = nxt
    return pieces


def make_chunks(doc_id: str, text: str, size: int, overlap: int) -> tuple[Chunk, ...]:
    return tuple(Chunk(doc_id, i, piece, start)
                 for i, (start, piece) in enumerate(chunk_text(text, size, overlap)))


# --- loaders -------------------------------------------------------------------------------------

# Milvus's VARCHAR limit, in bytes: a longer chunk could never be stored.
MAX_CHUNK_BYTES = 65_535


def load_corpus(path: str | Path, chunk_size: int = DEFAULT_CHUNK_SIZE,
                chunk_overlap: int = DEFAULT_CHUNK_OVERLAP) -> Corpus:
    """Read a corpus in any of the three forms; raise InputError on anything unusable."""
    corpus = _load(Path(path), chunk_size, chunk_overlap)
    for doc in corpus.documents:
        for c in doc.chunks:
            size = len(c.text.encode())
            if size > MAX_CHUNK_BYTES:
                raise InputError(f"{path}: document {doc.id!r}, chunk {c.index} is {size} bytes, more "
                                 f"than the {MAX_CHUNK_BYTES} a stored chunk can hold; split it, or "
                                 "give whole documents as JSONL so situate chunks them")
    return corpus


def _load(p: Path, chunk_size: int, chunk_overlap: int) -> Corpus:
    if not p.exists():
        raise InputError(f"corpus not found: {p} (give a pre-chunked .json, a .jsonl of documents, "
                         "or a directory of text and source files)")
    if p.is_dir():
        return _load_directory(p, chunk_size, chunk_overlap)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _load_jsonl(p, chunk_size, chunk_overlap)
    if suffix == ".json":
        return _load_prechunked(p)
    if suffix in TEXT_SUFFIXES or suffix == "":
        doc = _text_document(p, p.name, chunk_size, chunk_overlap)
        if doc is None:
            raise InputError(f"{p}: the file is empty or not UTF-8 text; nothing to ingest")
        return Corpus(str(p), "file", (doc,))
    raise InputError(f"{p}: unknown corpus form {suffix!r}; give a pre-chunked .json, a .jsonl of "
                     "documents, or a directory of text and source files")


def _read_text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: not UTF-8 text (byte {e.start}); convert it or remove it") from None
    except OSError as e:
        raise InputError(f"{p}: cannot be read ({e.strerror})") from None


def _require_content(p: Path, text: str) -> None:
    if not text.strip():
        raise InputError(f"{p}: the file is empty")


def _load_prechunked(p: Path) -> Corpus:
    text = _read_text(p)
    _require_content(p, text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: bad JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(data, list):
        raise InputError(f"{p}: expected a JSON list of documents with 'doc_id', 'content' and "
                         "'chunks' (the codebase_chunks.json format); for plain documents use JSONL")
    documents: list[Document] = []
    skipped = 0
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
        if not content.strip() or not chunks:
            skipped += 1
            continue
        out: list[Chunk] = []
        cursor = 0
        indexes: set[int] = set()
        for m, c in enumerate(chunks):
            if not isinstance(c, dict) or not isinstance(c.get("content"), str):
                raise InputError(f"{where} ({doc_id}), chunk #{m + 1}: no 'content' string")
            index = c.get("original_index", m)
            if not isinstance(index, int) or index in indexes:
                raise InputError(f"{where} ({doc_id}), chunk #{m + 1}: 'original_index' must be a "
                                 "unique integer")
            indexes.add(index)
            start = content.find(c["content"], cursor)
            if start < 0:
                start = content.find(c["content"])
            else:
                cursor = start + len(c["content"])
            if c["content"].strip():
                out.append(Chunk(doc_id, index, c["content"], start))
        metadata = {k: v for k, v in item.items() if k not in ("content", "chunks", "doc_id")}
        metadata.update(item.get("metadata") or {})
        title = str(metadata.get("relative_path") or metadata.get("title") or "")
        documents.append(Document(doc_id, content, tuple(out), title, metadata))
    return Corpus(str(p), "prechunked-json", tuple(documents), skipped)


def iter_jsonl(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; InputError at the first line that is not a
    JSON object. The caller has checked that the file exists."""
    text = _read_text(p)
    _require_content(p, text)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{p}: bad JSON at line {number}, column {e.colno}: {e.msg}") from None
        if not isinstance(item, dict):
            raise InputError(f"{p}: line {number} is not a JSON object")
        yield number, item


def _load_jsonl(p: Path, size: int, overlap: int) -> Corpus:
    documents: list[Document] = []
    skipped = 0
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
        if not body.strip():
            skipped += 1
            continue
        title = str(metadata.get("title") or metadata.get("path") or doc_id)
        documents.append(Document(doc_id, body, make_chunks(doc_id, body, size, overlap), title,
                                  metadata))
    if not documents and not skipped:
        raise InputError(f"{p}: no documents in the file")
    return Corpus(str(p), "jsonl", tuple(documents), skipped)


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def _text_document(p: Path, doc_id: str, size: int, overlap: int) -> Document | None:
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot be read ({e.strerror})") from None
    if b"\x00" in raw[:4096]:
        return None
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not body.strip():
        return None
    metadata: dict[str, Any] = {"path": doc_id, "suffix": p.suffix.lower()}
    return Document(doc_id, body, make_chunks(doc_id, body, size, overlap), doc_id, metadata)


def _load_directory(root: Path, size: int, overlap: int) -> Corpus:
    documents: list[Document] = []
    skipped_empty = skipped_files = 0
    for f in _walk(root):
        if f.suffix.lower() not in TEXT_SUFFIXES and f.suffix:
            skipped_files += 1
            continue
        rel = f.relative_to(root).as_posix()
        doc = _text_document(f, rel, size, overlap)
        if doc is None:
            if f.stat().st_size == 0 or not f.read_bytes().strip():
                skipped_empty += 1
            else:
                skipped_files += 1
            continue
        documents.append(doc)
    if not documents and not skipped_empty:
        raise InputError(f"{root}: no text, Markdown or source files found in the directory")
    return Corpus(str(root), "directory", tuple(documents), skipped_empty, skipped_files)


@task(task_run_name="load-corpus", persist_result=False)
def load_corpus_task(path: str, chunk_size: int = DEFAULT_CHUNK_SIZE,
                     chunk_overlap: int = DEFAULT_CHUNK_OVERLAP) -> Corpus:
    """Prefect task over `load_corpus`."""
    return load_corpus(path, chunk_size, chunk_overlap)
