"""HTML through lxml (BSD): every piece of the page's text that is not page furniture, as
headings, text, code and tables.

A saved web page is mostly not its content: navigation, cookie banners, share buttons, footers,
scripts. The reader drops a block only by a rule it can name (`RULES` below: a tag that is never
content, a `nav`/`footer`/`aside`/`menu`, an ARIA landmark role, a hidden element, a page-level
`header` without a heading, a form, or a furniture word in an id or class) and keeps everything
else, in document order, wherever it sits: in nested `section`, `article` or `div` elements, and
outside whatever holds the main content. The main content (<main>, [role=main], a single
<article>, else the smallest element holding most of the text) only shields the blocks that hold
it from the weakest rule (an id or class word: a `<div class="page has-sidebar">` wrapping the
whole page stays). Each dropped block is logged at debug level with its rule.

Text reads as a browser's `innerText` renders it: block elements, `<br>`, list items and table
cells never glue two words together, while inline elements (links, spans, code) join what they
touch. h1-h6 become heading sections and set the heading path of the text under them, <pre>
blocks stay verbatim (code), lists become "- item" lines (an item's source line breaks kept,
its next lines indented under its text), a block quote's lines follow "> " (as Markdown writes
them, as inline code is in backticks), data tables rows of "a | b | c",
paragraphs are separated by blank lines with their whitespace collapsed within each line (a line
break of the source, as a Markdown renderer writes a soft break, stays one).

Every pass over the tree is linear in the page (one pass per question, no per-element search of
a subtree or its ancestors), and nesting deeper than `MAX_DEPTH` is flattened as browsers do,
keeping the text in order. An XHTML page's internal DTD subset (`<!DOCTYPE html [ ... ]>`) is
removed before parsing; entities are never expanded, XIncludes never processed, nothing fetched.

`html_sections` is the walk on its own, for EPUB chapters (XHTML) to go through the same code.

The package: `decoding` (bytes into a tree), `furniture` (the rules and the pruning), `walker`
(the tree into sections); here, a file read as a page.
"""

from __future__ import annotations

import re
from pathlib import Path

from situate.tasks.corpus.readers.base import FileReader, Limits, Reading, Unreadable
from situate.tasks.corpus.readers.html.decoding import decode, page_title, parse
from situate.tasks.corpus.readers.html.walker import html_sections

_MARKUP = re.compile(r"<(!doctype|[a-z][a-z0-9:-]*)[\s>/]", re.IGNORECASE)


def read(path: Path, *, fmt: str = "html", max_bytes: int) -> Reading:
    """Read `path` as HTML: decoded (BOM, meta charset, else UTF-8 with replacement), refused as
    "not HTML" when binary or without markup, its text as sections."""
    path = Path(path)
    with path.open("rb") as f:
        raw = f.read(max_bytes + 1)  # bounded by what is read, not by what the file says its size is
    if len(raw) > max_bytes:
        raise Unreadable("too large", f"{path}: over the limit of {max_bytes} bytes "
                                      "(SITUATE_MAX_DOCUMENT_BYTES)")
    text = decode(raw)
    sample = text[:8192]
    if "\x00" in sample or sum(1 for ch in sample if ch < " " and ch not in "\t\n\r\f") > 0.01 * len(sample):
        raise Unreadable("not HTML", f"{path}: the file's content is binary, not HTML")
    if not _MARKUP.search(text):
        raise Unreadable("not HTML", f"{path}: the file's content has no HTML markup")
    root = parse(text, str(path))
    if root is None:
        return Reading(format=fmt, sections=iter(()), title="")
    title = page_title(root)
    return Reading(format=fmt, sections=html_sections(root), title=title)


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes)


READERS = (FileReader("html", "web page", (".html", ".htm", ".xhtml"), _read),)


__all__ = ["READERS", "decode", "html_sections", "page_title", "parse", "read"]
