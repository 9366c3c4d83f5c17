"""What PDFium gives of a page: its text as fragments (runs of characters drawn by one text object, with
their boxes, font sizes and structure tags), whether it has images, and the document's title.
Artifacts (running headers, footers, page numbers a tagged PDF marks as such) are left out here.
"""

from __future__ import annotations

import ctypes
import math
import re
from dataclasses import dataclass
from typing import Any

from situate.tasks.corpus.readers.base import Unreadable

_EOL_HYPHEN = "\ufffe"  # PDFium's mark for a hyphen it saw at a line's end (no line break follows)


_BREAK = re.compile("\r\n|[\r\n\ufffe]")  # PDFium's line ends


_JUNK_TITLES = {"untitled", "unknown", "title", "no title", "anonymous", "(anonymous)"}


_FPDF_ERR_PASSWORD = 4


_FPDF_ERR_SECURITY = 6


_PAGEOBJ_IMAGE = 3


_PAGEOBJ_FORM = 5


@dataclass(slots=True)
class _Frag:
    """A run of text on one visual line with no wide gap in it, in display coordinates (points,
    origin top-left, y downward)."""

    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    size: float  # font size as drawn (the font's size times the text matrix's scale)
    # Where its text is in PDFium's text of the page: the line (a running number) and the first
    # and last visible characters. Two fragments cut from one line with nothing between their
    # characters are one word drawn in pieces ("NODE", "_", "MODULE"): no space between them.
    line: int = -1
    first: int = -1
    last: int = -1
    # What a tagged PDF says the text is: "H1".."H6" (a heading), "artifact" (pagination: running
    # headers, footers, page numbers), else "" (content, or an untagged PDF).
    tag: str = ""
    at: int = -1  # the index of its first character in PDFium's text, for its tag


@dataclass(slots=True)
class _Page:
    number: int  # 1-based
    width: float
    height: float
    frags: list[_Frag]
    images: bool  # checked only when the page has no text


def _title(pdf: Any) -> str:
    try:
        title = str(pdf.get_metadata_value("Title") or "").strip()
    except Exception:  # noqa: BLE001 - metadata is a nicety; a broken Info dictionary is no title
        return ""
    return "" if title.lower() in _JUNK_TITLES else title


def _extract(pdf: Any, index: int) -> _Page:
    """Page `index` as text fragments with boxes; the page and its text page are closed on return."""
    import pypdfium2.raw as c

    page = c.FPDF_LoadPage(pdf.raw, index)
    if not page:
        raise Unreadable("corrupt PDF", f"page {index + 1} cannot be loaded (damaged or truncated file)")
    try:
        box = c.FS_RECTF()
        if c.FPDF_GetPageBoundingBox(page, box):
            bounds = (box.left, box.bottom, box.right, box.top)
        else:
            bounds = (0.0, 0.0, c.FPDF_GetPageWidthF(page), c.FPDF_GetPageHeightF(page))
        rotation = c.FPDFPage_GetRotation(page) % 4
        tp = c.FPDFText_LoadPage(page)
        if not tp:
            raise Unreadable("corrupt PDF", f"page {index + 1}: its text cannot be read")
        try:
            frags = _fragments(c, tp, _Transform(bounds, rotation))
            if frags:
                _tag_fragments(c, page, tp, frags)
        finally:
            c.FPDFText_ClosePage(tp)
        images = not frags and _has_images(c, page)
        left, bottom, right, top = bounds
        width, height = right - left, top - bottom
        if rotation % 2:
            width, height = height, width
        return _Page(index + 1, width, height, frags, images)
    finally:
        c.FPDF_ClosePage(page)


class _Transform:
    """PDF user space (y up, page box possibly offset, page possibly rotated) to the page as
    displayed (origin top-left, y down)."""

    def __init__(self, bounds: tuple[float, float, float, float], rotation: int) -> None:
        self.left, self.bottom, self.right, self.top = bounds
        self.rotation = rotation

    def point(self, x: float, y: float) -> tuple[float, float]:
        r = self.rotation
        if r == 0:
            return x - self.left, self.top - y
        if r == 1:
            return y - self.bottom, x - self.left
        if r == 2:
            return self.right - x, y - self.bottom
        return self.top - y, self.right - x

    def rect(self, left: float, bottom: float, right: float, top: float) -> tuple[float, float, float, float]:
        ax, ay = self.point(left, bottom)
        bx, by = self.point(right, top)
        return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)


def _page_text(c: Any, tp: Any, n: int) -> str:
    """The page's characters, one string per PDFium character index (GetText in one call; per
    character only when a character outside the BMP broke the 1:1 mapping)."""
    buf = ctypes.create_string_buffer((n + 1) * 2)
    got = c.FPDFText_GetText(tp, 0, n, ctypes.cast(buf, ctypes.POINTER(ctypes.c_ushort)))
    text = buf.raw[: max(0, got - 1) * 2].decode("utf-16-le", errors="replace")
    if len(text) == n:
        return text
    out = []
    for i in range(n):
        code = c.FPDFText_GetUnicode(tp, i)
        if code == 2:  # what GetText writes as U+FFFE: a hyphen at a line's end, or a soft hyphen
            out.append(_EOL_HYPHEN if c.FPDFText_IsHyphen(tp, i) else "-")
        else:  # a glyph with no Unicode (0) keeps its place, to be dropped with the other junk
            out.append(chr(code) if 0 < code < 0x110000 else "\ufffd")
    return "".join(out)


_HEADING_TAG = re.compile(r"^H([1-6])$")


MAX_STRUCTURE = 20_000  # structure elements looked at on one page: a tree beyond it is not read


def _tag_fragments(c: Any, page: Any, tp: Any, frags: list[_Frag]) -> None:
    """Each fragment's tag from a tagged PDF: the page's structure tree maps marked-content ids
    to element types (H1-H6 kept), and a text object marked /Artifact is pagination, not
    content. An untagged page leaves every tag empty."""
    levels = _heading_ids(c, page)
    for f in frags:
        i = f.first if f.first >= 0 else f.at
        obj = c.FPDFText_GetTextObject(tp, i) if i >= 0 else None
        if not obj:
            continue
        if _artifact(c, obj):
            f.tag = "artifact"
        elif levels:
            level = levels.get(c.FPDFPageObj_GetMarkedContentID(obj))
            if level:
                f.tag = f"H{level}"


def _heading_ids(c: Any, page: Any) -> dict[int, int]:
    """Marked-content id -> heading level (1-6) of every H1-H6 element of the page's structure
    tree (content under a heading element, at any depth); empty for an untagged page."""
    tree = c.FPDF_StructTree_GetForPage(page)
    if not tree:
        return {}
    out: dict[int, int] = {}
    buf = ctypes.create_string_buffer(64)
    seen = 0
    try:
        stack = [(c.FPDF_StructTree_GetChildAtIndex(tree, k), 0)
                 for k in range(c.FPDF_StructTree_CountChildren(tree))]
        while stack and seen < MAX_STRUCTURE:
            el, level = stack.pop()
            if not el:
                continue
            seen += 1
            n = c.FPDF_StructElement_GetType(el, buf, len(buf))
            m = _HEADING_TAG.match(buf.raw[:max(0, n - 2)].decode("utf-16-le", errors="replace")) \
                if 0 < n <= len(buf) else None
            level = int(m.group(1)) if m else level
            if level:
                for k in range(c.FPDF_StructElement_GetMarkedContentIdCount(el)):
                    out[c.FPDF_StructElement_GetMarkedContentIdAtIndex(el, k)] = level
            stack.extend((c.FPDF_StructElement_GetChildAtIndex(el, k), level)
                         for k in range(c.FPDF_StructElement_CountChildren(el)))
    finally:
        c.FPDF_StructTree_Close(tree)
    return out


def _artifact(c: Any, obj: Any) -> bool:
    """Whether a page object is marked as an /Artifact (marked-content tag)."""
    buf = ctypes.create_string_buffer(32)
    length = ctypes.c_ulong()
    for k in range(c.FPDFPageObj_CountMarks(obj)):
        mark = c.FPDFPageObj_GetMark(obj, k)
        if mark and c.FPDFPageObjMark_GetName(mark, ctypes.cast(buf, ctypes.POINTER(ctypes.c_ushort)),
                                              len(buf), ctypes.byref(length)):
            if buf.raw[:max(0, length.value - 2)].decode("utf-16-le", errors="replace") == "Artifact":
                return True
    return False


def _fragments(c: Any, tp: Any, tf: _Transform) -> list[_Frag]:
    """The page's text as fragments: PDFium's lines, each cut where its text objects' boxes leave
    a gap wider than about a letter's height (or change baseline)."""
    n = c.FPDFText_CountChars(tp)
    if n <= 0:
        return []
    return _TextPage(c, tp, tf, _page_text(c, tp, n)).fragments()


class _TextPage:
    """One PDFium text page being cut into fragments, with the ctypes out-parameters reused."""

    def __init__(self, c: Any, tp: Any, tf: _Transform, chars: str) -> None:
        self.c, self.tp, self.tf, self.chars = c, tp, tf, chars
        self.box = [ctypes.c_double() for _ in range(4)]
        self.matrix = c.FS_MATRIX()
        self.plain = tf.rotation == 0 and tf.left == 0 and tf.top > 0  # the common case, inlined

    def fragments(self) -> list[_Frag]:
        c, tp, chars = self.c, self.tp, self.chars
        left, top, right, bottom = self.box
        height = self.tf.top
        frags: list[_Frag] = []
        start = line = 0
        for brk in _BREAK.finditer(chars + "\n"):
            i = brk.start()
            end = i + 1 if chars[i:i + 1] == _EOL_HYPHEN else i  # PDFium's end-of-line hyphen stays
            if end > start:
                rects = []
                for k in range(c.FPDFText_CountRects(tp, start, end - start)):
                    if c.FPDFText_GetRect(tp, k, left, top, right, bottom):
                        if self.plain:
                            box = (left.value, height - top.value, right.value, height - bottom.value)
                        else:
                            box = self.tf.rect(left.value, bottom.value, right.value, top.value)
                        if box[2] - box[0] > 0.01 and box[3] - box[1] > 0.01:
                            rects.append(box)
                if len(rects) == 1:
                    text = " ".join(chars[start:end].replace(_EOL_HYPHEN, "-").split())
                    if text:
                        x0, y0, x1, y1 = rects[0]
                        frags.append(_Frag(text, x0, y0, x1, y1, self.font_size(start, end), line,
                                           at=start + len(chars[start:end]) - len(chars[start:end].lstrip())))
                elif rects:
                    frags.extend(self.cut_line(start, end, _groups(rects), line))
            start = brk.end()
            line += 1
        for f in frags:
            if f.bottom - f.top < 0.3 * f.size:
                # A glyph with no height of its own (an underscore, a low line) drawn by itself:
                # its box is a sliver under the baseline, below the box of the word it belongs to.
                # Given a letter's height above its bottom, it joins that word's line.
                f.top = f.bottom - 0.75 * f.size
        return frags

    def cut_line(self, start: int, end: int, groups: list[list[float]], line: int) -> list[_Frag]:
        """One PDFium line as fragments: the whole line when it is one group, else each character
        sent to the group its box falls in (character boxes asked for on such lines only)."""
        chars = self.chars
        if len(groups) == 1:
            texts = [chars[start:end]]
            firsts = [start]
            lasts = [end - 1]
        else:
            c, tp = self.c, self.tp
            parts: list[list[str]] = [[] for _ in groups]
            firsts = [-1] * len(groups)
            lasts = [-1] * len(groups)
            left, top, right, bottom = self.box
            g = 0
            for i in range(start, end):
                if c.FPDFText_GetCharBox(tp, i, left, right, bottom, top) and right.value - left.value > 0.01:
                    x0, _, x1, _ = self.tf.rect(left.value, bottom.value, right.value, top.value)
                    cx = (x0 + x1) / 2
                    # The group of the character before when the box is in it, else the next
                    # groups' (characters come in content order), else the nearest of all: a
                    # line of thousands of overlapping runs costs no more than a line of words.
                    if not groups[g][0] <= cx <= groups[g][2]:
                        g = _containing(groups, g, cx)
                    if firsts[g] < 0:
                        firsts[g] = i
                    if not chars[i].isspace():
                        lasts[g] = i
                parts[g].append(chars[i])
            texts = ["".join(p) for p in parts]
        out = []
        for group, text, first, last in zip(groups, texts, firsts, lasts, strict=True):
            text = " ".join(text.replace(_EOL_HYPHEN, "-").split())
            if text:
                out.append(_Frag(text, group[0], group[1], group[2], group[3], self.font_size(first, end),
                                 line, first, last))
        return out

    def font_size(self, i: int, end: int) -> float:
        """The drawn size of a run's text: the font size times the text matrix's vertical scale
        (a PDF may set 1-point text and scale it with the matrix), the median of visible
        characters spread over the run, so a bullet or a word in another font does not decide:
        the first, middle and last, and when they differ (inline code at both ends of a line of
        prose) the quarter points as well."""
        chars = self.chars
        if i < 0:
            return 0.0
        while i < end and chars[i].isspace():
            i += 1
        last = end - 1
        while last > i and chars[last].isspace():
            last -= 1
        if i >= end:
            return 0.0
        first = self.char_size(i)
        if last == i:
            return first
        final = self.char_size(last)
        middle = self.char_size(self._visible((i + last) // 2, last))
        if first == final == middle:
            return first
        quarters = [self.char_size(self._visible(i + (last - i) * q // 4, last)) for q in (1, 3)]
        return sorted((first, final, middle, *quarters))[2]

    def _visible(self, k: int, last: int) -> int:
        chars = self.chars
        while k < last and chars[k].isspace():
            k += 1
        return k

    def char_size(self, i: int) -> float:
        size = float(self.c.FPDFText_GetFontSize(self.tp, i))
        m = self.matrix
        if self.c.FPDFText_GetMatrix(self.tp, i, m):
            scale = math.hypot(m.c, m.d)
            if scale > 0:
                size *= scale
        return round(size, 1)


def _containing(groups: list[list[float]], here: int, cx: float, ahead: int = 16) -> int:
    """The group for a character centred at `cx` that the group before it (`here`) does not hold:
    the first of the next `ahead` groups that holds it, else the nearest of all (`here` winning
    a tie)."""
    for k in range(here + 1, min(len(groups), here + 1 + ahead)):
        if groups[k][0] <= cx <= groups[k][2]:
            return k
    return min(range(len(groups)),
               key=lambda k: max(groups[k][0] - cx, 0.0, cx - groups[k][2]) + (k != here) * 0.01)


def _groups(rects: list[tuple[float, float, float, float]]) -> list[list[float]]:
    """Consecutive runs merged while they continue one another: on one baseline (superscripts
    allowed) and no wider apart than about a letter's height."""
    groups: list[list[float]] = []
    for x0, y0, x1, y1 in rects:
        if groups:
            g = groups[-1]
            h = max(g[3] - g[1], y1 - y0)
            gap = x0 - g[2]
            same_line = abs((g[1] + g[3]) / 2 - (y0 + y1) / 2) < 0.7 * h
            if same_line and -0.5 * h <= gap <= 1.0 * h:
                g[0], g[1], g[2], g[3] = min(g[0], x0), min(g[1], y0), max(g[2], x1), max(g[3], y1)
                continue
        groups.append([x0, y0, x1, y1])
    return groups


def _has_images(c: Any, page: Any) -> bool:
    """Whether the page draws an image, also inside form XObjects (how scanners often wrap it)."""
    def walk(count: int, get: Any, depth: int) -> bool:
        for k in range(min(count, 10_000)):
            obj = get(k)
            kind = c.FPDFPageObj_GetType(obj)
            if kind == _PAGEOBJ_IMAGE:
                return True
            if kind == _PAGEOBJ_FORM and depth < 4:
                inner = c.FPDFFormObj_CountObjects(obj)
                if walk(inner, lambda j, o=obj: c.FPDFFormObj_GetObject(o, j), depth + 1):
                    return True
        return False

    return walk(c.FPDFPage_CountObjects(page), lambda k: c.FPDFPage_GetObject(page, k), 0)
