"""Chunking a whole document's text: pieces of at most `size` characters cut where a reader would
(before a definition or heading, at a blank line, a line break, a space), with whole-line overlap."""

from __future__ import annotations

import bisect
import re

from situate.core.errors import InputError
from situate.core.records import Chunk

DEFAULT_CHUNK_SIZE = 800
DEFAULT_CHUNK_OVERLAP = 100

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
    starts, priority = _line_starts(text)

    pieces: list[tuple[int, str]] = []
    s = 0
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


def _line_starts(text: str) -> tuple[list[int], list[int]]:
    """The offset of every line start, and how good a cut before it is: 3 before a top-level
    definition or heading after a blank line, 2 after a blank line, 1 at any line."""
    starts: list[int] = []
    priority: list[int] = []
    offset = 0
    previous_blank = True
    for line in text.splitlines(keepends=True):
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
    return starts, priority


def make_chunks(doc_id: str, text: str, size: int, overlap: int) -> tuple[Chunk, ...]:
    return tuple(Chunk(doc_id, i, piece, start)
                 for i, (start, piece) in enumerate(chunk_text(text, size, overlap)))
