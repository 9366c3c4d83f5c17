"""A PDF page's lines into sections: headings, table rows, and paragraphs with end-of-line hyphens
undone, a wrapped line going on with its paragraph (also into inline code set in another size).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from situate.tasks.corpus.readers.base import Place, Section
from situate.tasks.corpus.readers.pdf.furniture import _drop_furniture, _Style
from situate.tasks.corpus.readers.pdf.layout import _BULLETS, _columns, _Line, _pitch
from situate.tasks.corpus.readers.pdf.pdfium import _Page

HYPHENS = "-\u2010\u00ad"


_BULLET = re.compile(rf"^([{_BULLETS}]|\(?\d+[.)]|\(?[a-zA-Z][.)])(\s|$)")  # a list item starts a paragraph


# A line that stops inside a sentence, as a printed line wraps: after a word, a comma or a hyphen. One
# ending in a sentence's end, a colon, or code's punctuation (";", "{", ")", "=") ends where its text does.
_OPEN_END = re.compile(rf"[\w,{HYPHENS}]$")


_SENTENCE_END = re.compile(r"[.!?:][\"'\u2019\u201d)\]]*$")  # a sentence's end, closing quotes after it


_LEADER = re.compile(r"(\.\s?){4,}\s*\S*$|\u2026\s*\S*$")  # a table of contents' dot leader


@dataclass(slots=True)
class _End:
    """How a page's text ends when its last block is a paragraph: the room left on its last line
    to the right edge of its column, and that line's mean character width and size."""

    room: float
    advance: float
    size: float


def _join(a: str, b: str) -> str:
    """Two lines of one paragraph: a hyphen at the end of the first is undone when the next line
    goes on in lowercase ("retrie-" + "val"), kept without a space before an uppercase letter or a
    digit ("Franco-" + "Prussian", "2020-" + "2021"); a soft hyphen is always undone. A line
    broken inside a command-line option or code keeps its characters together: after a double
    hyphen ("--" + "inspect"), between two hyphens ("than -" + "-dns"), and before punctuation
    ("sha256-" + '");'), and a URL a browser broke at its query's mark ("h?" + "query=x": a URL
    goes on after '?', '&' or '=', where prose has no space before the next word either)."""
    if a[-1:] in "?&=" and "://" in a.rsplit(" ", 1)[-1] and b[:1] and not b[0].isupper():
        return a + b
    if a and b and a[-1] in HYPHENS and len(a) >= 2 and a[-2].isalnum():
        if a[-1] == "\u00ad" or (b[0].islower() and a[-2].isalpha()):
            return a[:-1] + b
        if b[0].isupper() or b[0].isdigit() or not (b[0].isalnum() or b[0] in "([{\u2018\u201c"):
            return a + b
    if a[-2:] == "--" or (a[-1:] == "-" and b[0] == "-"):
        return a + b
    return a + " " + b


def _paragraph_break(prev: _Line, line: _Line, pitch: float, right: float, width: float) -> bool:
    """Whether `line` starts a new paragraph after `prev`: a gap wider than the line pitch, a
    table-of-contents entry, a list item, a sentence ending short of the right edge, or a change of
    text size, unless `prev` was wrapped (a line of prose with inline code set smaller, or made of
    it, goes on with the paragraph)."""
    if pitch and line.top - prev.top > 1.45 * pitch:
        return True
    if _LEADER.search(prev.text):
        return True  # one table-of-contents entry per line
    if _BULLET.match(line.text):
        return True
    text = prev.text
    if text and text[-1] in ".!?:" and prev.x1 < right - 0.2 * width:
        return True
    if abs(line.size - prev.size) > 0.12 * max(line.size, prev.size, 1.0):
        return not _wrapped(prev, line, right)
    return False


def _wrapped(prev: _Line, line: _Line, right: float) -> bool:
    """Whether `prev` ends where it does only because `line`'s first word did not fit after it: it
    stops mid-sentence (`_OPEN_END`), `line` sits below it (not beside it, as a table's cells may),
    and the room left on it to the right edge is less than that word and a space (the edge known as
    far as the longest line reaches and the word's width from its line's mean character: an em of
    slack)."""
    if not _OPEN_END.search(prev.text) or not line.text:
        return False
    if line.top - prev.top < max(prev.bottom - prev.top, line.bottom - line.top):
        return False
    word = line.text.split(" ", 1)[0]
    advance = (line.x1 - line.x0) / len(line.text)
    return right - prev.x1 <= advance * (len(word) + 1) + max(prev.size, line.size)


def _page_sections(page: _Page, style: _Style) -> tuple[list[Section], _End | None]:
    """One page's sections in reading order: headings, text (paragraphs separated by blank lines)
    and tables (one row per line, cells separated by " | "); and how its last paragraph ends, when
    the page ends with one."""
    frags = _drop_furniture(page, style)
    if not frags:
        return [], None
    place = Place(page=page.number)
    blocks: list[tuple[str, int, str]] = []  # (kind, level, text)
    starts = set()  # where each column's blocks start
    end: _End | None = None
    for flow in _columns(frags):
        starts.add(len(blocks))
        before = len(blocks)
        tail, right = _flow_blocks(flow, style, blocks)
        if len(blocks) > before:
            end = None if tail is None else _End(right - tail.x1, (tail.x1 - tail.x0) / len(tail.text),
                                                 tail.size)
    return list(_sections_of(blocks, starts, place)), end


def _sections_of(blocks: list[tuple[str, int, str]], starts: set[int],
                 place: Place) -> Iterator[Section]:
    """A page's blocks as sections: consecutive paragraphs one text section, a sentence cut across
    columns (`starts`: where each column's blocks begin) joined."""
    paragraphs: list[str] = []
    for k, (kind, level, text) in enumerate(blocks):
        first = k in starts
        if kind == "text":
            if paragraphs and paragraphs[-1][-1:] not in ".!?:;" and text[:1].islower() and first:
                paragraphs[-1] = _join(paragraphs[-1], text)  # a sentence (or word) cut across columns
            else:
                paragraphs.append(text)
            continue
        if paragraphs:
            yield Section(_clean("\n\n".join(paragraphs)), place)
            paragraphs = []
        yield Section(_clean(text), place, kind, level)
    if paragraphs:
        yield Section(_clean("\n\n".join(paragraphs)), place)


def _clean(text: str) -> str:
    """Soft hyphens (invisible) and unmapped glyphs out, except a soft hyphen ending the text,
    which may join a word across the page break."""
    text = text.replace("\ufffd", "").strip()
    end = "\u00ad" if text.endswith("\u00ad") else ""
    return text.replace("\u00ad", "") + end


def _flow_blocks(flow: list[_Line], style: _Style,
                 blocks: list[tuple[str, int, str]]) -> tuple[_Line | None, float]:
    """A column's lines as blocks: a run of two or more lines of several cells whose cells line up
    a table, lines larger than the body text headings, the rest paragraphs. A line cut into
    cells that does not line up with its neighbours (a justified line with wide spaces) is text.
    Returns the last line of the column's last block when that block is a paragraph, and the
    column's right edge."""
    if not flow:
        return None, 0.0
    column = _Column(flow, style, blocks)
    for line in flow:
        if len(line.cells) >= 2:
            column.rows.append(line)
            continue
        if column.rows:
            column.end_rows()
        column.single(line)
    if column.rows:
        column.end_rows()
    column.flush()
    # A column of one line does not show where its right edge is: no evidence the line was wrapped.
    return (column.tail if len(flow) > 1 else None), column.right


class _Column:
    """One column's blocks as its lines are read in order: the paragraph or heading being built,
    and the run of lines of several cells that may be a table. Finished blocks go to `blocks`."""

    __slots__ = ("blocks", "heading", "last", "para", "pitch", "right", "rows", "style", "tail",
                 "width")

    def __init__(self, flow: list[_Line], style: _Style, blocks: list[tuple[str, int, str]]) -> None:
        self.style = style
        self.blocks = blocks
        self.pitch = _pitch(flow)
        left = min(line.x0 for line in flow)
        self.right = max(line.x1 for line in flow)
        self.width = self.right - left
        self.rows: list[_Line] = []  # consecutive lines of several cells, a table or not
        self.para = ""
        self.heading: tuple[int, str] | None = None
        self.last: _Line | None = None  # the line before, for paragraph breaks and multi-line headings
        self.tail: _Line | None = None  # the last line of the last block, when that block is a paragraph

    def flush(self) -> None:
        """Ends the paragraph or heading being built."""
        if self.para:
            self.blocks.append(("text", 0, self.para))
            self.para = ""
            self.tail = self.last
        if self.heading:
            self.tail = None
            level, text = self.heading
            if len(text) <= 200 and len(text.split()) <= 24:  # else large text, not a title
                self.blocks.append(("heading", level, text))
            else:
                self.blocks.append(("text", 0, text))
            self.heading = None

    def text_line(self, line: _Line) -> None:
        """A line of body text: it goes on with the paragraph, or starts one."""
        if (self.heading or not self.para or self.last is None
                or _paragraph_break(self.last, line, self.pitch, self.right, self.width)):
            self.flush()
            self.para = line.text
        else:
            self.para = _join(self.para, line.text)
        self.last = line

    def single(self, line: _Line) -> None:
        """A line read as one piece of text: a heading (or its next line), or body text."""
        level = self.style.heading(line)
        if level and (not any(ch.isalpha() for ch in line.text) or _LEADER.search(line.text)):
            level = 0
        if level:
            last = self.last
            if (self.heading and self.heading[0] == level and last is not None
                    and line.top - last.bottom < line.size):
                self.heading = (level, _join(self.heading[1], line.text))
            else:
                self.flush()
                self.heading = (level, line.text)
            self.last = line
        else:
            self.text_line(line)

    def end_rows(self) -> None:
        """Ends a run of lines of several cells: a table when their cells line up."""
        rows = self.rows
        if len(rows) >= 2 and _aligned(rows):
            self.flush()
            self.tail = None
            self.blocks.append(("table", 0, "\n".join(" | ".join(c.strip() for c in r.cells) for r in rows)))
        else:  # a numbered heading ("1   Introduction"), a justified line: cells read as one line
            for row in rows:
                self.single(row)
        rows.clear()


def _aligned(rows: list[_Line]) -> bool:
    """Whether consecutive rows' cells line up as a table's columns do: each pair of neighbours
    has two cells or more starting, ending or centred within 4 pt of one another."""
    def matches(a: _Line, b: _Line) -> int:
        count = 0
        for x0, x1 in a.spans:
            if any(abs(x0 - y0) < 4 or abs(x1 - y1) < 4 or abs(x0 + x1 - y0 - y1) < 8 for y0, y1 in b.spans):
                count += 1
        return count

    pairs = list(zip(rows, rows[1:], strict=False))
    return sum(1 for a, b in pairs if matches(a, b) >= 2) >= 0.5 * len(pairs)
