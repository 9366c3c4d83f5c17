"""Readers of the document formats people keep: Markdown, PDF, HTML, DOCX, PPTX, XLSX, EPUB,
notebooks, and whatever else a module here declares.

The registry: every entry point of the `situate.readers` group names a tuple of `Reader`s
(situate.tasks.corpus.readers.base), situate's own modules here as another package's; each
reader names its format, its label and the suffixes it claims. Adding a format is one module
and its entry point (docs/how-to/extend.md).
`read_document(path, max_bytes=...)` picks the reader by suffix, checks the content is that format
(a `.pdf` that is not a PDF is an `Unreadable`, not a crash) and returns a `Reading` whose sections
stream. Every library is imported inside its reader's `read`, so a corpus without PDFs never loads
PDFium.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path

from situate.core.registry import Registry
from situate.core.settings import Settings
from situate.tasks.corpus.readers.base import (
    Limits,
    Place,
    Reader,
    Reading,
    Section,
    Unreadable,
    place_text,
)

log = logging.getLogger("situate.readers")

# Formats people have that situate does not read, with what to do instead.
LEGACY: dict[str, str] = {
    ".doc": "legacy Word .doc: save it as .docx (or PDF)",
    ".xls": "legacy Excel .xls: save it as .xlsx",
    ".ppt": "legacy PowerPoint .ppt: save it as .pptx (or PDF)",
    ".rtf": "RTF: save it as .docx",
    ".odt": "OpenDocument text: save it as .docx (or PDF)",
    ".ods": "OpenDocument spreadsheet: save it as .xlsx",
    ".odp": "OpenDocument slides: save it as .pptx (or PDF)",
}


# Every reader module, by its entry point in the `situate.readers` group: situate's own
# (pyproject.toml) and any installed package's, each naming a tuple of `Reader`s.
READER_MODULES: Registry[tuple[Reader, ...]] = Registry("reader", group="situate.readers")


@cache
def readers() -> dict[str, Reader]:
    """Every reader, by the suffix it claims (".pdf" -> the PDF reader), from the entry points of
    `situate.readers`, situate's own first. A plugin that fails to load is one warning naming it,
    and the others still read; a suffix claimed twice keeps its first reader, with a warning."""
    found: dict[str, Reader] = {}
    problems: list[str] = []
    for declared in READER_MODULES.loaded(problems).values():
        for reader in declared:
            for suffix in reader.suffixes:
                if suffix in found:
                    problems.append(f"{suffix} is claimed by two readers: {found[suffix].format} "
                                    f"(kept) and {reader.format}")
                    continue
                found[suffix] = reader
    for problem in problems:
        log.warning("%s", problem)
    return found


def document_suffixes() -> frozenset[str]:
    """The suffixes a reader claims."""
    return frozenset(readers())


def reader_for(suffix: str) -> Reader | None:
    """The reader of a suffix (".PDF" as ".pdf"), or None for none."""
    return readers().get(suffix.lower())


def format_label(fmt: str) -> str:
    """What a chunk's context calls a format ("pdf" -> "PDF"), "" for one no reader has."""
    return next((r.label for r in readers().values() if r.format == fmt), "")


def document_format(path: Path) -> str:
    """The format name for `path`'s extension ("pdf", "html", ...), or "" for none of ours."""
    reader = reader_for(path.suffix)
    return reader.format if reader else ""


def read_document(path: Path, *, max_bytes: int, max_pages: int | None = None,
                  suffix: str | None = None) -> Reading:
    """Open `path` with its format's reader. `max_bytes` bounds the file and, for zip-based
    formats, what its members would inflate to (checked from the zip's directory, before any
    inflating); `max_pages` a paged format's pages (default: Settings' `max_pdf_pages`). `suffix`
    names the format when `path` has none of its own (a descriptor's path). Raises `Unreadable`
    for anything that cannot be read; never another exception for a bad file (an `OSError`
    reading it is also turned into `Unreadable`)."""
    suffix = path.suffix if suffix is None else suffix
    reader = reader_for(suffix)
    if reader is None:
        raise Unreadable("unsupported format", f"{suffix or 'no extension'}")
    pages = max_pages or Settings.model_fields["max_pdf_pages"].default
    try:
        reading: Reading = reader.read(path, Limits(max_bytes, pages))
    except Unreadable:
        raise
    except OSError as e:
        raise Unreadable("cannot be read", e.strerror or str(e)) from None
    return reading


__all__ = ["LEGACY", "Limits", "Place", "Reader", "Reading", "Section", "Unreadable", "place_text",
           "document_format", "document_suffixes", "format_label", "read_document",
           "reader_for", "readers"]
