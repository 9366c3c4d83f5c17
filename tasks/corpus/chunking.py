"""Chunking a whole document's text: pieces of at most `size` characters cut where a reader would
(before a definition or heading, at a blank line, a line break, a space), with whole-line overlap."""

from __future__ import annotations

import bisect
import re

from situate.core.errors import InputError
from situate.core.records import Chunk
from situate.core.settings import Settings

# The defaults are Settings' (SITUATE_CHUNK_SIZE, SITUATE_CHUNK_OVERLAP).
DEFAULT_CHUNK_SIZE: int = Settings.model_fields["chunk_size"].default
DEFAULT_CHUNK_OVERLAP: int = Settings.model_fields["chunk_overlap"].default

_CODE_START = re.compile(
    r"^(?:(?:pub|export|default|public|private|protected|static|abstract|final|async|unsafe|const)\s+)*"
    r"(?:class|def|fn|struct|enum|trait|impl|interface|type|func|function|module|mod|@\w|#\[|///|/\*\*)"
)
_HEADING = re.compile(r"^#{1,6}\s")


# A boundary of this priority is always cut at, even inside a piece shorter than `size` (a PDF's
# chapter, a spreadsheet's sheet); boundaries of priority >= SECTION are never overlapped across.
FORCED = 100
SECTION = 4


def chunk_text(text: str, size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_CHUNK_OVERLAP,
               boundaries: dict[int, int] | None = None) -> list[tuple[int, str]]:
    """Split `text` into (start offset, chunk) pieces of at most `size` characters.

    Cuts where a reader would: before a top-level definition or heading after a blank line, else at
    a blank line, else at a line break, else at a space; only a single line longer than `size` is
    cut mid-word. Consecutive chunks share up to `overlap` characters of whole lines.

    `boundaries` (offset of a line start -> priority) are the document format's own edges (a
    heading, a page, a slide), given by a reader: they outrank the guesses above, a chunk never
    overlaps across one of priority >= SECTION, and one of priority FORCED is always cut.
    """
    if size <= 0:
        raise InputError(f"chunk size must be positive, got {size}")
    overlap = max(0, min(overlap, size // 2))
    n = len(text)
    pieces: list[tuple[int, str]] = []
    forced = sorted(o for o, p in (boundaries or {}).items() if p >= FORCED and 0 < o < n)
    if boundaries and forced:
        ordered = sorted(boundaries.items())
        offsets = [o for o, _ in ordered]
        edges = [0, *forced, n]
        for a, b in zip(edges, edges[1:], strict=False):
            lo, hi = bisect.bisect_right(offsets, a), bisect.bisect_left(offsets, b)
            inner = {o - a: p for o, p in ordered[lo:hi]}
            pieces.extend((a + s, piece) for s, piece in chunk_text(text[a:b], size, overlap, inner))
        return pieces
    if n <= size:
        return [(0, text)] if text.strip() else []
    starts, priority = _line_starts(text)
    edge: set[int] = set()
    if boundaries:
        for i, o in enumerate(starts):
            p = boundaries.get(o)
            if p is not None:
                priority[i] = max(priority[i], p)
                if p >= SECTION:
                    edge.add(o)

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
        if overlap and end not in edge:
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
