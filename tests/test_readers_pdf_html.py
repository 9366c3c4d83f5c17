"""The PDF, HTML and EPUB readers on documents made here: reading order across two columns,
tables as rows, hyphens undone, running headers and footers dropped, headings from font size;
main content of a web page; an EPUB's chapters in spine order; and every bad file (encrypted,
scanned, truncated, lying about its format, a zip bomb) an `Unreadable` of the right kind."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

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
                _justified(c, 72, top - 13 * k, a)
                c.drawString(width / 2 + 10, top - 13 * k, b)
        else:
            for k, a in enumerate(LEFT):
                _justified(c, 72, top - 13 * k, a)
            for k, b in enumerate(RIGHT):
                c.drawString(width / 2 + 10, top - 13 * k, b)
        if page == 1:
            c.setFont("Helvetica-Bold", 14)  # a heading under both columns, not crossing the gutter
            c.drawString(72, top - 75, "Totals")
            c.setFont("Helvetica", 10)
            y = top - 100
            for row in TABLE:
                for x, cell in zip((72, 250, 400), row, strict=True):
                    c.drawString(x, y, cell)
                y -= 14
        c.showPage()
    c.save()
    return path


def _justified(c: Any, x: float, y: float, line: str) -> None:
    """The third line of the left column drawn as two runs with a wide space between (as a
    justified line often is): still one line of text, not a table row."""
    if line != LEFT[2]:
        c.drawString(x, y, line)
        return
    first, rest = line.split(" must ")
    c.drawString(x, y, first + " must")
    c.drawString(x + c.stringWidth(first + " must", "Helvetica", 10) + 14, y, rest)


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
    assert [(s.kind, s.level, s.text) for s in page1 if s.kind == "heading"] == [
        ("heading", 1, HEADINGS[0]), ("heading", 2, "Totals")]
    assert [s.kind for s in page1] == ["heading", "text", "heading", "table"]
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
    headings = [(s.text, s.where["page"]) for s in sections if s.kind == "heading" and s.level == 1]
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
    ("e.g. --", "inspect=9222", "e.g. --inspect=9222"), ("than -", "-dns-order", "than --dns-order"),
    ("write(\"sha256-", "\");", "write(\"sha256-\");"), ("well-", "(known)", "well- (known)"),
    ("URL 'https://a.example.com/h?", "query=1#hash'", "URL 'https://a.example.com/h?query=1#hash'"),
    ("new URL('https://x.org/?a=1&", "b=2')", "new URL('https://x.org/?a=1&b=2')"),
    ("Did it work?", "yes", "Did it work? yes"),
    ("see https://x.org/a?", "Then", "see https://x.org/a? Then"),
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
    # Only an owner password (copy and print restrictions): no password to open, so it is read.
    from reportlab.lib.pdfencrypt import StandardEncryption

    owner = tmp_path / "owner.pdf"
    c = canvas.Canvas(str(owner), encrypt=StandardEncryption("", ownerPassword="owner", canCopy=0))
    c.drawString(72, 700, "restricted but readable")
    c.showPage()
    c.save()
    assert [s.text for s in _sections(owner)] == ["restricted but readable"]


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
    """`read` looks at the first pages only (LOOKAHEAD of them); the rest are loaded as sections are
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
    assert loaded == list(range(pdf_reader.LOOKAHEAD))
    taken = [next(reading.sections) for _ in range(pdf_reader.LOOKAHEAD + 2)]
    # A page's last section waits for the next page (a word hyphenated across the break).
    assert loaded == list(range(pdf_reader.LOOKAHEAD + 3))
    assert [s.where["page"] for s in taken] == list(range(1, pdf_reader.LOOKAHEAD + 3))
    rest = list(reading.sections)
    assert [s.text for s in rest][-1] == "page 30 says hello" and loaded == list(range(30))


# --- HTML ---------------------------------------------------------------------------------------------

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="windows-1252"><title>Situate guide</title>
<style>body { color: red }</style><script>var x = "<p>not text</p>";</script></head>
<body>
<header class="site-header"><a href="/">Home</a><nav><ul><li><a href="/a">About</a></li></ul></nav></header>
<div id="cookie-consent">We use cookies. <button>Accept</button></div>
<div class="breadcrumbs">Home &gt; Docs &gt; Guide</div>
<main>
<h1>Installing situate</h1>
<p>Situate   reads
   documents offline.  It costs 5 \u20ac per run.</p>
<p>Second<br>line after a break.</p>
<h2>Requirements</h2>
<ul><li>Python 3.11</li><li>Milvus <b>Lite</b><ul><li>or a server</li></ul></li></ul>
<pre><code>def main():
    if ready:
        run()
</code></pre>
<h3>Versions</h3>
<table><tr><th>Name</th><th>Version</th></tr><tr><td>lxml</td><td>6.1</td></tr>
<tr><td>pdfium</td><td> 159 </td></tr></table>
<div class="share-buttons">Share on X</div>
<aside>Related posts</aside>
<h2>Running</h2>
<p>Run it with <code>situate ingest</code> and wait.</p>
<noscript>Enable JavaScript</noscript>
</main>
<footer>Copyright 2024</footer>
<script>console.log("x")</script>
</body></html>
"""


def test_html_main_content_headings_code_table(tmp_path: Path) -> None:
    path = tmp_path / "guide.html"
    path.write_bytes(PAGE.encode("cp1252"))
    reading = read_document(path, max_bytes=LIMIT)
    assert (reading.format, reading.title) == ("html", "Situate guide")
    got = [(s.kind, s.level, s.text, s.where) for s in reading.sections]
    install = ["Installing situate"]
    need = install + ["Requirements"]
    versions = need + ["Versions"]
    assert got == [
        ("heading", 1, "Installing situate", {"heading_path": install}),
        ("text", 0, "Situate reads\ndocuments offline. It costs 5 \u20ac per run.\n\n"
                    "Second\nline after a break.", {"heading_path": install}),
        ("heading", 2, "Requirements", {"heading_path": need}),
        ("text", 0, "- Python 3.11\n- Milvus Lite\n  - or a server", {"heading_path": need}),
        ("code", 0, "def main():\n    if ready:\n        run()", {"heading_path": need}),
        ("heading", 3, "Versions", {"heading_path": versions}),
        ("table", 0, "Name | Version\nlxml | 6.1\npdfium | 159", {"heading_path": versions}),
        ("heading", 2, "Running", {"heading_path": install + ["Running"]}),
        ("text", 0, "Run it with `situate ingest` and wait.", {"heading_path": install + ["Running"]}),
    ]


def test_html_without_main_takes_the_text_and_keeps_wrapped_pages(tmp_path: Path) -> None:
    """No <main> or <article>: the element holding most of the text, furniture dropped; a
    wrapper whose class says "sidebar" but holds the whole page is not dropped with it."""
    page = """<html><body><div class="page has-sidebar">
    <div class="menu"><a>One</a> <a>Two</a> <a>Three</a></div>
    <div id="content"><h1>Notes on chunking</h1><p>Chunks follow the structure of the document.</p>
    <ol><li>cut at headings</li><li>then at paragraphs</li></ol></div>
    <div class="social-links">Follow us</div><div class="sphinxsidebar">Quick search</div>
    <div role="contentinfo">Contact</div><div hidden>secret</div>
    </div></body></html>"""
    path = tmp_path / "notes.htm"
    path.write_text(page, encoding="utf-8")
    reading = read_document(path, max_bytes=LIMIT)
    assert reading.title == "Notes on chunking"
    got = [(s.kind, s.text) for s in reading.sections]
    assert got == [("heading", "Notes on chunking"),
                   ("text", "Chunks follow the structure of the document.\n\n"
                            "1. cut at headings\n2. then at paragraphs")]


def test_html_encodings(tmp_path: Path) -> None:
    path = tmp_path / "utf16.html"
    page = "<html><body><p>na\u00efve caf\u00e9 \u2014 \u65e5\u672c</p></body></html>"
    path.write_bytes(page.encode("utf-16"))
    assert [s.text for s in _sections(path)] == ["na\u00efve caf\u00e9 \u2014 \u65e5\u672c"]
    path = tmp_path / "broken.html"
    path.write_bytes(b"<html><body><p>caf\xc3\xa9 and a stray \xff byte</p></body></html>")
    assert [s.text for s in _sections(path)] == ["caf\u00e9 and a stray \ufffd byte"]
    path = tmp_path / "declared.xhtml"
    path.write_bytes(b'<?xml version="1.0" encoding="iso-8859-1"?><html xmlns="http://www.w3.org/1999/xhtml">'
                     b"<body><p>gar\xe7on</p></body></html>")
    assert [s.text for s in _sections(path)] == ["gar\u00e7on"]


def test_html_not_html(tmp_path: Path) -> None:
    binary = tmp_path / "image.html"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    plain = tmp_path / "plain.html"
    plain.write_text("just words, no markup at all\n")
    for path in (binary, plain):
        with pytest.raises(Unreadable) as e:
            read_document(path, max_bytes=LIMIT)
        assert e.value.kind == "not HTML"


# --- EPUB ---------------------------------------------------------------------------------------------

CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""

OPF = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>The Retrieval Book</dc:title></metadata>
<manifest>
<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
<item id="a" href="text/a_second.xhtml" media-type="application/xhtml+xml"/>
<item id="b" href="text/b%20first.xhtml" media-type="application/xhtml+xml"/>
<item id="css" href="style.css" media-type="text/css"/>
</manifest>
<spine><itemref idref="nav"/><itemref idref="b"/><itemref idref="a"/></spine>
</package>"""

NAV = """<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title></head>
<body><nav epub:type="toc"><ol><li><a href="text/b%20first.xhtml">Beginnings</a></li>
<li><a href="text/a_second.xhtml#top">Endings</a></li></ol></nav></body></html>"""


def _chapter(heading: str, body: str) -> str:
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
            f"<title>{heading}</title></head><body><h1>{heading}</h1><p>{body}</p><p>Second "
            f"<a id='x'/>paragraph<br/>of {heading.lower()}.</p></body></html>")


def _epub(path: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        zf.writestr("META-INF/container.xml", CONTAINER)
        zf.writestr("OEBPS/content.opf", OPF)
        zf.writestr("OEBPS/nav.xhtml", NAV)
        zf.writestr("OEBPS/text/b first.xhtml", _chapter("Chapter One", "It begins."))
        zf.writestr("OEBPS/text/a_second.xhtml", _chapter("Chapter Two", "It ends."))
        zf.writestr("OEBPS/style.css", "p { margin: 0 }")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


def test_epub_chapters_in_spine_order(tmp_path: Path) -> None:
    reading = read_document(_epub(tmp_path / "book.epub"), max_bytes=LIMIT)
    assert (reading.format, reading.title, reading.unit) == ("epub", "The Retrieval Book", "chapters")
    got = [(s.kind, s.text, s.where) for s in reading.sections]
    one = {"chapter": 1, "chapter_title": "Beginnings"}
    two = {"chapter": 2, "chapter_title": "Endings"}
    assert got == [
        ("heading", "Chapter One", {**one, "heading_path": ["Chapter One"]}),
        ("text", "It begins.\n\nSecond paragraph\nof chapter one.", {**one, "heading_path": ["Chapter One"]}),
        ("heading", "Chapter Two", {**two, "heading_path": ["Chapter Two"]}),
        ("text", "It ends.\n\nSecond paragraph\nof chapter two.", {**two, "heading_path": ["Chapter Two"]}),
    ]
    assert reading.units == 2  # the navigation document (only a <nav>) is no chapter


def test_epub_drm_and_font_obfuscation(tmp_path: Path) -> None:
    def encryption(algorithm: str, uri: str) -> bytes:
        return (f'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                f'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
                f'<enc:EncryptionMethod Algorithm="{algorithm}"/><enc:CipherData>'
                f'<enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData>'
                f'</encryption>').encode()

    drm = _epub(tmp_path / "drm.epub", {"META-INF/encryption.xml": encryption(
        "http://www.w3.org/2001/04/xmlenc#aes128-cbc", "OEBPS/text/a_second.xhtml")})
    with pytest.raises(Unreadable) as e:
        read_document(drm, max_bytes=LIMIT)
    assert e.value.kind == "encrypted EPUB"
    fonts = _epub(tmp_path / "fonts.epub", {"META-INF/encryption.xml": encryption(
        "http://www.idpf.org/2008/embedding", "OEBPS/fonts/serif.otf")})
    assert len(_sections(fonts)) == 4


def test_epub_bomb_corrupt_and_not_a_zip(tmp_path: Path) -> None:
    bomb = _epub(tmp_path / "bomb.epub", {"OEBPS/text/zeros.xhtml": b"\0" * (4 << 20)})
    with pytest.raises(Unreadable) as e:
        read_document(bomb, max_bytes=LIMIT)
    assert e.value.kind == "zip bomb"
    with pytest.raises(Unreadable) as e:  # over the limit in all, whatever the ratio
        read_document(_epub(tmp_path / "book.epub"), max_bytes=1000)
    assert e.value.kind == "zip bomb"
    whole = _epub(tmp_path / "whole.epub").read_bytes()
    cut = tmp_path / "cut.epub"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(Unreadable) as e:
        read_document(cut, max_bytes=LIMIT)
    assert e.value.kind == "corrupt EPUB"
    text = tmp_path / "text.epub"
    text.write_text("not a book")
    with pytest.raises(Unreadable) as e:
        read_document(text, max_bytes=LIMIT)
    assert e.value.kind == "not an EPUB"
    nospine = tmp_path / "nospine.epub"
    with zipfile.ZipFile(nospine, "w") as zf:
        zf.writestr("META-INF/container.xml", CONTAINER)
        zf.writestr("OEBPS/content.opf", OPF.replace("<itemref", "<nothing"))
    with pytest.raises(Unreadable) as e:
        read_document(nospine, max_bytes=LIMIT)
    assert e.value.kind == "corrupt EPUB"


def test_pdf_word_across_pages_and_short_last_column(tmp_path: Path) -> None:
    """A word hyphenated at a page's end is joined at the next page; a last page whose second
    column holds one line still reads column by column."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    width, height = A4
    path = tmp_path / "pages.pdf"
    c = canvas.Canvas(str(path), pagesize=A4)
    c.setFont("Helvetica", 10)
    c.drawString(72, 120, "The first page ends in the middle of the word")
    c.drawString(72, 107, "contextual retrie-")
    c.showPage()
    c.setFont("Helvetica", 10)
    c.drawString(72, 760, "val, which the reader puts back together.")
    left = [f"left column line number {k} of the closing page" for k in range(6)]
    for k, line in enumerate(left):
        c.drawString(72, 700 - 13 * k, line)
    c.drawString(width / 2 + 10, 700, "Right column holds only this line.")
    c.showPage()
    c.save()
    sections = _sections(path)
    assert [(s.where["page"], s.text) for s in sections] == [
        (1, "The first page ends in the middle of the word contextual"),
        (2, "retrieval, which the reader puts back together.\n\n" + " ".join(left)
         + "\n\nRight column holds only this line."),
    ]


def test_epub2_titles_from_ncx(tmp_path: Path) -> None:
    opf = OPF.replace('<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>',
                      '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')
    opf = opf.replace('<spine><itemref idref="nav"/>', '<spine toc="ncx">')
    ncx = ('<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"><navMap>'
           '<navPoint id="p1"><navLabel><text>From the NCX</text></navLabel>'
           '<content src="text/a_second.xhtml"/></navPoint></navMap></ncx>')
    path = tmp_path / "old.epub"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("META-INF/container.xml", CONTAINER)
        zf.writestr("OEBPS/content.opf", opf)
        zf.writestr("OEBPS/toc.ncx", ncx)
        zf.writestr("OEBPS/text/b first.xhtml", _chapter("Chapter One", "It begins."))
        zf.writestr("OEBPS/text/a_second.xhtml", _chapter("Chapter Two", "It ends."))
    titles = [(s.where["chapter"], s.where["chapter_title"]) for s in _sections(path) if s.kind == "heading"]
    # Chapter one is not in the NCX: its title is its first heading.
    assert titles == [(1, "Chapter One"), (2, "From the NCX")]


def test_pdf_numbered_heading_bullets_and_numeric_table(tmp_path: Path) -> None:
    """A heading whose number is a separate run ("2   Results"), a bulleted list whose bullets
    are separate runs (a list, not a table) and a table whose first column is numbers."""
    from reportlab.pdfgen import canvas

    path = tmp_path / "mixed.pdf"
    c = canvas.Canvas(str(path))
    c.setFont("Helvetica-Bold", 16)
    c.drawString(72, 740, "2")
    c.drawString(100, 740, "Results")
    c.setFont("Helvetica", 10)
    c.drawString(72, 715, "The scores by year were as follows, with two remarks below them.")
    rows = [("Year", "Dense", "Hybrid"), ("2021", "4.5", "3.2"), ("2022", "5.25", "3.75")]
    for k, row in enumerate(rows):
        for x, cell in zip((72, 200, 300), row, strict=True):
            c.drawString(x, 690 - 14 * k, cell)
    for k, item in enumerate(["hybrid search wins every year", "dense search improves the most"]):
        c.drawString(80, 630 - 14 * k, "\u2022")
        c.drawString(95, 630 - 14 * k, item)
    c.showPage()
    c.save()
    got = [(s.kind, s.text) for s in _sections(path)]
    assert got == [
        ("heading", "2 Results"),
        ("text", "The scores by year were as follows, with two remarks below them."),
        ("table", "Year | Dense | Hybrid\n2021 | 4.5 | 3.2\n2022 | 5.25 | 3.75"),
        ("text", "\u2022 hybrid search wins every year\n\n\u2022 dense search improves the most"),
    ]


def test_pdf_inline_code_drawn_in_pieces(tmp_path: Path) -> None:
    """Inline code as a browser prints it: a smaller font, each piece its own text object
    ("NODE", "_", "MODULE"). The underscore's box is a sliver under the baseline, and a line
    that starts and ends with code is still body text: the words stay whole ("NODE_MODULE",
    "--inspect") and the sentence stays one paragraph (it did not: "NODE _ MODULE", a stray "_"
    on the next line, a paragraph break before "suffix")."""
    import reportlab
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(TTFont("Vera", str(Path(reportlab.__file__).parent / "fonts" / "Vera.ttf")))
    prose, code = ("Vera", 12.0), ("Vera", 10.2)
    path = tmp_path / "addons.pdf"
    c = canvas.Canvas(str(path), pagesize=A4)

    def runs(y: float, parts: list[tuple[tuple[str, float], str]]) -> None:
        x = 72.0
        for (font, size), text in parts:
            c.setFont(font, size)
            c.drawString(x, y, text)
            x += c.stringWidth(text, font, size)

    runs(700, [(prose, "There is no semi-colon after "), (code, "NODE"), (code, "_"), (code, "MODULE"),
               (prose, " as it is not a function, and the")])
    runs(685, [(code, "module"), (code, "_"), (code, "name"),
               (prose, " must match the file name of the binary, without the "), (code, ".node")])
    runs(670, [(prose, "suffix. Start it with "), (code, "-"), (code, "-inspect"), (prose, " to debug it.")])
    c.showPage()
    c.save()
    [section] = _sections(path)
    assert section.text == ("There is no semi-colon after NODE_MODULE as it is not a function, and the "
                            "module_name must match the file name of the binary, without the .node "
                            "suffix. Start it with --inspect to debug it.")


# A browser's print of prose with inline code, laid out here word by word: (code?, text) runs.
FLOWED = [
    [(False, "A sentence that wraps keeps its printed lines at one pitch, and a browser may start a"
             " line with inline code such as"),
     (True, "process.getActiveResourcesInfo()"), (False, "or"), (True, "require('node:async_hooks')"),
     (False, "set smaller than the prose, which goes on in the same sentence to its end. A second"
             " sentence ends the paragraph, after a few more words to fill its line and the next.")],
    [(False, "The next paragraph starts near the bottom of the first page and runs over the page break,"
             " so that its first sentence begins on one page and ends on the next one, where the reader"
             " must still find it whole. Its last sentence is on the second page.")],
    [(False, "A third paragraph on the second page says that"), (True, "--max-old-space-size"),
     (False, "and"), (True, "NODE_OPTIONS"),
     (False, "are options, and it goes on for a while so that the page has lines enough to show its"
             " pitch. It ends here.")],
    [(False, "A last paragraph closes the document with two sentences of plain prose. Nothing in it"
             " is code.")],
]


def _flowed(path: Path, paragraphs: list[list[tuple[bool, str]]], *, width: float = 380,
            height: float = 235) -> Path:
    """The paragraphs set as a browser prints them: Vera 12 pt prose with inline code in 10.2 pt,
    each line filled with words while they fit (the next line 18 pt lower, the next paragraph 30),
    on pages `height` high with a 40 pt margin, a paragraph going on at the next page's top."""
    import reportlab
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(TTFont("Vera", str(Path(reportlab.__file__).parent / "fonts" / "Vera.ttf")))
    fonts = {False: ("Vera", 12.0), True: ("Vera", 10.2)}
    c = canvas.Canvas(str(path), pagesize=(width + 80, height))
    y = height - 40

    def draw(line: list[tuple[bool, str]]) -> None:
        nonlocal y
        if y < 40:
            c.showPage()
            y = height - 40
        x = 40.0
        for code, text in line:
            c.setFont(*fonts[code])
            c.drawString(x, y, text)
            x += c.stringWidth(text, *fonts[code])
        y -= 18

    for paragraph in paragraphs:
        line: list[tuple[bool, str]] = []
        used = 0.0
        for code, text in paragraph:
            for word in text.split():
                gap = c.stringWidth(" ", *fonts[False]) if line else 0.0
                w = c.stringWidth(word, *fonts[code])
                if line and used + gap + w > width:
                    draw(line)
                    line, used, gap = [], 0.0, 0.0
                if gap:
                    line.append((False, " "))
                line.append((code, word))
                used += gap + w
        draw(line)
        y -= 12
    c.showPage()
    c.save()
    return path


def test_pdf_sentence_wrapped_across_lines_and_pages_in_one_chunk(tmp_path: Path) -> None:
    """A paragraph's printed lines are one paragraph of text even where a line starts with inline
    code set smaller (once a paragraph break: a size change) and where the paragraph runs over a
    page break (once two sections, the chunker cutting at the page edge inside a sentence): every
    sentence is in one chunk, and the paragraph is on the page it starts on."""
    from situate.tasks.corpus.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
    from situate.tasks.corpus.coverage import plain_sentences, sentence_coverage
    from situate.tasks.corpus.sections import chunk_sections

    path = _flowed(tmp_path / "flowed.pdf", FLOWED)
    sections = _sections(path)
    plain = [" ".join(text for _, text in paragraph) for paragraph in FLOWED]
    assert [(s.where["page"], s.text) for s in sections] == [
        (1, "\n\n".join(plain[:2])), (2, "\n\n".join(plain[2:]))]
    sentences = plain_sentences("\n".join(plain))
    assert len(sentences) == 7
    _, pieces = chunk_sections(sections, DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP)
    assert len(pieces) > 1
    got = sentence_coverage(sentences, [p.text for p in pieces])
    assert got.missing == []
