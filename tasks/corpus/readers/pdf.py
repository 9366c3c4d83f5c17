"""PDF through PDFium (pypdfium2, Apache/BSD): text in reading order, one page at a time.

PDFium gives each page's characters in content-stream order with its own line breaks, and the box
of each run of characters drawn by one text object. That is enough to lay a page out again
without asking for every character's box (which would cost ~3x the time): each PDFium line is cut
where its runs leave a wide gap (table cells, a second column drawn on the same baseline), the
pieces are regrouped into visual lines, a gutter free of text splits two- or three-column pages
(column 1 is read before column 2), lines with several cells become table rows ("a | b | c"),
and lines become paragraphs with end-of-line hyphens undone: a line that was wrapped (stopped
mid-sentence where the next line's first word would not fit) goes on with its paragraph even when
the next is set in another size (inline code), and a paragraph running over a page break is joined
on the page it starts on.

A tagged PDF (what browsers, Word and LibreOffice export; PDF/UA requires it) says itself what its
text is: lines tagged H1-H6 in its structure tree are the headings, at those levels, and content
marked as an artifact (running headers and footers, page numbers) is not the document's text.
An untagged PDF is read by its look: running headers and footers are learnt from the first pages
(a small window, kept in memory as extracted text only) and dropped on every page, and lines set
notably larger than the body text are headings. Either way, chunks get a heading path. The
document is opened once and each page is loaded, read and closed before the next, so a 2,000-page
PDF is held one page at a time.
"""

from __future__ import annotations

import ctypes
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from situate.core.settings import Settings
from situate.tasks.corpus.readers.base import FileReader, Limits, Place, Reading, Section, Unreadable

# more is refused unread (SITUATE_MAX_PDF_PAGES): a page tree can repeat pages
MAX_PAGES: int = Settings.model_fields["max_pdf_pages"].default
WINDOW = 8  # pages read ahead to learn headers, footers and the body's font size
SCAN_PAGES = 5  # a PDF whose first pages all have images and no text is a scan
BAND = 0.1  # headers and footers live in the top and bottom tenth of the page
HEADING_RATIO = 1.18  # a line this much larger than the body text is a heading
HYPHENS = "-\u2010\u00ad"
_EOL_HYPHEN = "\ufffe"  # PDFium's mark for a hyphen it saw at a line's end (no line break follows)
_BULLETS = "\u2022\u25e6\u25aa\u25cf\u2023\u2043\u2219*\u2013\u2014-"
_BULLET = re.compile(rf"^([{_BULLETS}]|\(?\d+[.)]|\(?[a-zA-Z][.)])(\s|$)")  # a list item starts a paragraph
# A list marker ("1.", "a)", "(iv)", "•") stays with its item's text; a bare number ("2021",
# "1.20") may be a table's cell and does not.
_MARKER = re.compile(rf"^([\(\[]?(\d+(\.\d+)*|[A-Za-z]|[ivxlcIVXLC]+)[.)\]]|[{_BULLETS}])$")
_BREAK = re.compile("\r\n|[\r\n\ufffe]")  # PDFium's line ends
_PAGE_NUMBER = re.compile(r"^[\W_]*(page\s*)?(\d+|[ivxlc]+)(\s*(of|/)\s*\d+)?[\W_]*$", re.IGNORECASE)
# A line that stops inside a sentence, as a printed line wraps: after a word, a comma or a hyphen. One
# ending in a sentence's end, a colon, or code's punctuation (";", "{", ")", "=") ends where its text does.
_OPEN_END = re.compile(rf"[\w,{HYPHENS}]$")
_SENTENCE_END = re.compile(r"[.!?:][\"'\u2019\u201d)\]]*$")  # a sentence's end, closing quotes after it
_LEADER = re.compile(r"(\.\s?){4,}\s*\S*$|\u2026\s*\S*$")  # a table of contents' dot leader
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


@dataclass(slots=True)
class _Page:
    number: int  # 1-based
    width: float
    height: float
    frags: list[_Frag]
    images: bool  # checked only when the page has no text


@dataclass(slots=True)
class _End:
    """How a page's text ends when its last block is a paragraph: the room left on its last line
    to the right edge of its column, and that line's mean character width and size."""

    room: float
    advance: float
    size: float


@dataclass
class _Style:
    """What the first pages teach about the rest: the running header and footer lines (text with
    digits masked, and where they sit) and the font sizes of body text and headings."""

    furniture: dict[str, float] = field(default_factory=dict)  # masked text -> median position
    body: float = 0.0
    heading_sizes: list[float] = field(default_factory=list)  # largest first
    tagged: bool = False  # the first pages tag headings (H1-H6): headings come from the tags only

    def heading(self, line: _Line) -> int:
        """The heading level of a line, 0 for body text: its tag in a PDF that tags headings,
        else by its size."""
        if self.tagged:
            tagged = [f for f in line.frags if f.tag.startswith("H")]
            ink = sum(len(f.text) for f in line.frags)
            if not tagged or 2 * sum(len(f.text) for f in tagged) < ink:
                return 0
            return min(int(f.tag[1]) for f in tagged)
        return self.level(line.size)

    def level(self, size: float) -> int:
        """The heading level of a line this size, 0 for body text."""
        if not self.body or size < self.body * HEADING_RATIO:
            return 0
        larger = sum(1 for s in self.heading_sizes if s > size * 1.05)
        return min(3, larger + 1)


def read(path: Path, *, fmt: str = "pdf", max_bytes: int, max_pages: int = MAX_PAGES) -> Reading:
    """Open `path` as a PDF: checks it is one, not encrypted, has at most `max_pages` pages, is
    not a scan, reads the first pages ahead (headers, footers, font sizes) and returns a Reading
    whose sections are its pages, read one at a time."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(1024)
        f.seek(0, 2)
        size = f.tell()
    if b"%PDF-" not in head:
        raise Unreadable("not a PDF", f"{path}: the file's content is not a PDF (no %PDF- header)")
    if size > max_bytes:
        raise Unreadable("too large", f"{path}: {size} bytes, over the limit of {max_bytes} "
                                      "(SITUATE_MAX_DOCUMENT_BYTES)")
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        code = getattr(e, "err_code", None)
        if code in (_FPDF_ERR_PASSWORD, _FPDF_ERR_SECURITY):
            raise Unreadable("encrypted PDF", "password-protected; decrypt it (e.g. qpdf --decrypt) and "
                                              "ingest again") from None
        raise Unreadable("corrupt PDF", f"{path}: {e} (truncated or damaged; save or repair it, e.g. "
                                        "qpdf, and ingest again)") from None
    try:
        count = len(pdf)
        if count <= 0:
            raise Unreadable("corrupt PDF", f"{path}: no pages")
        if count > max_pages:
            # A page tree may list one page again and again: a million pages in 2 KB.
            raise Unreadable("too many pages", f"{count} pages, over the limit of {max_pages} "
                                               "(SITUATE_MAX_PDF_PAGES)")
        title = _title(pdf)
        window = [_extract(pdf, i) for i in range(min(WINDOW, count))]
        _refuse_scan(pdf, window, count)
        style = _learn(window)
    except BaseException:
        pdf.close()
        raise
    return Reading(format=fmt, sections=_sections(pdf, window, count, style), title=title,
                   unit="pages", units=count)


def _sections(pdf: Any, window: list[_Page], count: int, style: _Style) -> Iterator[Section]:
    """Every page's sections: the window's pages first (already read), then each further page
    loaded, read and closed in turn. Closes the document at the end."""
    held: Section | None = None  # a page's last section, held until the next page's first is known
    end: _End | None = None  # how the held section's last line ends
    absorbed = False  # whether the held section took in the whole of the next page already
    try:
        for i in range(count):
            page = window.pop(0) if window else _extract(pdf, i)
            sections, page_end = _page_sections(page, style)
            if held is not None:
                if sections:
                    held, sections[0] = _carry_word(held, sections[0])
                    if not absorbed and _continues(held, end, sections[0]):
                        held, rest = _take_paragraph(held, sections[0])
                        if rest is not None:
                            sections[0] = rest
                        else:
                            sections.pop(0)
                            if not sections:  # the page was the paragraph's end: held one page more
                                end, absorbed = page_end, True
                                continue
                if held.text:
                    yield _final(held)
                held = None
            if sections:
                held = sections.pop()
                end, absorbed = page_end, False
                yield from (_final(s) for s in sections)
        if held is not None:
            yield _final(held)
    finally:
        pdf.close()


def _carry_word(last: Section, first: Section) -> tuple[Section, Section]:
    """A word hyphenated across a page break ("... the retrie-" | "val of ...") moved whole to the
    next page's first text; the sections are returned unchanged otherwise."""
    text = last.text
    if last.kind != "text" or first.kind != "text" or len(text) < 2 or text[-1] not in HYPHENS \
            or not text[-2].isalpha() or not first.text[:1].islower():
        return last, first
    cut = max(text.rfind(" "), text.rfind("\n")) + 1
    word = text[cut:-1]
    rest = text[:cut].rstrip()
    carried = Section(word + first.text, first.place, first.kind, first.level)
    return Section(rest, last.place, last.kind, last.level), carried


def _continues(last: Section, end: _End | None, first: Section) -> bool:
    """Whether a page's last paragraph goes on at the next page's first: it stops mid-sentence on
    a line that was wrapped (the room left on it is less than the next page's first word and a
    space, as `_wrapped` judges two lines of a page), the next page's first paragraph ends a
    sentence (as a paragraph's end does: not a heading, a label or a line of code), and both are
    text."""
    if end is None or last.kind != "text" or first.kind != "text" or not last.text \
            or not _OPEN_END.search(last.text):
        return False
    words = first.text.split(None, 1)
    head = first.text.partition("\n\n")[0]
    return bool(words) and bool(_SENTENCE_END.search(head)) \
        and end.room <= end.advance * (len(words[0]) + 1) + end.size


def _take_paragraph(last: Section, first: Section) -> tuple[Section, Section | None]:
    """`last` with the first paragraph of `first` joined to it (a paragraph is read on the page
    it starts on), and what is left of `first` (None when nothing is)."""
    head, _, rest = first.text.partition("\n\n")
    joined = Section(_join(last.text, head.strip()), last.place, last.kind, last.level)
    rest = rest.strip()
    return joined, (Section(rest, first.place, first.kind, first.level) if rest else None)


def _final(section: Section) -> Section:
    """A section as given out: a soft hyphen left at its end (kept for `_carry_word`) removed."""
    if section.text.endswith("\u00ad"):
        return Section(section.text[:-1], section.place, section.kind, section.level)
    return section


def _title(pdf: Any) -> str:
    try:
        title = str(pdf.get_metadata_value("Title") or "").strip()
    except Exception:  # noqa: BLE001 - metadata is a nicety; a broken Info dictionary is no title
        return ""
    return "" if title.lower() in _JUNK_TITLES else title


# --- Reading one page ------------------------------------------------------------------------------

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


def _refuse_scan(pdf: Any, window: list[_Page], count: int) -> None:
    """A scan: the first pages (5, or all when fewer) have images and no text at all, and neither
    have a few pages sampled through the rest of the document. Blank pages alone are no scan."""
    first = window[:SCAN_PAGES]
    if any(p.frags for p in first) or not any(p.images for p in first):
        return
    rest = range(len(window), count)
    if rest:
        step = max(1, len(rest) // 5)
        for i in list(rest[::step])[:5] + [count - 1]:
            if _extract(pdf, i).frags:
                return
    if any(p.frags for p in window):
        return
    raise Unreadable("scanned PDF", "no text layer; OCR is not included: run OCR first (e.g. ocrmypdf) and "
                                    "ingest the result")


# --- What the first pages teach --------------------------------------------------------------------

def _mask(text: str) -> str:
    return " ".join(re.sub(r"\d+", "#", text.lower()).split())


def _band_lines(page: _Page) -> list[tuple[str, float, list[_Frag]]]:
    """The lines in the page's top and bottom bands: (masked text, position, fragments)."""
    band = BAND * page.height
    inside = [f for f in page.frags if (f.top + f.bottom) / 2 < band
              or (f.top + f.bottom) / 2 > page.height - band]
    out = []
    for line in _lines(inside):
        text = " ".join(f.text for f in line.frags)
        out.append((_mask(text), (line.top + line.bottom) / 2, line.frags))
    return out


def _learn(window: list[_Page]) -> _Style:
    """The body's font size (the size most characters have), the heading sizes (notably larger),
    and the running header and footer lines: in the top or bottom band, the same text with digits
    masked on at least 40% of the window's pages (and 3), not set larger than the body."""
    style = _Style()
    texted = [p for p in window if p.frags]
    style.tagged = any(f.tag.startswith("H") for p in texted for f in p.frags)
    sizes: Counter[float] = Counter()
    for page in texted:
        for f in page.frags:
            if f.size > 0:
                sizes[round(f.size * 2) / 2] += len(f.text)
    if sizes:
        body, _ = sizes.most_common(1)[0]
        total = sum(sizes.values())
        large = {s: n for s, n in sizes.items() if s >= body * HEADING_RATIO}
        # Headings are a small part of the text; when "large" text is a big part, sizes do not
        # tell headings apart (slides, posters, odd fonts): no headings at all rather than wrong ones.
        if sum(large.values()) <= 0.3 * total:
            style.body = body
            style.heading_sizes = _clusters(sorted(large, reverse=True))
    if len(texted) >= 3:
        seen: dict[str, list[float]] = {}
        for page in texted:
            once: dict[str, float] = {}
            for key, y, frags in _band_lines(page):
                if not style.level(max(f.size for f in frags)):
                    once.setdefault(key, y)
            for key, y in once.items():
                seen.setdefault(key, []).append(y)
        need = max(3, math.ceil(0.4 * len(texted)))
        style.furniture = {k: median(ys) for k, ys in seen.items() if len(ys) >= need}
    return style


def _clusters(sizes: list[float]) -> list[float]:
    """Sizes within 5% of one another counted as one (a bold and a roman 14 pt differ a little)."""
    out: list[float] = []
    for s in sizes:
        if not out or s < out[-1] * 0.95:
            out.append(s)
    return out


# --- Laying a page out -----------------------------------------------------------------------------

def _drop_furniture(page: _Page, style: _Style) -> list[_Frag]:
    """The page's fragments without its running header and footer lines and page numbers: those
    a tagged PDF marks as artifacts, and those learnt from the first pages."""
    drop: set[int] = {id(f) for f in page.frags if f.tag == "artifact"}
    tolerance = 0.03 * page.height
    for key, y, frags in _band_lines(page):
        known = style.furniture.get(key)
        if (known is not None and abs(known - y) <= tolerance) or _PAGE_NUMBER.match(key.replace("#", "1")):
            drop.update(id(f) for f in frags)
    return [f for f in page.frags if id(f) not in drop] if drop else page.frags


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


# --- Lines to sections -----------------------------------------------------------------------------

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


def _pitch(lines: list[_Line]) -> float:
    steps = [b.top - a.top for a, b in zip(lines, lines[1:], strict=False)
             if b.top > a.top and abs(a.size - b.size) < 0.5]
    return median(steps) if steps else 0.0


def _page_sections(page: _Page, style: _Style) -> tuple[list[Section], _End | None]:
    """One page's sections in reading order: headings, text (paragraphs separated by blank lines)
    and tables (one row per line, cells separated by " | "); and how its last paragraph ends, when
    the page ends with one."""
    frags = _drop_furniture(page, style)
    if not frags:
        return [], None
    where = Place(page=page.number)
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
    return list(_sections_of(blocks, starts, where)), end


def _sections_of(blocks: list[tuple[str, int, str]], starts: set[int],
                 where: Place) -> Iterator[Section]:
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
            yield Section(_clean("\n\n".join(paragraphs)), where)
            paragraphs = []
        yield Section(_clean(text), where, kind, level)
    if paragraphs:
        yield Section(_clean("\n\n".join(paragraphs)), where)


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
    pitch = _pitch(flow)
    left = min(line.x0 for line in flow)
    right = max(line.x1 for line in flow)
    width = right - left
    rows: list[_Line] = []  # consecutive lines of several cells, a table or not
    para = ""
    heading: tuple[int, str] | None = None
    last: _Line | None = None  # the line before, for paragraph breaks and multi-line headings
    tail: _Line | None = None  # the last line of the last block, when that block is a paragraph

    def flush() -> None:
        nonlocal para, heading, tail
        if para:
            blocks.append(("text", 0, para))
            para = ""
            tail = last
        if heading:
            tail = None
            level, text = heading
            if len(text) <= 200 and len(text.split()) <= 24:  # else large text, not a title
                blocks.append(("heading", level, text))
            else:
                blocks.append(("text", 0, text))
            heading = None

    def text_line(line: _Line) -> None:
        nonlocal para, last
        if heading or not para or last is None or _paragraph_break(last, line, pitch, right, width):
            flush()
            para = line.text
        else:
            para = _join(para, line.text)
        last = line

    def single(line: _Line) -> None:
        nonlocal heading, last
        level = style.heading(line)
        if level and (not any(ch.isalpha() for ch in line.text) or _LEADER.search(line.text)):
            level = 0
        if level:
            if heading and heading[0] == level and last is not None and line.top - last.bottom < line.size:
                heading = (level, _join(heading[1], line.text))
            else:
                flush()
                heading = (level, line.text)
            last = line
        else:
            text_line(line)

    def end_rows() -> None:
        nonlocal tail
        if len(rows) >= 2 and _aligned(rows):
            flush()
            tail = None
            blocks.append(("table", 0, "\n".join(" | ".join(c.strip() for c in r.cells) for r in rows)))
        else:  # a numbered heading ("1   Introduction"), a justified line: cells read as one line
            for row in rows:
                single(row)
        rows.clear()

    for line in flow:
        if len(line.cells) >= 2:
            rows.append(line)
            continue
        if rows:
            end_rows()
        single(line)
    if rows:
        end_rows()
    flush()
    # A column of one line does not show where its right edge is: no evidence the line was wrapped.
    return (tail if len(flow) > 1 else None), right


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


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes, max_pages=limits.max_pages)


READERS = (FileReader("pdf", "PDF", (".pdf",), _read),)
