"""An HTML file's bytes into a tree: decoded (a BOM, the meta charset or XML declaration, else UTF-8
with replacement), an XHTML page's internal DTD subset removed, parsed by lxml with no entity
expanded and nothing fetched; and the page's title.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

from situate.tasks.corpus.readers.base import Unreadable

_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)


_XML_ENCODING = re.compile(rb"""<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)""", re.IGNORECASE)


_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")


_DOCTYPE = re.compile(r"\A\s*(?:<!--.*?-->\s*)*<!DOCTYPE\b", re.IGNORECASE | re.DOTALL)


_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def decode(raw: bytes) -> str:
    """The page's text: a byte-order mark wins, then a meta charset or XML encoding declaration in
    the first 4 KB, else UTF-8 (bytes that are not UTF-8 replaced)."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            return raw[len(bom):].decode(encoding, errors="replace")
    if raw[:2] == b"<\x00":
        return raw.decode("utf-16-le", errors="replace")
    if raw[:2] == b"\x00<":
        return raw.decode("utf-16-be", errors="replace")
    head = raw[:4096]
    found = _META_CHARSET.search(head) or _XML_ENCODING.search(head)
    if found:
        encoding = _encoding(found.group(1).decode("ascii", errors="replace"))
        if encoding:
            return raw.decode(encoding, errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace")


def _encoding(label: str) -> str:
    """A declared charset as Python knows it, as browsers read it: Latin-1 and ASCII mean
    windows-1252, a UTF-16 declaration without a BOM means UTF-8; "" when unknown."""
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return ""
    if name in ("latin-1", "iso8859-1", "ascii"):
        return "cp1252"
    if name.startswith(("utf-16", "utf-32")):
        return "utf-8"
    return name


def strip_internal_subset(text: str) -> str:
    """`text` without the internal DTD subset of its leading <!DOCTYPE ... [ ... ]> (entity
    declarations an XHTML page or EPUB chapter may carry). An HTML parser ends the doctype at its
    first ">", so the rest of the subset ("%pe; ]>") would read as the page's first words. Quoted
    strings and comments inside the subset are skipped while looking for its end; an unterminated
    subset is left alone."""
    found = _DOCTYPE.match(text)
    if not found:
        return text
    i, n = found.end(), len(text)
    quote = ""
    while i < n:  # up to the subset's "[" (after the name and external id), or the doctype's end
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == ">":
            return text  # no internal subset
        elif ch == "[":
            break
        i += 1
    else:
        return text
    i += 1
    while i < n:
        ch = text[i]
        if ch in "\"'":
            close = text.find(ch, i + 1)
            if close < 0:
                return text
            i = close + 1
            continue
        if text.startswith("<!--", i):
            close = text.find("-->", i + 4)
            if close < 0:
                return text
            i = close + 3
            continue
        if ch == "]":
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            if j < n and text[j] == ">":
                return text[:found.start()] + "<!DOCTYPE html>" + text[j + 1:]
        i += 1
    return text


def parse(text: str, name: str = "the page") -> Any:
    """The document's root element (lxml.html, lenient; no network, nothing expanded), or None for
    an empty document. Nesting up to libxml2's limit (2,048 levels) is read; a page nested deeper
    is refused rather than read in part."""
    import lxml.etree
    import lxml.html

    text = _XML_DECLARATION.sub("", text, count=1)  # lxml refuses str input that declares an encoding
    text = strip_internal_subset(text)
    if not text.strip():
        return None
    parser = lxml.html.HTMLParser(huge_tree=True, no_network=True, remove_pis=True)
    try:
        root = lxml.html.document_fromstring(text, parser=parser)
    except (lxml.etree.ParserError, ValueError):
        return None
    if any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
        raise Unreadable("HTML nested too deep", f"{name}: elements nest deeper than the parser's limit "
                                                 "(2,048 levels), so the page cannot be read whole; "
                                                 "no real page nests that deep")
    return root


def page_title(root: Any) -> str:
    """<title>, else the first <h1>."""
    for xpath in ("//title", "//h1"):
        for el in root.xpath(xpath):
            text = " ".join(el.text_content().split())
            if text:
                return text
    return ""
