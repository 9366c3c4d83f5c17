"""HTML through lxml (BSD): the page's main content as headings, text, code and tables.

A saved web page is mostly not its content: navigation, cookie banners, share buttons, footers,
scripts. The reader drops those (by tag, ARIA role, and id/class words), takes <main>, [role=main]
or a single <article> when the page has one, else the smallest element holding most of what is
left, and walks it in document order: h1-h6 become heading sections and set the heading path of
the text under them, <pre> blocks stay verbatim (code), lists become "- item" lines, tables rows
of "a | b | c", paragraphs are separated by blank lines with their whitespace collapsed.

`html_sections` is the walk on its own, for EPUB chapters (XHTML) to go through the same code.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from situate.tasks.corpus.readers.base import Reading, Section, Unreadable

# Never content. Elements whose text is not the page's (scripts, styles, widgets).
DROP_TAGS = frozenset({"script", "style", "noscript", "svg", "iframe", "template", "button", "select",
                       "textarea", "input", "canvas", "object", "embed", "head", "dialog"})
# Page furniture by its tag, unless it holds the main content.
FURNITURE_TAGS = frozenset({"nav", "footer", "aside", "menu"})
DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "dialog",
                        "alertdialog", "menu", "menubar"})
# Words in an id or class that mark page furniture; a token matches when it starts or ends with
# one ("navbar", "social-links", "advertisement", "sphinxsidebar", "mainnav").
DROP_WORDS = ("cookie", "consent", "gdpr", "banner", "breadcrumb", "sidebar", "menu", "nav", "footer",
              "share", "social", "advert")
HEADINGS = {f"h{n}": n for n in range(1, 7)}
_LEAVES = frozenset({"ul", "ol", "dl", "table", "pre", "p", "blockquote", *HEADINGS})
BLOCKS = frozenset({"p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "ul",
                    "ol", "li", "table", "thead", "tbody", "tfoot", "tr", "td", "th", "pre", "blockquote",
                    "figure", "figcaption", "dl", "dt", "dd", "hr", "address", "details", "summary",
                    "fieldset", "center", "caption", "body", "html", "hgroup", "search", "form", *HEADINGS})
_BR = "\ue000"  # a <br> while text is gathered (a private-use character no page has)
_TOKENS = re.compile(r"[^a-z0-9]+")
_MARKUP = re.compile(r"<(!doctype|[a-z][a-z0-9:-]*)[\s>/]", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def read(path: Path, *, fmt: str = "html", max_bytes: int) -> Reading:
    """Read `path` as HTML: decoded (BOM, meta charset, else UTF-8 with replacement), refused as
    "not HTML" when binary or without markup, its main content as sections."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise Unreadable("too large", f"{path}: {size} bytes, over the limit of {max_bytes} "
                                      "(SITUATE_MAX_DOCUMENT_BYTES)")
    text = decode(path.read_bytes())
    sample = text[:8192]
    if "\x00" in sample or sum(1 for ch in sample if ch < " " and ch not in "\t\n\r\f") > 0.01 * len(sample):
        raise Unreadable("not HTML", f"{path}: the file's content is binary, not HTML")
    if not _MARKUP.search(text):
        raise Unreadable("not HTML", f"{path}: the file's content has no HTML markup")
    root = parse(text)
    if root is None:
        return Reading(format=fmt, sections=iter(()), title="")
    title = page_title(root)
    return Reading(format=fmt, sections=html_sections(root), title=title)


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


def parse(text: str) -> Any:
    """The document's root element (lxml.html, lenient), or None for an empty document."""
    import lxml.etree
    import lxml.html

    text = _XML_DECLARATION.sub("", text, count=1)  # lxml refuses str input that declares an encoding
    if not text.strip():
        return None
    try:
        return lxml.html.document_fromstring(text)
    except (lxml.etree.ParserError, ValueError):
        return None


def page_title(root: Any) -> str:
    """<title>, else the first <h1>."""
    for xpath in ("//title", "//h1"):
        for el in root.xpath(xpath):
            text = " ".join(el.text_content().split())
            if text:
                return text
    return ""


def html_sections(root: Any, where: dict[str, Any] | None = None) -> Iterator[Section]:
    """The main content of the document under `root` as sections, each with its heading path
    (and `where`'s keys, e.g. an EPUB chapter). Removes the page furniture from the tree."""
    _strip(root)
    walker = _Walker(where or {})
    walker.block(_content_root(root))
    walker.flush()
    return iter(walker.out)


# --- Choosing the content ---------------------------------------------------------------------------

def _tag(el: Any) -> str:
    tag = el.tag
    if not isinstance(tag, str):
        return ""  # a comment or processing instruction
    return tag.rsplit("}", 1)[-1].split(":")[-1].lower()


def _furniture(el: Any) -> int:
    """How surely `el` is page furniture: 3 never content (a script), 2 furniture by its tag or ARIA
    role (nav, footer, a page's header, role=banner) or hidden, 1 by words in its id or class or as
    a form, 0 content."""
    tag = _tag(el)
    if tag in DROP_TAGS:
        return 3
    get = el.get
    if tag in FURNITURE_TAGS or (get("role") or "").strip().lower() in DROP_ROLES:
        return 2
    if get("hidden") is not None or (get("aria-hidden") or "").lower() == "true" \
            or _HIDDEN_STYLE.search(get("style") or ""):
        return 2
    if tag == "header":
        # A page's header is furniture; an article's header holds its title.
        inside = any(_tag(a) in ("main", "article") for a in el.iterancestors())
        if not (inside and any(_tag(d) in HEADINGS for d in el.iterdescendants())):
            return 2
    if tag == "form":
        return 1  # also the ASP.NET form that wraps a whole page: kept when it holds most text
    words = _TOKENS.split(f"{get('id') or ''} {get('class') or ''}".lower())
    return 1 if any(w.startswith(DROP_WORDS) or w.endswith(DROP_WORDS) for w in words if w) else 0


def _strip(root: Any) -> None:
    """Remove furniture, except elements holding the main content (<main>, <article>,
    role=main) and, for furniture known only by its id or class, elements holding more than 40%
    of the text (a <div class="has-sidebar"> wrapping the whole page must not take it along)."""
    body_text = len(root.text_content())
    doomed = []
    for el in root.iter():
        if not isinstance(el.tag, str) or _tag(el) in ("html", "body", "main", "article"):
            continue
        sure = _furniture(el)
        if not sure:
            continue
        if sure < 3 and el.xpath(".//main|.//article|.//*[@role='main']"):
            continue
        if sure == 1 and len(el.text_content()) > 0.4 * body_text:
            continue
        doomed.append(el)
    for el in doomed:
        parent = el.getparent()
        if parent is None:
            continue
        # Keep the text that follows the element (its tail), which belongs to the parent.
        tail = el.tail
        if tail:
            previous = el.getprevious()
            if previous is not None:
                previous.tail = (previous.tail or "") + tail
            else:
                parent.text = (parent.text or "") + tail
        parent.remove(el)


def _content_root(root: Any) -> Any:
    """<main> or [role=main] (the one with most text), else a single <article>, else, from
    <body> down, the child holding 70% of its parent's text while there is one."""
    mains = root.xpath("//main|//*[@role='main']")
    if mains:
        return max(mains, key=lambda el: len(el.text_content()))
    articles = root.xpath("//article")
    if len(articles) == 1:
        return articles[0]
    body = root.find("body")
    node = body if body is not None else root
    while True:
        total = len(node.text_content().strip())
        if not total:
            return node
        children = [c for c in node if isinstance(c.tag, str)]
        best = max(children, key=lambda c: len(c.text_content().strip()), default=None)
        if best is None or len(best.text_content().strip()) < 0.7 * total or _tag(best) in _LEAVES:
            return node  # a list, table or code block is read by its container, as what it is
        node = best


# --- Walking the content ------------------------------------------------------------------------------

def _collapse(text: str) -> str:
    """Whitespace collapsed within each line (lines come from <br> only); blank lines dropped."""
    lines = (" ".join(line.split()) for line in text.split(_BR))
    return "\n".join(line for line in lines if line)


def _inline(el: Any, skip: frozenset[str] = frozenset()) -> str:
    """An element's text with <br> as `_BR`, leaving out subtrees tagged `skip`."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if node.text and isinstance(node.tag, str):
            parts.append(node.text)
        for child in node:
            tag = _tag(child)
            if tag == "br":
                parts.append(_BR)
            elif tag and tag not in skip:
                walk(child)
                if tag in BLOCKS:
                    parts.append(" ")
            if child.tail:
                parts.append(child.tail)

    walk(el)
    return "".join(parts)


def _layout_table(el: Any) -> bool:
    """A table used for page layout (holding headings, code, nested tables or several blocks in a
    cell) rather than data: its cells are read as content, not rows."""
    if el.xpath(".//table|.//h1|.//h2|.//h3|.//h4|.//h5|.//h6|.//pre"):
        return True
    for cell in el.iter("td", "th"):
        if sum(1 for c in cell if _tag(c) in ("p", "div", "ul", "ol", "blockquote")) >= 2:
            return True
    return False


class _Walker:
    """Document-order walk collecting sections: inline text gathers into paragraphs, and a
    heading, code block or table closes the text before it."""

    def __init__(self, where: dict[str, Any]) -> None:
        self.base = where
        self.path: list[tuple[int, str]] = []
        self.paragraphs: list[str] = []
        self.buffer: list[str] = []
        self.out: list[Section] = []

    def where(self) -> dict[str, Any]:
        where = dict(self.base)
        if self.path:
            where["heading_path"] = [title for _, title in self.path]
        return where

    def end_paragraph(self) -> None:
        text = _collapse("".join(self.buffer))
        self.buffer = []
        if text:
            self.paragraphs.append(text)

    def flush(self) -> None:
        self.end_paragraph()
        if self.paragraphs:
            self.out.append(Section("\n\n".join(self.paragraphs), self.where()))
            self.paragraphs = []

    def block(self, el: Any) -> None:
        """A block container: its inline content into paragraphs, its blocks in turn."""
        if el.text:
            self.buffer.append(el.text)
        for child in el:
            tag = _tag(child)
            if tag:
                self.element(child, tag)
            if child.tail:
                self.buffer.append(child.tail)

    def element(self, el: Any, tag: str) -> None:
        if tag in HEADINGS:
            self.heading(el, HEADINGS[tag])
        elif tag == "pre" or (tag == "code" and self._code_block(el)):
            self.code(el)
        elif tag in ("ul", "ol"):
            self.end_paragraph()
            lines = self.list_lines(el, 0)
            if lines:
                self.paragraphs.append("\n".join(lines))
        elif tag == "table" and not _layout_table(el):
            self.table(el)
        elif tag == "br":
            self.buffer.append(_BR)
        elif tag == "hr":
            self.end_paragraph()
        elif tag in BLOCKS or any(_tag(d) in BLOCKS for d in el.iterdescendants()):
            self.end_paragraph()
            self.block(el)
            self.end_paragraph()
        else:
            self.buffer.append(_inline(el))

    def _code_block(self, el: Any) -> bool:
        """A bare <code> standing as a block: several lines, nothing inline beside it."""
        return "\n" in el.text_content().strip("\n") and not "".join(self.buffer).strip() \
            and not (el.tail or "").strip()

    def heading(self, el: Any, level: int) -> None:
        title = " ".join(_inline(el).replace(_BR, " ").split())
        if not title:
            return
        self.flush()
        self.path = [(lvl, t) for lvl, t in self.path if lvl < level] + [(level, title)]
        self.out.append(Section(title, self.where(), "heading", level))

    def code(self, el: Any) -> None:
        text = el.text_content().strip("\n")
        if not text.strip():
            return
        self.flush()
        self.out.append(Section(text.rstrip(), self.where(), "code"))

    def list_lines(self, el: Any, depth: int) -> list[str]:
        """A list as "- item" lines (ordered lists "1. item"), nested lists indented under their item."""
        lines: list[str] = []
        ordered = _tag(el) == "ol"
        number = int(el.get("start") or 1) if (el.get("start") or "1").strip().lstrip("-").isdigit() else 1
        for item in el:
            tag = _tag(item)
            if tag not in ("li", "ul", "ol"):
                continue
            if tag != "li":
                lines.extend(self.list_lines(item, depth + 1))
                continue
            text = " ".join(_inline(item, skip=frozenset({"ul", "ol"})).replace(_BR, " ").split())
            marker = f"{number}." if ordered else "-"
            number += 1
            if text:
                lines.append("  " * depth + f"{marker} {text}")
            for sub in item:
                if _tag(sub) in ("ul", "ol"):
                    lines.extend(self.list_lines(sub, depth + 1))
        return lines

    def table(self, el: Any) -> None:
        rows = []
        caption = ""
        for node in el.iter("caption", "tr"):
            if next(a for a in node.iterancestors() if _tag(a) == "table") is not el:
                continue
            if _tag(node) == "caption":
                caption = " ".join(node.text_content().split())
                continue
            cells = [" ".join(_inline(c).replace(_BR, " ").split()) for c in node if _tag(c) in ("td", "th")]
            if any(cells):
                rows.append(" | ".join(cells))
        if caption:
            self.end_paragraph()
            self.paragraphs.append(caption)
        if rows:
            self.flush()
            self.out.append(Section("\n".join(rows), self.where(), "table"))
