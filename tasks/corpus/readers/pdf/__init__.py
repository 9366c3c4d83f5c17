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
(a few pages read ahead, kept in memory as extracted text only) and dropped on every page, and lines set
notably larger than the body text are headings. Either way, chunks get a heading path. The
document is opened once and each page is loaded, read and closed before the next, so a 2,000-page
PDF is held one page at a time.

The package: `pdfium` (what PDFium gives of a page), `furniture` (what the first pages teach:
headers, footers, font sizes), `layout` (lines and columns), `paragraphs` (lines into sections);
here, the document read page by page.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from situate.core.settings import Settings
from situate.tasks.corpus.readers.base import FileReader, Limits, Reading, Section, Unreadable
from situate.tasks.corpus.readers.pdf.furniture import _learn, _refuse_scan, _Style
from situate.tasks.corpus.readers.pdf.paragraphs import (
    _OPEN_END,
    _SENTENCE_END,
    HYPHENS,
    _End,
    _join,
    _page_sections,
)
from situate.tasks.corpus.readers.pdf.pdfium import (
    _FPDF_ERR_PASSWORD,
    _FPDF_ERR_SECURITY,
    _extract,
    _Page,
    _title,
)

# more is refused unread (SITUATE_MAX_PDF_PAGES): a page tree can repeat pages
MAX_PAGES: int = Settings.model_fields["max_pdf_pages"].default


LOOKAHEAD = 8  # pages read ahead to learn headers, footers and the body's font size


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
        ahead = [_extract(pdf, i) for i in range(min(LOOKAHEAD, count))]
        _refuse_scan(pdf, ahead, count)
        style = _learn(ahead)
    except BaseException:
        pdf.close()
        raise
    return Reading(format=fmt, sections=_sections(pdf, ahead, count, style), title=title,
                   unit="pages", units=count)


def _sections(pdf: Any, ahead: list[_Page], count: int, style: _Style) -> Iterator[Section]:
    """Every page's sections: the pages read ahead first (already read), then each further page
    loaded, read and closed in turn. Closes the document at the end."""
    held: Section | None = None  # a page's last section, held until the next page's first is known
    end: _End | None = None  # how the held section's last line ends
    absorbed = False  # whether the held section took in the whole of the next page already
    try:
        for i in range(count):
            page = ahead.pop(0) if ahead else _extract(pdf, i)
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


def _read(path: Path, fmt: str, limits: Limits) -> Reading:
    return read(path, fmt=fmt, max_bytes=limits.max_bytes, max_pages=limits.max_pages)


READERS = (FileReader("pdf", "PDF", (".pdf",), _read),)
