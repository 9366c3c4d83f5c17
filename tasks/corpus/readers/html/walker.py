"""The walk over a pruned page, in document order, into sections: inline text gathered into
paragraphs as a browser's innerText shows it, headings setting the heading path, <pre> verbatim,
lists as "- item" lines, data tables as rows. `html_sections` is the walk EPUB chapters reuse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from situate.tasks.corpus.readers.base import Place, Section
from situate.tasks.corpus.readers.html.furniture import HEADINGS, _prune, _tag

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


def _collapse(text: str) -> str:
    """Whitespace collapsed within each line, blank lines dropped. Lines come from <br> and from
    the source's own line breaks: a CommonMark renderer (what static sites are built with) writes a
    soft line break as a newline, so a page breaks its paragraphs where its Markdown does, and is
    cut where its Markdown is (a chunk's overlap is whole lines: a paragraph made one long line
    shares nothing with the chunk before and shifts every cut after it)."""
    lines = (" ".join(line.split()) for line in text.replace(_BR, "\n").split("\n"))
    return "\n".join(line for line in lines if line)


# Inline code as Markdown writes it, in backticks: a page's text is as long as the Markdown it was
# written in (or would be), so that it is cut where its Markdown is (inline code is common in
# technical pages, and a Markdown chunk's length counts its backticks). A heading's title has none
# (as the Markdown reader's titles). Golden quotes match with or without them.
MARKS = {"code": "`"}


def _inline(el: Any, skip: frozenset[str] = frozenset(), marks: bool = True) -> str:
    """An element's text with <br> as `_BR`, leaving out subtrees tagged `skip`, inline code in
    Markdown's marks (`MARKS`) unless not `marks`; a block element's edges are spaces (as line
    breaks in innerText, never gluing two words)."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if node.text and isinstance(node.tag, str):
            parts.append(node.text)
        for child in node:
            tag = _tag(child)
            if tag == "br":
                parts.append(_BR)
            elif marks and tag in MARKS and tag not in skip:
                parts.append(_marked(tag, _inline(child, skip)))
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


def _marked(tag: str, text: str) -> str:
    """`text` inside its Markdown marks, the marks against the text (spaces outside them), or as
    it is when it holds no text."""
    core = text.strip()
    if not core or _BR in core:
        return text
    mark = MARKS[tag]
    return f"{text[:len(text) - len(text.lstrip())]}{mark}{core}{mark}{text[len(text.rstrip()):]}"


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

    def place(self) -> Place:
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
            self.out.append(Section("\n\n".join(self.paragraphs), self.place()))
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
        elif tag == "blockquote":
            self.quote(el)
        elif tag in BLOCKS or self.holds.get(el, 0) & _HOLDS_BLOCK:
            self.end_paragraph()
            self.block(el)
            self.end_paragraph()
        elif tag in MARKS:
            self.add(_marked(tag, _inline(el)))
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
        title = " ".join(_inline(el, marks=False).replace(_BR, " ").split())
        if not title:
            return
        self.flush()
        self.path = [(lvl, t) for lvl, t in self.path if lvl < level] + [(level, title)]
        self.out.append(Section(title, self.place(), "heading", level))

    def code(self, el: Any) -> None:
        text = _code_text(el).strip("\n")
        if not text.strip():
            return
        self.flush()
        self.out.append(Section(text.rstrip(), self.place(), "code"))

    def quote(self, el: Any) -> None:
        """A block quote's paragraphs with each line after "> ", as Markdown writes a quote (so
        the page is as long as its Markdown, as with inline code's backticks); a heading, code
        block or table inside one is read as anywhere else."""
        self.end_paragraph()
        first, sections = len(self.paragraphs), len(self.out)
        self.block(el)
        self.end_paragraph()
        if len(self.out) == sections:
            self.paragraphs[first:] = ["\n".join(f"> {line}" for line in p.split("\n"))
                                       for p in self.paragraphs[first:]]

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
                marker = f"{number}." if ordered else "-"
                number += 1
                text = _collapse(_inline(item, skip=frozenset({"ul", "ol"})))
                if text:  # its source's line breaks kept, under its text as Markdown indents them
                    lines.append("  " * depth + f"{marker} "
                                 + text.replace("\n", "\n" + "  " * depth + " " * (len(marker) + 1)))
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
            self.out.append(Section("\n".join(rows), self.place(), "table"))


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
