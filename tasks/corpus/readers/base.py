"""What every document reader gives back: the document as a stream of sections, each knowing where
it is (a `Place`: page, heading path, slide, sheet, cell, chapter), or one `Unreadable` saying why
it cannot be read; and what a reader is (`Reader`: its format, label and suffixes, and `read`).

A reader never raises anything else for a bad file: encrypted, corrupt, truncated, lying about its
format, a zip bomb, a scan with no text layer all become `Unreadable(kind, detail)`, which the
loader counts as a skip with one warning. Sections are yielded lazily so that a 2,000-page PDF is
held one page at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Unreadable(Exception):
    """A file that cannot be read as its format: `kind` is the short reason counted in the run's
    summary ("encrypted PDF", "scanned PDF", "not a PDF", "zip bomb", "corrupt DOCX"), `detail`
    says more and what to do."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Place:
    """Where a section is in its document: `chapter` (1-based) and `chapter_title`, `page`
    (1-based), `slide` (1-based), `slide_title` and `notes` (speaker notes), `sheet` (name) and
    `rows` (first, last; 1-based), `cell` (1-based) and `cell_type` ("markdown", "code", "raw"),
    `heading_path` (titles, outermost first). None (False for `notes`) where it does not apply.
    A format with another kind of place declares its own fields (`own`) and says them (`said`).

    A chunk's place is stored in its row's metadata as `as_dict()` gives it, and said in its
    context as `place_text` says it (situate.tasks.contexts.structural)."""

    chapter: int | None = None
    chapter_title: str | None = None
    page: int | None = None
    slide: int | None = None
    slide_title: str | None = None
    notes: bool = False
    sheet: str | None = None
    rows: tuple[int, int] | None = None
    cell: int | None = None
    cell_type: str | None = None
    heading_path: tuple[str, ...] | None = None
    # A reader's own place, for a format whose place none of the fields above says (a line of
    # a log, a node of an outline): its fields as (key, value) pairs, stored after the others,
    # and how a chunk's context says it (`said`: "Line 40", stored as `place`).
    own: tuple[tuple[str, Any], ...] = ()
    said: str = ""

    def __post_init__(self) -> None:
        taken = {f for f in self.__dataclass_fields__ if f not in ("own", "said")} | {"place"}
        clash = sorted({key for key, _ in self.own} & taken)
        if clash:
            raise ValueError(f"a reader's own place field cannot be named {clash[0]!r}: "
                             "Place has a field of that name")

    def as_dict(self) -> dict[str, Any]:
        """The place as stored: its keys in this order, those that do not apply left out; then
        the reader's own fields, and `place`, how its context says them."""
        out: dict[str, Any] = {}
        for key in ("chapter", "chapter_title", "page", "slide", "slide_title"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.notes:
            out["notes"] = True
        if self.sheet is not None:
            out["sheet"] = self.sheet
        if self.rows is not None:
            out["rows"] = list(self.rows)
        if self.cell is not None:
            out["cell"] = self.cell
        if self.cell_type is not None:
            out["cell_type"] = self.cell_type
        if self.heading_path is not None:
            out["heading_path"] = list(self.heading_path)
        out.update(self.own)
        if self.said:
            out["place"] = self.said
        return out


def place_text(where: Mapping[str, Any]) -> str:
    """Where a chunk of a read document (or of code cut along its syntax) is, in a few words,
    from its stored place (`Place.as_dict()` of its first section, with the range of pages,
    slides and cells it runs to: `page_end`, ...): "Page 12 > 3.2 Refunds.", "Slides 4-5: Roadmap
    (with speaker notes).", "Sheet Q3, rows 1-50.", "Cell 3 (code)."; "" for a chunk of text or
    code, whose place is found in the text (the definitions and Markdown headings open where it
    starts)."""
    parts: list[str] = []
    for key, label in (("chapter", "Chapter"), ("page", "Page"), ("slide", "Slide"),
                       ("cell", "Cell")):
        value = where.get(key)
        if not isinstance(value, int):
            continue
        end = where.get(f"{key}_end")
        text = f"{label}s {value}-{end}" if isinstance(end, int) and end != value else f"{label} {value}"
        title = where.get(f"{key}_title")
        # a chapter's title is the top of its heading path (situate.tasks.corpus.sections)
        if isinstance(title, str) and title.strip() and key != "chapter":
            text += f": {' '.join(title.split())[:100]}"
        if key == "cell" and isinstance(where.get("cell_type"), str) and where["cell_type"] != "mixed":
            text += f" ({where['cell_type']})"
        if key == "slide" and where.get("notes"):
            text += " (with speaker notes)"
        parts.append(text)
    sheet = where.get("sheet")
    if isinstance(sheet, str):
        rows = where.get("rows")
        parts.append(f"Sheet {sheet}" + (f", rows {rows[0]}-{rows[1]}"
                                         if isinstance(rows, list) and len(rows) == 2 else ""))
    said = where.get("place")  # a reader's own place, in its words (`Place.said`)
    if isinstance(said, str) and said.strip():
        parts.append(" ".join(said.split())[:100])
    headings = where.get("heading_path")
    if isinstance(headings, list) and headings:
        parts.append(" > ".join(" ".join(str(h).split())[:80] for h in headings[-3:]))
    return " > ".join(parts) + "." if parts else ""


@dataclass(frozen=True)
class Section:
    """A piece of a document's text with its place.

    `kind`: "heading" (text is the heading's title, `level` 1-6), "text", "table" (rows, one per
    line, cells separated by " | "), "code" (verbatim), "notes" (a slide's speaker notes).
    """

    text: str
    place: Place = field(default_factory=Place)
    kind: str = "text"
    level: int = 0

    @property
    def where(self) -> dict[str, Any]:
        """The place as stored (`Place.as_dict()`)."""
        return self.place.as_dict()


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


@dataclass(frozen=True)
class Limits:
    """What one read may take: `max_bytes` of the file (and of what a zip's members inflate to),
    `max_pages` of a paged format."""

    max_bytes: int
    max_pages: int


class Reader(Protocol):
    """A document format's reader. A module under situate.tasks.corpus.readers declares its
    readers as `READERS` (a tuple) and is found by the registry (situate.tasks.corpus.readers):
    `format` is the name stored in a document's metadata ("pdf"), `label` what a chunk's context
    calls it ("PDF"), `suffixes` the file suffixes it claims (lower case, with the dot). `read`
    imports its libraries inside, so that a corpus without the format never loads them, and
    raises `Unreadable` for a file it cannot read."""

    @property
    def format(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def suffixes(self) -> tuple[str, ...]: ...

    def read(self, path: Path, limits: Limits) -> Reading: ...


def read_utf8_text(path: Path, max_bytes: int, refusal: str) -> str:
    """A text format's file as text: at most `max_bytes` read whatever size the file claims,
    UTF-8 with an optional BOM. Refused as "too large" over the limit, and as `refusal` ("not
    Markdown") when binary or not UTF-8, with the first bad byte named."""
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)  # bounded by what is read, whatever size the file claimed
    if len(raw) > max_bytes:
        raise Unreadable("too large", f"over the limit of {max_bytes} bytes (SITUATE_MAX_DOCUMENT_BYTES)")
    if b"\x00" in raw[:4096]:
        raise Unreadable(refusal, "the file is binary")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Unreadable(refusal, f"byte {e.start} is not UTF-8: convert the file to UTF-8") from None


@dataclass(frozen=True)
class FileReader:
    """A `Reader` made of a module's read function, called with the reader's format."""

    format: str
    label: str
    suffixes: tuple[str, ...]
    function: Callable[[Path, str, Limits], Reading]

    def read(self, path: Path, limits: Limits) -> Reading:
        return self.function(path, self.format, limits)
