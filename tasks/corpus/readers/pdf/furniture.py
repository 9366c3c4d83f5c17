"""What the first pages of a PDF teach about the rest: the running headers and footers (dropped on
every page), the body text's font size and the headings' sizes; and a scan (pages of images, no
text) refused.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from situate.tasks.corpus.readers.base import Unreadable
from situate.tasks.corpus.readers.pdf.layout import _Line, _lines
from situate.tasks.corpus.readers.pdf.pdfium import _extract, _Frag, _Page

SCAN_PAGES = 5  # a PDF whose first pages all have images and no text is a scan


BAND = 0.1  # headers and footers live in the top and bottom tenth of the page


HEADING_RATIO = 1.18  # a line this much larger than the body text is a heading


_PAGE_NUMBER = re.compile(r"^[\W_]*(page\s*)?(\d+|[ivxlc]+)(\s*(of|/)\s*\d+)?[\W_]*$", re.IGNORECASE)


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


def _refuse_scan(pdf: Any, ahead: list[_Page], count: int) -> None:
    """A scan: the first pages (5, or all when fewer) have images and no text at all, and neither
    have a few pages sampled through the rest of the document. Blank pages alone are no scan."""
    first = ahead[:SCAN_PAGES]
    if any(p.frags for p in first) or not any(p.images for p in first):
        return
    rest = range(len(ahead), count)
    if rest:
        step = max(1, len(rest) // 5)
        for i in list(rest[::step])[:5] + [count - 1]:
            if _extract(pdf, i).frags:
                return
    if any(p.frags for p in ahead):
        return
    raise Unreadable("scanned PDF", "no text layer; OCR is not included: run OCR first (e.g. ocrmypdf) and "
                                    "ingest the result")


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


def _learn(ahead: list[_Page]) -> _Style:
    """The body's font size (the size most characters have), the heading sizes (notably larger),
    and the running header and footer lines: in the top or bottom band, the same text with digits
    masked on at least 40% of the pages read ahead (and 3), not set larger than the body."""
    style = _Style()
    texted = [p for p in ahead if p.frags]
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
