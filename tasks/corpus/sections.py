"""A read document's sections into one clean text, cut along the format's own structure.

Readers (situate.tasks.corpus.readers) give sections that know their place (a `Place`: page,
heading path, slide, sheet, cell, chapter); here it is taken in its stored form
(`Place.as_dict()`). `chunk_sections` joins the sections into the document's text (headings as
plain title lines, no markup, so the LLM prompt gets clean text), tells the chunker where the
format's edges are and how strong each is, and gives each chunk the place it covers: its first
section's, with the range of pages, slides, cells and rows it runs to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from situate.tasks.corpus.chunking import FORCED, SECTION, chunk_text
from situate.tasks.corpus.readers.base import Section

# How strong a cut before a section is, by what changes there. A chapter or a sheet is always a
# cut (nothing of two sheets in one chunk); a heading is a strong cut (the higher the stronger);
# a slide, cell or block of rows is a cut the chunker prefers to a paragraph break, packs small
# ones together, and never overlaps across (SECTION). A page edge is where the printer broke the
# text, not where the document does: no cut of its own (the blank line between two pages' sections
# is a paragraph break like any other), so that a PDF is cut where its HTML, Word or Markdown
# original is, and a paragraph running over a page stays whole.
_HEADING_PRIORITY = {1: 7, 2: 6}
_UNIT_PRIORITY = SECTION
_PAGE_PRIORITY = 0
_UNIT_KEYS = ("page", "slide", "cell")


@dataclass(frozen=True)
class Piece:
    start: int
    text: str
    where: dict[str, Any]


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    where: dict[str, Any]
    kind: str


def assemble(sections: Iterable[Section]) -> tuple[str, dict[int, int], list[_Span]]:
    """The document's text, its boundaries (offset -> priority) and each section's span."""
    parts: list[str] = []
    boundaries: dict[int, int] = {}
    spans: list[_Span] = []
    offset = 0
    headings: list[tuple[int, str]] = []  # (level, title) open at this point
    previous: dict[str, Any] = {}
    for section in sections:
        text = section.text.strip("\n")
        if not text.strip():
            continue
        where = section.place.as_dict()
        if section.kind == "heading":
            level = max(1, section.level or 1)
            headings = [h for h in headings if h[0] < level] + [(level, " ".join(text.split()))]
        if "heading_path" not in where and headings:
            where["heading_path"] = [t for _, t in headings]
        _chapter_on_top(where)
        priority = _priority(section, where, previous)
        sheet = where.get("sheet")
        if isinstance(sheet, str) and sheet != previous.get("sheet"):
            text = f"{sheet}\n{text}"  # a sheet's rows say which sheet they are in
        if parts:
            parts.append("\n\n")
            offset += 2
        if priority:
            boundaries[offset] = max(priority, boundaries.get(offset, 0))
        spans.append(_Span(offset, offset + len(text), where, section.kind))
        parts.append(text)
        offset += len(text)
        previous = where
    return "".join(parts), boundaries, spans


def _chapter_on_top(where: dict[str, Any]) -> None:
    """A chapter's title is the top of its heading path (an EPUB's table of contents names the
    chapter; its first heading often says the same, and then is not said twice)."""
    title = where.get("chapter_title")
    if not isinstance(title, str) or not title.strip():
        return
    title = " ".join(title.split())
    path = where.get("heading_path")
    path = list(path) if isinstance(path, list) else []
    if not path or " ".join(str(path[0]).split()).casefold() != title.casefold():
        where["heading_path"] = [title, *path]


def _priority(section: Section, where: dict[str, Any], previous: dict[str, Any]) -> int:
    if not previous:
        return 0
    for key in ("chapter", "sheet"):
        if key in where and where.get(key) != previous.get(key):
            return FORCED
    if section.kind == "heading":
        return _HEADING_PRIORITY.get(section.level, SECTION + 1)
    if any(key in where and where.get(key) != previous.get(key) for key in ("slide", "cell", "rows")):
        return _UNIT_PRIORITY
    if section.kind == "notes" and not previous.get("notes"):
        return _UNIT_PRIORITY
    if where.get("heading_path") != previous.get("heading_path"):
        return SECTION
    return _PAGE_PRIORITY if where.get("page") != previous.get("page") else 0


def chunk_sections(sections: Iterable[Section], size: int,
                   overlap: int) -> tuple[str, list[Piece]]:
    """The document's text and its chunks, each with the place it covers."""
    text, boundaries, spans = assemble(sections)
    pieces = []
    i = 0
    for start, piece in chunk_text(text, size, overlap, boundaries):
        end = start + len(piece)
        while i < len(spans) and spans[i].end <= start:
            i += 1
        j = i
        covered = []
        while j < len(spans) and spans[j].start < end:
            covered.append(spans[j])
            j += 1
        pieces.append(Piece(start, piece, where_of(covered)))
    return text, pieces


def where_of(spans: list[_Span]) -> dict[str, Any]:
    """The place of a chunk covering `spans`: the first span's place, with the range of pages,
    slides and cells it runs to, the rows of its sheet, and whether it holds speaker notes."""
    if not spans:
        return {}
    first = next((s for s in spans if s.kind != "heading"), spans[0])
    where = dict(spans[0].where)
    where.update(first.where)
    for key in _UNIT_KEYS:
        values = [s.where[key] for s in spans if isinstance(s.where.get(key), int)]
        if values and max(values) != min(values):
            where[key] = min(values)
            where[f"{key}_end"] = max(values)
    rows = [s.where["rows"] for s in spans if isinstance(s.where.get("rows"), list)
            and s.where.get("sheet") == where.get("sheet") and len(s.where["rows"]) == 2]
    if rows:
        where["rows"] = [min(r[0] for r in rows), max(r[1] for r in rows)]
    if any(s.kind == "notes" for s in spans):
        where["notes"] = True
    kinds = {s.where.get("cell_type") for s in spans if s.where.get("cell_type")}
    if len(kinds) > 1:
        where["cell_type"] = "mixed"
    return where
