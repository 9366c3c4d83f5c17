"""Readers of the document formats people keep: Markdown, PDF, HTML, DOCX, PPTX, XLSX, EPUB,
notebooks.

`read_document(path, max_bytes=...)` picks the reader by extension, checks the content is that
format (a `.pdf` that is not a PDF is an `Unreadable`, not a crash) and returns a `Reading` whose
sections stream. Every library is imported inside its reader, so a corpus without PDFs never
loads PDFium.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from situate.tasks.corpus.readers.base import Reading, Section, Unreadable

# suffix -> (format name, module under situate.tasks.corpus.readers)
FORMATS: dict[str, tuple[str, str]] = {
    ".md": ("md", "markdown"),
    ".markdown": ("md", "markdown"),
    ".pdf": ("pdf", "pdf"),
    ".html": ("html", "html"),
    ".htm": ("html", "html"),
    ".xhtml": ("html", "html"),
    ".docx": ("docx", "office"),
    ".pptx": ("pptx", "office"),
    ".xlsx": ("xlsx", "office"),
    ".xlsm": ("xlsx", "office"),
    ".epub": ("epub", "epub"),
    ".ipynb": ("ipynb", "notebook"),
}
DOCUMENT_SUFFIXES = frozenset(FORMATS)

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


def document_format(path: Path) -> str:
    """The format name for `path`'s extension ("pdf", "html", ...), or "" for none of ours."""
    entry = FORMATS.get(path.suffix.lower())
    return entry[0] if entry else ""


def read_document(path: Path, *, max_bytes: int, max_pages: int | None = None,
                  suffix: str | None = None) -> Reading:
    """Open `path` with its format's reader. `max_bytes` bounds the file and, for zip-based
    formats, what its members would inflate to (checked from the zip's directory, before any
    inflating); `max_pages` a PDF's pages (default: the PDF reader's `MAX_PAGES`). `suffix`
    names the format when `path` has none of its own (a descriptor's path). Raises `Unreadable`
    for anything that cannot be read; never another exception for a bad file (an `OSError`
    reading it is also turned into `Unreadable`)."""
    suffix = path.suffix if suffix is None else suffix
    entry = FORMATS.get(suffix.lower())
    if entry is None:
        raise Unreadable("unsupported format", f"{suffix or 'no extension'}")
    fmt, module = entry
    reader = importlib.import_module(f"situate.tasks.corpus.readers.{module}")
    options = {"max_pages": max_pages} if module == "pdf" and max_pages else {}
    try:
        reading: Reading = reader.read(path, fmt=fmt, max_bytes=max_bytes, **options)
    except Unreadable:
        raise
    except OSError as e:
        raise Unreadable("cannot be read", e.strerror or str(e)) from None
    return reading


__all__ = ["DOCUMENT_SUFFIXES", "FORMATS", "LEGACY", "Reading", "Section", "Unreadable",
           "document_format", "read_document"]
