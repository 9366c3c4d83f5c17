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
blocks stay verbatim (code), lists become "- item" lines, data tables rows of "a | b | c",
paragraphs are separated by blank lines with their whitespace collapsed.

Every pass over the tree is linear in the page (one pass per question, no per-element search of
a subtree or its ancestors), and nesting deeper than `MAX_DEPTH` is flattened as browsers do,
keeping the text in order. An XHTML page's internal DTD subset (`<!DOCTYPE html [ ... ]>`) is
removed before parsing; entities are never expanded, XIncludes never processed, nothing fetched.

`html_sections` is the walk on its own, for EPUB chapters (XHTML) to go through the same code.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from situate.tasks.corpus.readers.base import FileReader, Limits, Place, Reading, Section, Unreadable

log = logging.getLogger("situate.load")

# Never content. Elements whose text is not the page's (scripts, styles, widgets).
DROP_TAGS = frozenset({"script", "style", "noscript", "svg", "iframe", "template", "button", "select",
                       "textarea", "input", "canvas", "object", "embed", "head", "dialog"})
# Page furniture by its tag, unless it holds the main content.
FURNITURE_TAGS = frozenset({"nav", "footer", "aside", "menu"})
DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "dialog",
                        "alertdialog", "menu", "menubar"})
# A book's pages that repeat what its metadata and headings say, and its navigation lists (EPUB 3
# structural semantics, DPUB-ARIA roles): pandoc's EPUB opens with a title page holding only the
# title, read as a chapter of its own.
DROP_TYPES = frozenset({"cover", "titlepage", "halftitlepage", "toc", "landmarks", "page-list", "loi",
                        "lot", "loa", "lov", "doc-toc", "doc-pagelist", "doc-cover"})
# Notes are content wherever they sit (an EPUB's footnotes are often <aside epub:type="footnote">,
# pandoc's are <aside role="doc-endnotes"> with --reference-location).
NOTE_TYPES = frozenset({"footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes", "note",
                        "doc-footnote", "doc-endnote", "doc-endnotes"})
# A page-level <header> (not inside one of these) is the site's banner (ARIA's mapping).
SECTIONING = frozenset({"article", "aside", "main", "nav", "section"})
# Words in an id or class that mark page furniture; a token matches when it starts or ends with
# one ("navbar", "social-links", "advertisement", "sphinxsidebar", "mainnav").
DROP_WORDS = ("cookie", "consent", "gdpr", "banner", "breadcrumb", "sidebar", "menu", "nav", "footer",
              "share", "social", "advert")
# A block dropped only by an id/class word or as a form must hold less than this share of the
# page's text (a wrapper whose class happens to say "sidebar" is not furniture).
WEAK_SHARE = 0.4
# The names a dropped block is logged with (debug level), by how sure they are.
RULES = {
    "tag": "never content (script, style, form control, embedded object)",
    "furniture tag": "nav, footer, aside or menu",
    "role": "an ARIA landmark or widget role that is not content (navigation, banner, ...), or a "
            "book's cover, title page or navigation list (epub:type, DPUB-ARIA role)",
    "hidden": "hidden, aria-hidden or display:none",
    "banner": "a page-level <header> without a heading",
    "form": "a form (search box, login), under 40% of the page's text",
    "class": "a furniture word in its id or class, under 40% of the page's text",
}
HEADINGS = {f"h{n}": n for n in range(1, 7)}
_LEAVES = frozenset({"ul", "ol", "dl", "table", "pre", "p", "blockquote", *HEADINGS})
# Elements a browser displays as blocks (the HTML standard's rendering section): their edges are
# line breaks in innerText.
BLOCKS = frozenset({"p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "ul",
                    "ol", "li", "table", "thead", "tbody", "tfoot", "tr", "td", "th", "pre", "blockquote",
                    "figure", "figcaption", "dl", "dt", "dd", "hr", "address", "details", "summary",
                    "fieldset", "legend", "center", "caption", "body", "html", "hgroup", "search", "form",
                    "menu", "dir", "listing", "plaintext", "xmp", "optgroup", "option", "frameset",
                    "frame", *HEADINGS})
# Nesting past this depth is flattened (the deeper elements become siblings, their text in order),
# as browsers do (Chromium at 512): the walk recurses per level and must stay within Python's stack.
MAX_DEPTH = 128
_BR = "\ue000"  # a <br> while text is gathered (a private-use character no page has)
_TOKENS = re.compile(r"[^a-z0-9]+")
_MARKUP = re.compile(r"<(!doctype|[a-z][a-z0-9:-]*)[\s>/]", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_DOCTYPE = re.compile(r"\A\s*(?:<!--.*?-->\s*)*<!DOCTYPE\b", re.IGNORECASE | re.DOTALL)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


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


def html_sections(root: Any, place: Place | None = None) -> Iterator[Section]:
    """The text of the document under `root` as sections, each with its heading path (within
    `place`, e.g. an EPUB chapter). Removes the page furniture from the tree."""
    _prune(root)
    _flatten_deep(root)
    walker = _Walker(place or Place(), _holding(root))
    body = root.find("body")
    walker.block(body if body is not None else root)
    walker.flush()
    return iter(walker.out)


# --- Finding the furniture --------------------------------------------------------------------------

def _tag(el: Any) -> str:
    tag = el.tag
    if not isinstance(tag, str):
        return ""  # a comment or processing instruction
    return _local(tag)


@lru_cache(maxsize=4096)
def _local(tag: str) -> str:
    """A tag's local name, lowercased ("{http://www.w3.org/1999/xhtml}P" and "epub:P" are "p")."""
    return tag.rsplit("}", 1)[-1].split(":")[-1].lower()


def _rule(el: Any, tag: str, scoped: bool) -> str:
    """The rule by which `el` is furniture ("" for none). `scoped`: inside a sectioning element."""
    if tag in DROP_TAGS:
        return "tag"
    types: set[str] = set()
    words = ""
    hidden = False
    for key, value in el.items():
        name = _local(key)
        if name == "role" or (name == "type" and key != "type"):  # role, epub:type
            types.update(value.lower().split())
        elif name == "class" or (name == "id" and not _anchor(el, tag, value)):
            words += " " + value.lower()
        elif name == "hidden" or (name == "aria-hidden" and value.strip().lower() == "true") \
                or (name == "style" and _HIDDEN_STYLE.search(value)):
            hidden = True
    if types & NOTE_TYPES:
        return ""
    if tag in FURNITURE_TAGS:
        return "furniture tag"
    if types & (DROP_ROLES | DROP_TYPES):
        return "role"
    if hidden:
        return "hidden"
    if tag == "header" and not scoped:
        return "banner"  # tentatively: kept if it holds a heading (a title block, not a site's banner)
    if tag == "form":
        return "form"
    if words and any(w.startswith(DROP_WORDS) or w.endswith(DROP_WORDS) for w in _TOKENS.split(words) if w):
        return "class"
    return ""


def _anchor(el: Any, tag: str, value: str) -> bool:
    """Whether an id is the anchor of the element's own heading (`<h2 id="shared-cache">Shared
    cache</h2>`, pandoc's `<section id="...">` around it): spelled from its words, it names the
    heading, not the block's role, and is no evidence of furniture."""
    heading = el if tag in HEADINGS else next((c for c in el if isinstance(c.tag, str)), None)
    if heading is None or _tag(heading) not in HEADINGS:
        return False
    said = set(_TOKENS.split(heading.text_content().lower()))
    return all(w in said or w.isdigit() for w in _TOKENS.split(value.lower()) if w)


def _ink(text: str | None) -> int:
    """Characters of `text` that are not whitespace."""
    return len(text) - sum(text.count(c) for c in " \t\n\r\f\xa0") if text else 0


def _sizes(root: Any) -> dict[Any, int]:
    """Each element's non-whitespace text length, its subtree's (one pass down, one back up)."""
    size: dict[Any, int] = {}
    order = []
    for node in root.iter():
        parent = node.getparent()
        if isinstance(node.tag, str):
            size[node] = _ink(node.text)
            order.append((node, parent))
        if parent is not None and node.tail:
            size[parent] += _ink(node.tail)
    for node, parent in reversed(order):
        if parent is not None:
            size[parent] += size[node]
    return size


def _holders(found: Iterator[Any] | list[Any]) -> set[Any]:
    """The elements found and every ancestor of theirs (each ancestor chain walked once)."""
    marked: set[Any] = set()
    for el in found:
        while el is not None and el not in marked:
            marked.add(el)
            el = el.getparent()
    return marked


def _mains(root: Any) -> set[Any]:
    """The elements holding (or being) a main-content element: <main>, <article>, role=main."""
    return _holders(el for el in root.iter() if isinstance(el.tag, str) and (
        _tag(el) in ("main", "article") or (el.get("role") or "").strip().lower() == "main"))


def _remove(el: Any) -> None:
    """Take `el` out of the tree, keeping the text that follows it (its tail, the parent's)."""
    parent = el.getparent()
    if parent is None:
        return
    tail = el.tail
    if tail:
        previous = el.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(el)


def _describe(el: Any) -> str:
    name = _tag(el)
    for key in ("id", "class", "role"):
        if el.get(key):
            name += f" {key}={el.get(key)!r}"
    return f"<{name}>"


def _drop(found: list[tuple[Any, str]]) -> None:
    debug = log.isEnabledFor(logging.DEBUG)
    for el, rule in found:
        if debug:
            words = " ".join(el.text_content().split())
            log.debug("html: dropped %s by rule %r (%s), %d characters: %.80s", _describe(el), rule,
                      RULES[rule], len(words), words)
        _remove(el)


def _prune(root: Any) -> None:
    """Remove the page furniture, each block by a named rule (`RULES`), in two passes:

    1. the sure rules (a tag never content, a furniture tag, a role, hidden, a page-level <header>
       without a heading), except on a block holding <main>, <article> or role=main (a
       script-like tag goes whatever it holds);
    2. the weak rules (a form, a furniture word in the id or class), except on a block holding
       the main content (see `_content_root`) or more than `WEAK_SHARE` of the page's text.

    Everything else stays, wherever it is. Each pass is one walk of the tree."""
    mains = _mains(root)
    headed = _holders([el for el in root.iter() if isinstance(el.tag, str) and _tag(el) in HEADINGS])
    sure: list[tuple[Any, str]] = []
    weak: list[tuple[Any, str]] = []
    scoped: dict[Any, bool] = {}
    gone: set[Any] = set()  # dropped, or inside a dropped block
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        parent = el.getparent()
        if parent is not None and parent in gone:
            gone.add(el)
            continue
        tag = _tag(el)
        inside = parent is not None and (scoped.get(parent, False) or _tag(parent) in SECTIONING)
        scoped[el] = inside
        if tag in ("html", "body", "main", "article"):
            continue
        rule = _rule(el, tag, inside)
        if not rule:
            continue
        if rule == "banner" and el in headed:
            continue  # a title block (pandoc's title-block-header), not a site's banner
        if rule in ("form", "class"):
            weak.append((el, rule))
            continue
        if rule != "tag" and el in mains:
            continue
        sure.append((el, rule))
        gone.add(el)
    _drop(sure)
    if not weak:
        return
    size = _sizes(root)
    mains = _mains(root)
    body = root.find("body")
    body_size = size.get(body if body is not None else root, 0)
    main = _content_root(root, size, mains)
    shielded = {main, *main.iterancestors()}
    candidates = dict(weak)
    chosen: list[tuple[Any, str]] = []
    gone = set()
    for el in root.iter():  # document order: a block inside a dropped one goes with it
        parent = el.getparent()
        if parent is not None and parent in gone:
            gone.add(el)
            continue
        weak_rule = candidates.get(el)
        if weak_rule is None or el in mains or el in shielded or size.get(el, 0) > WEAK_SHARE * body_size:
            continue
        chosen.append((el, weak_rule))
        gone.add(el)
    _drop(chosen)


def _content_root(root: Any, size: dict[Any, int], mains: set[Any]) -> Any:
    """<main> or [role=main] (the one with most text), else a single <article>, else, from
    <body> down, the child holding 70% of its parent's text while there is one."""
    candidates = [el for el in mains
                  if _tag(el) == "main" or (el.get("role") or "").strip().lower() == "main"]
    if candidates:
        return max(candidates, key=lambda el: size.get(el, 0))
    articles = [el for el in mains if _tag(el) == "article"]
    if len(articles) == 1:
        return articles[0]
    body = root.find("body")
    node = body if body is not None else root
    while True:
        total = size.get(node, 0)
        if not total:
            return node
        children = [c for c in node if isinstance(c.tag, str)]
        best = max(children, key=lambda c: size.get(c, 0), default=None)
        if best is None or size.get(best, 0) < 0.7 * total or _tag(best) in _LEAVES:
            return node  # a list, table or code block is read by its container, as what it is
        node = best


def _flatten_deep(root: Any) -> None:
    """Elements nested deeper than `MAX_DEPTH` become siblings under the last element at that
    depth, each keeping its own text and followed by its former children, every tail where it
    read: the text stays whole and in order, the nesting is gone (what browsers do past 512)."""
    import lxml.etree

    depth: dict[Any, int] = {}
    cut = []
    for el in root.iter():
        parent = el.getparent()
        d = depth.get(parent, 0) + 1 if parent is not None else 0
        depth[el] = d
        if d == MAX_DEPTH and len(el):
            cut.append(el)
    for top in cut:
        shells: list[Any] = []
        tails: dict[Any, list[str]] = {}
        for event, el in lxml.etree.iterwalk(top, events=("start", "end")):
            if el is top:
                continue
            if event == "start":
                shells.append(el)
                tails[el] = []
            elif el.tail:
                tails[shells[-1]].append(el.tail)
        for el in shells:
            for child in list(el):
                el.remove(child)
        for child in list(top):
            top.remove(child)
        for el in shells:
            el.tail = "".join(tails[el]) or None
            top.append(el)


def _holding(root: Any) -> dict[Any, int]:
    """Per element, what its subtree holds below it (one post-order pass): `_HOLDS_BLOCK`, and
    `_HOLDS_LAYOUT` (a table, heading or code block, which make a table a layout table)."""
    import lxml.etree

    holds: dict[Any, int] = {}
    for _, el in lxml.etree.iterwalk(root, events=("end",)):
        mask = 0
        for child in el:
            tag = _tag(child)
            if not tag:
                continue
            mask |= holds.get(child, 0)
            if tag in BLOCKS:
                mask |= _HOLDS_BLOCK
            if tag == "table" or tag == "pre" or tag in HEADINGS:
                mask |= _HOLDS_LAYOUT
        if mask:
            holds[el] = mask
    return holds


_HOLDS_BLOCK = 1
_HOLDS_LAYOUT = 2


# --- Walking the content ------------------------------------------------------------------------------

def _collapse(text: str) -> str:
    """Whitespace collapsed within each line (lines come from <br> only); blank lines dropped."""
    lines = (" ".join(line.split()) for line in text.split(_BR))
    return "\n".join(line for line in lines if line)


def _inline(el: Any, skip: frozenset[str] = frozenset()) -> str:
    """An element's text with <br> as `_BR`, leaving out subtrees tagged `skip`; a block element's
    edges are spaces (as line breaks in innerText, never gluing two words)."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if node.text and isinstance(node.tag, str):
            parts.append(node.text)
        for child in node:
            tag = _tag(child)
            if tag == "br":
                parts.append(_BR)
            elif tag and tag not in skip:
                block = tag in BLOCKS
                if block:
                    parts.append(" ")
                walk(child)
                if block:
                    parts.append(" ")
            if child.tail:
                parts.append(child.tail)

    walk(el)
    return "".join(parts)


class _Walker:
    """Document-order walk collecting sections: inline text gathers into paragraphs, and a
    heading, code block or table closes the text before it."""

    def __init__(self, place: Place, holds: dict[Any, int]) -> None:
        self.base = place
        self.holds = holds
        self.path: list[tuple[int, str]] = []
        self.paragraphs: list[str] = []
        self.buffer: list[str] = []
        self.inked = False  # the buffer holds more than whitespace
        self.out: list[Section] = []

    def add(self, text: str) -> None:
        self.buffer.append(text)
        if not self.inked and text.strip():
            self.inked = True

    def where(self) -> Place:
        if not self.path:
            return self.base
        return replace(self.base, heading_path=tuple(title for _, title in self.path))

    def end_paragraph(self) -> None:
        text = _collapse("".join(self.buffer))
        self.buffer = []
        self.inked = False
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
            self.add(el.text)
        for child in el:
            tag = _tag(child)
            if tag:
                self.element(child, tag)
            if child.tail:
                self.add(child.tail)

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
        elif tag == "table" and not self._layout_table(el):
            self.table(el)
        elif tag == "br":
            self.add(_BR)
        elif tag == "hr":
            self.end_paragraph()
        elif tag in BLOCKS or self.holds.get(el, 0) & _HOLDS_BLOCK:
            self.end_paragraph()
            self.block(el)
            self.end_paragraph()
        else:
            self.add(_inline(el))

    def _layout_table(self, el: Any) -> bool:
        """A table used for page layout (holding headings, code, nested tables or several blocks
        in a cell) rather than data: its cells are read as content, not rows."""
        if self.holds.get(el, 0) & _HOLDS_LAYOUT:
            return True
        for cell in el.iter("td", "th"):
            if sum(1 for c in cell if _tag(c) in ("p", "div", "ul", "ol", "blockquote")) >= 2:
                return True
        return False

    def _code_block(self, el: Any) -> bool:
        """A bare <code> standing as a block: several lines, nothing inline beside it."""
        return not self.inked and not (el.tail or "").strip() and "\n" in el.text_content().strip("\n")

    def heading(self, el: Any, level: int) -> None:
        title = " ".join(_inline(el).replace(_BR, " ").split())
        if not title:
            return
        self.flush()
        self.path = [(lvl, t) for lvl, t in self.path if lvl < level] + [(level, title)]
        self.out.append(Section(title, self.where(), "heading", level))

    def code(self, el: Any) -> None:
        text = _code_text(el).strip("\n")
        if not text.strip():
            return
        self.flush()
        self.out.append(Section(text.rstrip(), self.where(), "code"))

    def list_lines(self, el: Any, depth: int) -> list[str]:
        """A list as "- item" lines (ordered lists "1. item"), nested lists indented under their
        item, wherever they sit in it; anything else in the list (text, a stray <p> or <div>) is a
        line of its own."""
        lines: list[str] = []
        ordered = _tag(el) == "ol"
        number = int(el.get("start") or 1) if (el.get("start") or "1").strip().lstrip("-").isdigit() else 1
        stray = " ".join((el.text or "").split())
        if stray:
            lines.append("  " * depth + stray)
        for item in el:
            tag = _tag(item)
            if tag in ("ul", "ol"):
                lines.extend(self.list_lines(item, depth + 1))
            elif tag == "li":
                text = " ".join(_inline(item, skip=frozenset({"ul", "ol"})).replace(_BR, " ").split())
                marker = f"{number}." if ordered else "-"
                number += 1
                if text:
                    lines.append("  " * depth + f"{marker} {text}")
                for sub in _sublists(item):
                    lines.extend(self.list_lines(sub, depth + 1))
            elif tag:
                text = " ".join(_inline(item, skip=frozenset({"ul", "ol"})).replace(_BR, " ").split())
                if text:
                    lines.append("  " * depth + text)
                for sub in _sublists(item):
                    lines.extend(self.list_lines(sub, depth + 1))
            stray = " ".join((item.tail or "").split())
            if stray:
                lines.append("  " * depth + stray)
        return lines

    def table(self, el: Any) -> None:
        rows = []
        caption = ""
        for node in el.iter("caption", "tr"):
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


def _sublists(item: Any) -> list[Any]:
    """The lists inside a list item at any depth, not counting lists inside those."""
    found = []
    stack = list(reversed(item))
    while stack:
        node = stack.pop()
        tag = _tag(node)
        if tag in ("ul", "ol"):
            found.append(node)
        elif tag:
            stack.extend(reversed(node))
    return found


def _code_text(el: Any) -> str:
    """A code block's text as shown: every character kept, a <br> as a line break."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if node.text and isinstance(node.tag, str):
            parts.append(node.text)
        for child in node:
            if _tag(child) == "br":
                parts.append("\n")
            elif isinstance(child.tag, str):
                walk(child)
            if child.tail:
                parts.append(child.tail)

    walk(el)
    return "".join(parts)


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes)


READERS = (FileReader("html", "web page", (".html", ".htm", ".xhtml"), _read),)
