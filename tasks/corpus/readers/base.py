"""What every document reader gives back: the document as a stream of sections, each knowing where
it is (page, heading path, slide, sheet, cell), or one `Unreadable` saying why it cannot be read.

A reader never raises anything else for a bad file: encrypted, corrupt, truncated, lying about its
format, a zip bomb, a scan with no text layer all become `Unreadable(kind, detail)`, which the
loader counts as a skip with one warning. Sections are yielded lazily so that a 2,000-page PDF is
held one page at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


class Unreadable(Exception):
    """A file that cannot be read as its format: `kind` is the short reason counted in the run's
    summary ("encrypted PDF", "scanned PDF", "not a PDF", "zip bomb", "corrupt DOCX"), `detail`
    says more and what to do."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Section:
    """A piece of a document's text with its place.

    `kind`: "heading" (text is the heading's title, `level` 1-6), "text", "table" (rows, one per
    line, cells separated by " | "), "code" (verbatim), "notes" (a slide's speaker notes).
    `where`: the place, keys among `page` (1-based), `heading_path` (list of titles, outermost
    first), `slide` (1-based) and `slide_title`, `sheet` (name) and `rows` ([first, last], 1-based),
    `cell` (1-based) and `cell_type` ("markdown" or "code"), `chapter` (1-based) and
    `chapter_title`.
    """

    text: str
    where: dict[str, Any] = field(default_factory=dict)
    kind: str = "text"
    level: int = 0


@dataclass
class Reading:
    """A document being read: its format, title and metadata known up front, its sections lazily.

    `units` is the count of the format's own units ("pages", "slides", "sheets", "cells",
    "chapters") once known: readers that learn it up front (PDF page count) set it at once.
    """

    format: str
    sections: Iterator[Section]
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    unit: str = ""
    units: int = 0
