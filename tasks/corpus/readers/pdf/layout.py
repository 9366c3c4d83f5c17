"""A PDF page's fragments laid out again: regrouped into visual lines (a line with several cells
becomes a table row), and a gutter free of text splitting two- or three-column pages into columns
read one after the other.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from statistics import median

from situate.tasks.corpus.readers.pdf.pdfium import _Frag

_BULLETS = "\u2022\u25e6\u25aa\u25cf\u2023\u2043\u2219*\u2013\u2014-"


# A list marker ("1.", "a)", "(iv)", "•") stays with its item's text; a bare number ("2021",
# "1.20") may be a table's cell and does not.
_MARKER = re.compile(rf"^([\(\[]?(\d+(\.\d+)*|[A-Za-z]|[ivxlcIVXLC]+)[.)\]]|[{_BULLETS}])$")


@dataclass(slots=True)
class _Line:
    frags: list[_Frag]
    x0: float
    top: float
    x1: float
    bottom: float
    size: float
    cells: list[str] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)  # each cell's x0, x1
    text: str = ""  # the cells joined by spaces


def _lines(frags: list[_Frag]) -> list[_Line]:
    """Fragments grouped into visual lines (vertical overlap), top to bottom, left to right."""
    lines: list[_Line] = []
    for f in sorted(frags, key=lambda f: f.top + f.bottom):
        mid = (f.top + f.bottom) / 2
        for line in lines[-1:-4:-1]:
            if line.top <= mid <= line.bottom or (
                    min(line.bottom, f.bottom) - max(line.top, f.top)
                    >= 0.5 * min(line.bottom - line.top, f.bottom - f.top)):
                line.frags.append(f)
                if f.x0 < line.x0:
                    line.x0 = f.x0
                if f.x1 > line.x1:
                    line.x1 = f.x1
                if f.top < line.top:
                    line.top = f.top
                if f.bottom > line.bottom:
                    line.bottom = f.bottom
                break
        else:
            lines.append(_Line([f], f.x0, f.top, f.x1, f.bottom, f.size))
    for line in lines:
        if len(line.frags) > 1:
            line.frags.sort(key=lambda f: f.x0)
            line.size = max(line.frags, key=lambda f: len(f.text)).size
            line.cells, line.spans = _cells(line.frags)
        else:
            line.cells = [line.frags[0].text]
            line.spans = [(line.x0, line.x1)]
        line.text = " ".join(line.cells)
    return lines


def _cells(frags: list[_Frag]) -> tuple[list[str], list[tuple[float, float]]]:
    """A line's cells and their horizontal spans: its fragments, except that a list or section
    marker ("1.", "2.3", "•") stays with the text after it, fragments closer than a word's gap
    are one, and pieces of one word are one word."""
    cells = [frags[0].text]
    spans = [(frags[0].x0, frags[0].x1)]
    for prev, f in zip(frags, frags[1:], strict=False):
        between = _between(prev, f, lone_marker=len(cells) == 1 and bool(_MARKER.match(cells[0])))
        if between is None:
            cells.append(f.text)
            spans.append((f.x0, f.x1))
        else:
            cells[-1] = cells[-1] + between + f.text
            spans[-1] = (spans[-1][0], f.x1)
    return cells, spans


def _between(prev: _Frag, f: _Frag, lone_marker: bool) -> str | None:
    """What goes between two neighbouring fragments of a line: nothing (one word drawn in pieces:
    "NODE", "_", "MODULE"; a monospaced "--", whose glyphs' boxes stand apart by a third of an
    em), a space (one cell), or None (the next cell)."""
    gap = f.x0 - prev.x1
    em = max(f.size, prev.size, 1.0)
    if prev.line == f.line >= 0 and prev.first >= 0 and f.first >= 0:
        tight = prev.last + 1 == f.first  # PDFium's text has nothing between them
    else:  # from two of PDFium's lines (a sliver it put apart): touching, or not
        tight = gap < 0.1 * em
    if tight and gap < em:
        return ""
    if lone_marker or gap < 0.3 * em:
        return " "
    return None


def _columns(frags: list[_Frag], depth: int = 0) -> list[list[_Line]]:
    """Fragments in reading order as flows of lines. A page with a gutter (a vertical strip that
    few fragments cross) and prose on both sides reads, between the lines that cross it (a title,
    a wide paragraph or table), the left side before the right; each side may split again (three
    columns). A stretch whose sides are not prose (short cells, as in a table) reads across."""
    if depth < 3 and len(frags) >= 6:
        gutter = _gutter(frags)
        if gutter is not None:
            g0, g1 = gutter
            left = [f for f in frags if f.x1 <= g0 + 0.5]
            right = [f for f in frags if f.x0 >= g1 - 0.5]
            # One side running text, the other at least one long line (a last page's short
            # second column); a table's short cells have none.
            if (_prose(left) and _long(right)) or (_long(left) and _prose(right)):
                if not any(f.x1 > g0 + 0.5 and f.x0 < g1 - 0.5 for f in frags):
                    return _split_block(frags, g0, g1, depth)
                flows: list[list[_Line]] = []
                block: list[_Frag] = []
                wide_flow = False  # whether the last flow is crossing lines (they read as one flow)
                for line in _lines(frags):
                    if any(f.x1 > g0 + 0.5 and f.x0 < g1 - 0.5 for f in line.frags):
                        if block:
                            flows.extend(_split_block(block, g0, g1, depth))
                            block = []
                            wide_flow = False
                        if wide_flow:
                            flows[-1].append(line)
                        else:
                            flows.append([line])
                            wide_flow = True
                    else:
                        block.extend(line.frags)
                if block:
                    flows.extend(_split_block(block, g0, g1, depth))
                return flows
    return [_lines(frags)]


def _split_block(frags: list[_Frag], g0: float, g1: float, depth: int) -> list[list[_Line]]:
    """A stretch of the page no line crosses the gutter in, cut where a blank strip runs across
    it (a table below the columns): each piece reads left side then right side when both sides
    are prose, else across."""
    heights = sorted(f.bottom - f.top for f in frags)
    gap = 2.0 * heights[len(heights) // 2]
    pieces: list[list[_Frag]] = []
    bottom = -math.inf
    for f in sorted(frags, key=lambda f: f.top):
        if not pieces or f.top - bottom > gap:
            pieces.append([])
        pieces[-1].append(f)
        bottom = max(bottom, f.bottom)
    flows: list[list[_Line]] = []
    for piece in pieces:
        left = [f for f in piece if f.x1 <= g0 + 0.5]
        right = [f for f in piece if f.x0 >= g1 - 0.5]
        if left and right and not (_columnar(left) and _columnar(right)):
            flows.append(_lines(piece))
            continue
        tail: list[_Frag] = []
        if left and right:
            left_end, right_end = max(f.bottom for f in left), max(f.bottom for f in right)
            if left_end > right_end:
                left, tail = _after_columns(left, right_end)
            else:
                right, tail = _after_columns(right, left_end)
        for side in (left, right, tail):
            if side:
                flows.extend(_columns(side, depth + 1))
    return flows


def _after_columns(side: list[_Frag], other_end: float) -> tuple[list[_Frag], list[_Frag]]:
    """The longer column split where what follows the columns begins: below the end of the other
    column, the first line after a gap wider than its lines' pitch allows or set larger (a
    heading under both columns, narrow enough not to cross the gutter)."""
    if not any(f.top > other_end for f in side):
        return side, []
    lines = _lines(side)
    pitch = _pitch(lines)
    for k in range(1, len(lines)):
        line, above = lines[k], lines[k - 1]
        if line.top <= other_end:
            continue
        if (pitch and line.top - above.top > 1.45 * pitch) or line.size > 1.15 * max(above.size, 0.1):
            keep = [f for ln in lines[:k] for f in ln.frags]
            return keep, [f for ln in lines[k:] for f in ln.frags]
    return side, []


def _long(frags: list[_Frag]) -> bool:
    return any(len(f.text) >= 15 for f in frags)


def _columnar(frags: list[_Frag]) -> bool:
    """A side of a short stretch that reads as column text: long fragments, mostly filling it."""
    lengths = sorted(len(f.text) for f in frags)
    if lengths[len(lengths) // 2] < 15:
        return False
    return len(frags) <= 2 or _prose(frags)


def _gutter(frags: list[_Frag]) -> tuple[float, float] | None:
    """The widest vertical strip in the middle 60% of the text's width that no fragment (or at
    most a few) crosses, at least about a letter wide."""
    x0 = min(f.x0 for f in frags)
    x1 = max(f.x1 for f in frags)
    width = x1 - x0
    if width < 50:
        return None
    lo, hi = x0 + 0.2 * width, x0 + 0.8 * width
    events = sorted([(f.x0, 1) for f in frags] + [(f.x1, -1) for f in frags])
    sizes = sorted(f.size for f in frags if f.size > 0)
    min_width = 0.8 * (sizes[len(sizes) // 2] if sizes else 10.0)
    # A strip nothing crosses first; else one a few wide lines (a title, a wide table) cross.
    for allowed in (0, max(1, len(frags) // 20)):
        best: tuple[float, float] | None = None
        level = 0
        start: float | None = None
        for x, step in events:
            before = level
            level += step
            if before > allowed >= level:
                start = x  # a strip opens
            elif before <= allowed < level and start is not None:
                a, b = max(start, lo), min(x, hi)  # a strip closes: its part in the middle counts
                if b - a >= min_width and (best is None or b - a > best[1] - best[0]):
                    best = (a, b)
                start = None
        if best is not None:
            return best
    return None


def _prose(frags: list[_Frag]) -> bool:
    """Whether a side of a gutter holds running text: at least three long fragments (15+
    characters), most of them filling the width the long ones span. Short ones (a table's
    cells beside the columns) are not counted: a stretch of them reads across anyway."""
    long = [f for f in frags if len(f.text) >= 15]
    if len(long) < 3:
        return False
    width = max(f.x1 for f in long) - min(f.x0 for f in long)
    return width > 0 and sum(1 for f in long if f.x1 - f.x0 >= 0.6 * width) >= 0.5 * len(long)


def _pitch(lines: list[_Line]) -> float:
    steps = [b.top - a.top for a, b in zip(lines, lines[1:], strict=False)
             if b.top > a.top and abs(a.size - b.size) < 0.5]
    return median(steps) if steps else 0.0
