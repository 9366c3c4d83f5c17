"""The corpus forms that are one file of documents, a pre-chunked JSON (the codebase benchmark's
format) and a JSONL file of documents, read and checked; and `_document`, which builds every
document of every form: NUL bytes removed and lone surrogates replaced (Milvus refuses both), the
text cut (or the given cut kept), a chunk too long for its field skipped, each counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from situate.core.errors import InputError
from situate.core.records import Chunk, Document
from situate.tasks.corpus.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, make_chunks
from situate.tasks.corpus.clean import (
    MAX_CHUNK_BYTES,
    Tally,
    clean_text,
    clean_value,
    id_problem,
)

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


class PrechunkedItem(NamedTuple):
    """One document of a pre-chunked JSON, checked: `where` names it in messages, `pieces` are its
    chunks as (index, text), `item` the JSON object as given."""

    where: str
    doc_id: str
    content: str
    pieces: list[tuple[int, str]]
    item: dict[str, Any]


def prechunked_items(p: Path) -> Iterator[PrechunkedItem]:
    """The documents of a pre-chunked JSON (the codebase_chunks.json format), in order, each
    checked; InputError naming the document and what to do on anything unusable."""
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
        yield PrechunkedItem(where, doc_id, content, pieces, item)


def _iter_prechunked(p: Path, tally: Tally) -> Iterator[Document]:
    for where, doc_id, content, pieces, item in prechunked_items(p):
        if tally.passes_over(doc_id):
            continue
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
