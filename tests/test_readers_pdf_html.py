"""The PDF, HTML and EPUB readers on documents made here: reading order across two columns,
tables as rows, hyphens undone, running headers and footers dropped, headings from font size;
main content of a web page; an EPUB's chapters in spine order; and every bad file (encrypted,
scanned, truncated, lying about its format, a zip bomb) an `Unreadable` of the right kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from situate.tasks.corpus.readers import Section, Unreadable, read_document
from situate.tasks.corpus.readers import pdf as pdf_reader

LIMIT = 50 * 1024 * 1024

# --- PDF fixtures ------------------------------------------------------------------------------------

HEADER = "ACME Quarterly Report - Confidential"
LEFT = ["Alpha one begins the left column and", "continues with a hyphenated retrie-",
        "val word that must be joined back", "together by the reader. End of left."]
RIGHT = ["Beta two starts the right column and", "mentions the long Franco-",
         "Prussian war that keeps its hyphen", "in the text. End of right column."]
TABLE = [("Name", "Qty", "Price"), ("Apple", "3", "1.20"), ("Banana split", "12", "0.50")]
HEADINGS = ["Retrieval results", "Methods used", "Error analysis", "Further work"]


def _report(path: Path, *, interleave: bool = True) -> Path:
    """Four A4 pages: a running header and a "Page n of 4" footer, an 18 pt heading, two columns
    of 10 pt text (drawn line by line across both columns when `interleave`, so content order is
    not reading order) and, on page 1, a three-column table under them."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    width, height = A4
    c = canvas.Canvas(str(path), pagesize=A4)
    c.setTitle("Quarterly Retrieval Report")
    for page, heading in enumerate(HEADINGS, 1):
        c.setFont("Helvetica", 9)
        c.drawString(72, height - 40, HEADER)
        c.drawString(width / 2 - 20, 30, f"Page {page} of {len(HEADINGS)}")
        c.setFont("Helvetica-Bold", 18)
        c.drawString(72, height - 90, heading)
        c.setFont("Helvetica", 10)
        top = height - 130
        if interleave:
            for k, (a, b) in enumerate(zip(LEFT, RIGHT, strict=True)):
                c.drawString(72, top - 13 * k, a)
                c.drawString(width / 2 + 10, top - 13 * k, b)
        else:
            for k, a in enumerate(LEFT):
                c.drawString(72, top - 13 * k, a)
            for k, b in enumerate(RIGHT):
                c.drawString(width / 2 + 10, top - 13 * k, b)
        if page == 1:
            y = top - 100
            for row in TABLE:
                for x, cell in zip((72, 250, 400), row, strict=True):
                    c.drawString(x, y, cell)
                y -= 14
        c.showPage()
    c.save()
    return path


def _sections(path: Path) -> list[Section]:
    return list(read_document(path, max_bytes=LIMIT).sections)


@pytest.mark.parametrize("interleave", [True, False])
def test_pdf_two_columns_table_hyphens_headers(tmp_path: Path, interleave: bool) -> None:
    path = _report(tmp_path / "report.pdf", interleave=interleave)
    reading = read_document(path, max_bytes=LIMIT)
    assert (reading.format, reading.unit, reading.units) == ("pdf", "pages", 4)
    assert reading.title == "Quarterly Retrieval Report"
    sections = list(reading.sections)
    assert [s.where["page"] for s in sections] == sorted(s.where["page"] for s in sections)
    assert {s.where["page"] for s in sections} == {1, 2, 3, 4}
    everything = "\n".join(s.text for s in sections)
    # The running header and the footer with its page number are gone from every page.
    assert "ACME" not in everything and "Page 1 of 4" not in everything and "of 4" not in everything
    page1 = [s for s in sections if s.where["page"] == 1]
    assert [(s.kind, s.level, s.text) for s in page1 if s.kind == "heading"] == [("heading", 1, HEADINGS[0])]
    text = next(s.text for s in page1 if s.kind == "text")
    left = ("Alpha one begins the left column and continues with a hyphenated retrieval word that must "
            "be joined back together by the reader. End of left.")
    right = ("Beta two starts the right column and mentions the long Franco-Prussian war that keeps its "
             "hyphen in the text. End of right column.")
    # Column 1 whole, then column 2 (no interleaved lines), hyphenation undone but compounds kept.
    assert text == left + "\n\n" + right
    table = [s for s in page1 if s.kind == "table"]
    assert [s.text for s in table] == ["\n".join(" | ".join(row) for row in TABLE)]
    assert table[0].where == {"page": 1}
    # Every page's heading, in order, each at its page.
    headings = [(s.text, s.where["page"]) for s in sections if s.kind == "heading"]
    assert headings == [(h, k) for k, h in enumerate(HEADINGS, 1)]


def test_pdf_heading_size_through_text_matrix(tmp_path: Path) -> None:
    """A heading drawn in 1 pt text scaled 20x by the text matrix is still a heading; a second,
    smaller heading size is level 2."""
    from reportlab.pdfgen import canvas

    path = tmp_path / "matrix.pdf"
    c = canvas.Canvas(str(path))
    for page in range(3):
        t = c.beginText()
        t.setFont("Helvetica", 1)
        t.setTextTransform(20, 0, 0, 20, 72, 760)
        t.textOut(f"Chapter number {page + 1}")
        c.drawText(t)
        c.setFont("Helvetica-Bold", 14)
        c.drawString(72, 720, "A smaller section")
        c.setFont("Helvetica", 10)
        for k in range(12):
            c.drawString(72, 700 - 12 * k, f"Body line {k} of the text on this page, in ten point type.")
        c.showPage()
    c.save()
    sections = _sections(path)
    heads = [(s.level, s.text) for s in sections if s.kind == "heading"]
    assert heads[:2] == [(1, "Chapter number 1"), (2, "A smaller section")]
    assert len(heads) == 6
    body = [s for s in sections if s.kind == "text"]
    assert body[0].text.startswith("Body line 0 of the text")


def test_pdf_soft_hyphen_and_digits(tmp_path: Path) -> None:
    from reportlab.pdfgen import canvas

    path = tmp_path / "soft.pdf"
    c = canvas.Canvas(str(path))
    c.setFont("Helvetica", 11)
    lines = ["The contextual retrie\u00ad", "val pipeline reads docu-", "ments, keeps the Franco-",
             "Prussian war, and counts 2020-", "2021 as years."]
    for k, line in enumerate(lines):
        c.drawString(72, 700 - 14 * k, line)
    c.showPage()
    c.save()
    assert [s.text for s in _sections(path)] == [
        "The contextual retrieval pipeline reads documents, keeps the Franco-Prussian war, and counts "
        "2020-2021 as years."]


@pytest.mark.parametrize(("a", "b", "joined"), [
    ("retrie-", "val", "retrieval"), ("retrie\u2010", "val", "retrieval"),
    ("retrie\u00ad", "Val", "retrieVal"),
    ("Franco\u2010", "Prussian", "Franco\u2010Prussian"), ("covid-", "19", "covid-19"),
    ("end.", "next", "end. next"), ("a -", "b", "a - b"),
])
def test_pdf_line_join(a: str, b: str, joined: str) -> None:
    assert pdf_reader._join(a, b) == joined


def test_pdf_image_only_is_scanned(tmp_path: Path) -> None:
    from PIL import Image
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    img = Image.new("L", (120, 60), 255)
    img.paste(0, (20, 20, 100, 40))
    path = tmp_path / "scan.pdf"
    c = canvas.Canvas(str(path))
    for _ in range(3):
        c.drawImage(ImageReader(img), 72, 500, 400, 200)
        c.showPage()
    c.save()
    with pytest.raises(Unreadable) as e:
        read_document(path, max_bytes=LIMIT)
    assert e.value.kind == "scanned PDF" and "ocrmypdf" in e.value.detail


def test_pdf_blank_pages_are_not_a_scan(tmp_path: Path) -> None:
    from reportlab.pdfgen import canvas

    path = tmp_path / "blank.pdf"
    c = canvas.Canvas(str(path))
    for _ in range(6):
        c.showPage()
    c.drawString(72, 700, "text after six blank pages")
    c.showPage()
    c.save()
    assert [(s.text, s.where) for s in _sections(path)] == [("text after six blank pages", {"page": 7})]


def test_pdf_encrypted(tmp_path: Path) -> None:
    from reportlab.pdfgen import canvas

    path = tmp_path / "secret.pdf"
    c = canvas.Canvas(str(path), encrypt="pw")
    c.drawString(72, 700, "secret")
    c.showPage()
    c.save()
    with pytest.raises(Unreadable) as e:
        read_document(path, max_bytes=LIMIT)
    assert e.value.kind == "encrypted PDF" and "qpdf --decrypt" in e.value.detail


def test_pdf_truncated_and_not_a_pdf(tmp_path: Path) -> None:
    whole = _report(tmp_path / "whole.pdf").read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(Unreadable) as e:
        read_document(cut, max_bytes=LIMIT)
    assert e.value.kind == "corrupt PDF"
    text = tmp_path / "notes.pdf"
    text.write_text("these are notes, not a PDF\n")
    with pytest.raises(Unreadable) as e:
        read_document(text, max_bytes=LIMIT)
    assert e.value.kind == "not a PDF" and "not a PDF" in e.value.detail


def test_pdf_pages_read_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`read` looks at the first pages only (the window); the rest are loaded as sections are
    taken, one page each, and none is kept."""
    from reportlab.pdfgen import canvas

    path = tmp_path / "long.pdf"
    c = canvas.Canvas(str(path))
    for page in range(30):
        c.drawString(72, 700, f"page {page + 1} says hello")
        c.showPage()
    c.save()
    loaded: list[int] = []
    real = pdf_reader._extract
    monkeypatch.setattr(pdf_reader, "_extract", lambda pdf, i: (loaded.append(i), real(pdf, i))[1])
    reading = pdf_reader.read(path, max_bytes=LIMIT)
    assert loaded == list(range(pdf_reader.WINDOW))
    taken = [next(reading.sections) for _ in range(pdf_reader.WINDOW + 2)]
    assert loaded == list(range(pdf_reader.WINDOW + 2))
    assert [s.where["page"] for s in taken] == list(range(1, pdf_reader.WINDOW + 3))
    rest = list(reading.sections)
    assert [s.text for s in rest][-1] == "page 30 says hello" and loaded == list(range(30))
