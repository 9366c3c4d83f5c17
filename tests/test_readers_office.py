"""The DOCX, PPTX, XLSX and notebook readers and the zip guard, on files made here: what text and
places they give, and which `Unreadable` each bad file becomes (never another exception, also
midway through the lazy sections)."""

from __future__ import annotations

import datetime as dt
import json
import os
import struct
import zipfile
from pathlib import Path

import pytest

from situate.tasks.corpus.readers import read_document
from situate.tasks.corpus.readers.base import Reading, Section, Unreadable
from situate.tasks.corpus.readers.office import format_cell
from situate.tasks.corpus.readers.zipguard import check_zip, open_zip, read_member
from situate.tasks.corpus.sections import chunk_sections

LIMIT = 200_000_000  # the default SITUATE_MAX_DOCUMENT_BYTES

PNG_B64 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5Er"
           "kJggg==")


def sections(reading: Reading) -> list[Section]:
    return list(reading.sections)


def refused(path: Path, max_bytes: int = LIMIT) -> Unreadable:
    """The `Unreadable` reading `path` ends in, whether at opening or while its sections stream."""
    with pytest.raises(Unreadable) as caught:
        list(read_document(path, max_bytes=max_bytes).sections)
    return caught.value


# --- fixtures ----------------------------------------------------------------------------------

def make_docx(path: Path) -> Path:
    import docx

    d = docx.Document()
    d.add_paragraph("Refund handbook", style="Title")
    d.add_paragraph("Before any heading.")
    d.add_heading("Refund policy", 1)
    d.add_paragraph("Refunds are paid within 14 days.")
    d.add_heading("Eligibility", 2)
    d.add_paragraph("Unused items", style="List Bullet")
    d.add_paragraph("with the receipt", style="List Bullet 2")
    table = d.add_table(rows=3, cols=3)
    for i, row in enumerate(table.rows):
        for j, cell in enumerate(row.cells):
            cell.text = f"r{i}c{j}"
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Plan"  # across two columns
    table.cell(1, 2).merge(table.cell(2, 2))  # down two rows
    d.add_paragraph("After the table.")
    d.add_heading("Costs", 1)
    d.add_paragraph("Shipping is not refunded.")
    d.save(str(path))
    return path


def make_pptx(path: Path) -> Path:
    import pptx
    from pptx.util import Inches

    prs = pptx.Presentation()
    one = prs.slides.add_slide(prs.slide_layouts[1])  # title and content
    one.shapes.title.text = "Roadmap"
    body = one.placeholders[1].text_frame
    body.text = "Ship the reader"
    sub = body.add_paragraph()
    sub.text = "then the chunker"
    sub.level = 1
    # Added in the wrong order: reading order is by position (left before right on one line).
    one.shapes.add_textbox(Inches(5), Inches(6), Inches(2), Inches(1)).text_frame.text = "right box"
    one.shapes.add_textbox(Inches(0.5), Inches(6), Inches(2), Inches(1)).text_frame.text = "left box"
    one.notes_slide.notes_text_frame.text = "Mention the deadline."
    two = prs.slides.add_slide(prs.slide_layouts[5])  # title only
    two.shapes.title.text = "Numbers"
    table = two.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(2)).table
    for i in range(3):
        for j in range(2):
            table.cell(i, j).text = f"{i}{j}"
    table.cell(0, 0).merge(table.cell(0, 1))
    table.cell(0, 0).text = "Quarter"
    group = two.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(5), Inches(1), Inches(1)).text_frame.text = "grouped note"
    prs.save(str(path))
    return path


def make_xlsx(path: Path, rows: int = 120) -> Path:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sales"
    ws.append(["Name", "Date", "Amount", None])
    for i in range(rows):
        ws.append([f"n{i}", dt.date(2024, 1, 1) + dt.timedelta(days=i), 4.0 if i == 0 else i * 1.5])
    ws.append([])  # an empty row, then one more after it
    ws.append(["total", None, 99.0])
    notes = wb.create_sheet("Notes")
    notes["B3"] = "hello"
    notes["A5"] = True
    notes["C5"] = dt.datetime(2024, 2, 3, 14, 30)
    secret = wb.create_sheet("Secret")
    secret.sheet_state = "hidden"
    secret["A1"] = "hidden lookup"
    wb.save(str(path))
    return path


def make_notebook(path: Path, nb: dict | None = None) -> Path:
    nb = nb or {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
        "cells": [
            {"cell_type": "markdown", "metadata": {},
             "source": ["# Churn analysis\n", "What drives churn.\n", "\n", "## Load\n",
                        "```python\n", "# a comment, not a heading\n", "```\n"]},
            {"cell_type": "code", "metadata": {}, "execution_count": 1,
             "source": ["import pandas as pd\n", "df = pd.read_csv('churn.csv')"],
             "outputs": [{"output_type": "display_data", "metadata": {},
                          "data": {"image/png": PNG_B64, "text/plain": ["<Figure size 640x480>"]}},
                         {"output_type": "stream", "name": "stdout", "text": ["loaded 10 rows\n"]}]},
            {"cell_type": "markdown", "metadata": {}, "attachments": {"a.png": {"image/png": PNG_B64}},
             "source": f'Pasted: <img src="data:image/png;base64,{PNG_B64}">'},
            {"cell_type": "code", "metadata": {}, "execution_count": None, "source": "", "outputs": []},
            {"cell_type": "raw", "metadata": {}, "source": "raw cell text"},
        ],
    }
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def ole_file(streams: list[str]) -> bytes:
    """A minimal OLE compound file (what Office writes for a password-protected document, with
    EncryptionInfo and EncryptedPackage streams; a legacy .doc has WordDocument): header, one FAT
    sector, one directory sector. Stream contents are not needed for what is tested."""
    header = bytearray(512)
    header[0:8] = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    struct.pack_into("<HHHHH", header, 0x18, 0x3E, 3, 0xFFFE, 9, 6)
    struct.pack_into("<IIIIIIIII", header, 0x28, 0, 1, 1, 0, 4096, 0xFFFFFFFE, 0, 0xFFFFFFFE, 0)
    struct.pack_into("<109I", header, 0x4C, 0, *([0xFFFFFFFF] * 108))
    fat = struct.pack("<128I", 0xFFFFFFFD, 0xFFFFFFFE, *([0xFFFFFFFF] * 126))
    directory = bytearray(512)
    for i, name in enumerate(["Root Entry", *streams][:4]):
        raw = name.encode("utf-16-le") + b"\0\0"
        directory[i * 128: i * 128 + len(raw)] = raw
        struct.pack_into("<HB", directory, i * 128 + 64, len(raw), 5 if i == 0 else 2)
    return bytes(header) + fat + bytes(directory)


def zeros_zip(path: Path, member: str, megabytes: int) -> Path:
    """A zip with one member of `megabytes` MiB of zeros, written streaming (the test never holds
    it; the file on disk is ~4.5 KB per MiB)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        with zf.open(member, "w", force_zip64=True) as m:
            chunk = bytes(1 << 20)
            for _ in range(megabytes):
                m.write(chunk)
    return path


# --- DOCX --------------------------------------------------------------------------------------

def test_docx_headings_lists_and_table_in_document_order(tmp_path):
    reading = read_document(make_docx(tmp_path / "handbook.docx"), max_bytes=LIMIT)
    assert (reading.format, reading.title, reading.unit) == ("docx", "Refund handbook", "")
    got = [(s.kind, s.level, s.text, s.where) for s in sections(reading)]
    assert got == [
        ("heading", 1, "Refund handbook", {"heading_path": ["Refund handbook"]}),
        ("text", 0, "Before any heading.", {"heading_path": ["Refund handbook"]}),
        ("heading", 1, "Refund policy", {"heading_path": ["Refund policy"]}),
        ("text", 0, "Refunds are paid within 14 days.", {"heading_path": ["Refund policy"]}),
        ("heading", 2, "Eligibility", {"heading_path": ["Refund policy", "Eligibility"]}),
        ("text", 0, "- Unused items\n  - with the receipt",
         {"heading_path": ["Refund policy", "Eligibility"]}),
        # merged across: once; merged down: its text once, an empty cell below it
        ("table", 0, "Plan | r0c2\nr1c0 | r1c1 | r1c2 r2c2\nr2c0 | r2c1",
         {"heading_path": ["Refund policy", "Eligibility"]}),
        ("text", 0, "After the table.", {"heading_path": ["Refund policy", "Eligibility"]}),
        ("heading", 1, "Costs", {"heading_path": ["Costs"]}),
        ("text", 0, "Shipping is not refunded.", {"heading_path": ["Costs"]}),
    ]


def test_docx_title_from_core_properties_else_first_heading(tmp_path):
    import docx

    d = docx.Document()
    d.core_properties.title = "From the properties"
    d.add_heading("A heading", 1)
    d.save(str(tmp_path / "a.docx"))
    assert read_document(tmp_path / "a.docx", max_bytes=LIMIT).title == "From the properties"
    d.core_properties.title = ""
    d.save(str(tmp_path / "b.docx"))
    assert read_document(tmp_path / "b.docx", max_bytes=LIMIT).title == "A heading"


def test_docx_table_of_contents_left_out_and_its_title_not_a_heading(tmp_path):
    """Word's "TOC Heading" is based on Heading 1 but has outline level 9 (body text); the "toc N"
    lines repeat the headings with page numbers."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    d = docx.Document()
    d.styles.add_style("toc 1", WD_STYLE_TYPE.PARAGRAPH)
    d.add_paragraph("Contents", style="TOC Heading")
    d.add_paragraph("Refund policy\t3", style="toc 1")
    d.add_heading("Refund policy", 1)
    d.add_paragraph("Body.")
    d.save(str(tmp_path / "toc.docx"))
    got = sections(read_document(tmp_path / "toc.docx", max_bytes=LIMIT))
    assert [(s.kind, s.text) for s in got] == [("text", "Contents"), ("heading", "Refund policy"),
                                                ("text", "Body.")]


def test_docx_tracked_insertions_kept_deletions_dropped(tmp_path):
    """python-docx's own Paragraph.text skips w:ins; Word shows inserted text and hides deleted."""
    import docx
    from docx.oxml import parse_xml

    d = docx.Document()
    p = d.add_paragraph("Kept ")
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    p._p.append(parse_xml(f'<w:ins {ns} w:id="1" w:author="a"><w:r><w:t>inserted</w:t></w:r></w:ins>'))
    p._p.append(parse_xml(f'<w:del {ns} w:id="2" w:author="a"><w:r><w:delText>gone</w:delText></w:r>'
                          '</w:del>'))
    d.save(str(tmp_path / "t.docx"))
    got = sections(read_document(tmp_path / "t.docx", max_bytes=LIMIT))
    assert [s.text for s in got] == ["Kept inserted"]


W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
FOOTNOTES = (f'<w:footnotes xmlns:w="{W_NS}">'
             '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>'
             '<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/>'
             '</w:r></w:p></w:footnote>'
             '<w:footnote w:id="7"><w:p><w:r><w:t>Seven, referenced second.</w:t></w:r></w:p></w:footnote>'
             '<w:footnote w:id="9"><w:p><w:r><w:t>Nine, referenced first.</w:t></w:r></w:p></w:footnote>'
             '</w:footnotes>')


def add_footnotes(src: Path, dst: Path) -> Path:
    """`src` with a footnotes part (python-docx cannot write one): the body's "NOTE9" and "NOTE7"
    become references to footnotes 9 and 7, and the part, its relationship and content type are
    added as Word writes them."""
    ref = '</w:t></w:r><w:r><w:footnoteReference w:id="{}"/></w:r><w:r><w:t xml:space="preserve">'
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if not info.filename.endswith((".xml", ".rels")):
                zout.writestr(info, data)
                continue
            text = data.decode("utf-8")
            if info.filename == "word/document.xml":
                text = text.replace("NOTE9", ref.format(9)).replace("NOTE7", ref.format(7))
            elif info.filename == "word/_rels/document.xml.rels":
                text = text.replace("</Relationships>", '<Relationship Id="rIdFn" Target="footnotes.xml" '
                                    'Type="http://schemas.openxmlformats.org/officeDocument/2006/'
                                    'relationships/footnotes"/></Relationships>')
            elif info.filename == "[Content_Types].xml":
                text = text.replace("</Types>", '<Override PartName="/word/footnotes.xml" ContentType='
                                    '"application/vnd.openxmlformats-officedocument.wordprocessingml.'
                                    'footnotes+xml"/></Types>')
            zout.writestr(info, text)
        zout.writestr("word/footnotes.xml", FOOTNOTES)
    return dst


def test_docx_footnotes_numbered_as_referenced_and_kept_at_the_end(tmp_path):
    import docx

    d = docx.Document()
    d.add_heading("Terms", 1)
    d.add_paragraph("First claimNOTE9 and second claimNOTE7.")
    d.save(str(tmp_path / "plain.docx"))
    reading = read_document(add_footnotes(tmp_path / "plain.docx", tmp_path / "notes.docx"), max_bytes=LIMIT)
    assert [(s.kind, s.text, s.where) for s in sections(reading)] == [
        ("heading", "Terms", {"heading_path": ["Terms"]}),
        ("text", "First claim[1] and second claim[2].", {"heading_path": ["Terms"]}),
        ("heading", "Footnotes", {"heading_path": ["Footnotes"]}),
        ("text", "[1] Nine, referenced first.\n[2] Seven, referenced second.",
         {"heading_path": ["Footnotes"]}),
    ]


# --- PPTX --------------------------------------------------------------------------------------

def test_pptx_slides_reading_order_tables_groups_and_notes(tmp_path):
    reading = read_document(make_pptx(tmp_path / "deck.pptx"), max_bytes=LIMIT)
    assert (reading.format, reading.title, reading.unit, reading.units) == ("pptx", "Roadmap", "slides", 2)
    one = {"slide": 1, "slide_title": "Roadmap"}
    two = {"slide": 2, "slide_title": "Numbers"}
    assert [(s.kind, s.text, s.where) for s in sections(reading)] == [
        ("text", "Roadmap", one),
        ("text", "Ship the reader\n  then the chunker", one),
        ("text", "left box", one),
        ("text", "right box", one),
        ("notes", "Mention the deadline.", {**one, "notes": True}),
        ("text", "Numbers", two),
        ("table", "Quarter\n10 | 11\n20 | 21", two),
        ("text", "grouped note", two),
    ]


# --- XLSX --------------------------------------------------------------------------------------

def test_xlsx_sheets_in_blocks_with_the_header_repeated(tmp_path):
    reading = read_document(make_xlsx(tmp_path / "book.xlsx"), max_bytes=LIMIT)
    assert (reading.format, reading.unit, reading.units) == ("xlsx", "sheets", 2)
    assert reading.metadata == {"hidden_sheets": ["Secret"]}
    got = sections(reading)
    sales = [s for s in got if s.where["sheet"] == "Sales"]
    assert all(s.kind == "table" for s in got)
    assert sales[0].text.splitlines()[:3] == ["Name | Date | Amount", "n0 | 2024-01-01 | 4",
                                              "n1 | 2024-01-02 | 1.5"]
    assert sales[0].where["rows"][0] == 1
    for s in sales[1:]:  # later blocks start with the header again, their rows are their own
        assert s.text.splitlines()[0] == "Name | Date | Amount"
        assert s.where["rows"][0] > 1
        assert len(s.text.splitlines()) - 1 <= 50 and len(s.text) <= 700 + 25
    # the blocks cover rows 1..121 and the row after the empty one (123), in order, once each
    rows = [r for s in sales for r in (s.where["rows"][0], s.where["rows"][1])]
    assert rows == sorted(rows) and rows[0] == 1 and rows[-1] == 123
    body = [line for s in sales for line in s.text.splitlines() if line != "Name | Date | Amount"]
    assert len(body) == 121 and body[-1] == "total |  | 99"
    assert [(s.text, s.where) for s in got if s.where["sheet"] == "Notes"] == [
        (" | hello\nTRUE |  | 2024-02-03 14:30:00", {"sheet": "Notes", "rows": [3, 5]})]
    assert "hidden lookup" not in "".join(s.text for s in got)


def test_xlsx_chunks_keep_sheet_and_rows(tmp_path):
    reading = read_document(make_xlsx(tmp_path / "book.xlsx"), max_bytes=LIMIT)
    _, pieces = chunk_sections(reading.sections, 800, 100)
    assert {p.where["sheet"] for p in pieces} == {"Sales", "Notes"}
    assert not any("Sales" == p.where["sheet"] and "hello" in p.text for p in pieces)  # a sheet is a cut
    # each chunk of the sheet holds its header row (a block fits a chunk; the overlap may come first)
    assert all("Name | Date | Amount" in p.text for p in pieces if p.where["sheet"] == "Sales")


@pytest.mark.parametrize("value,text", [
    (4.0, "4"), (1.5, "1.5"), (-3.0, "-3"), (0.1, "0.1"), (12, "12"), (None, ""), (True, "TRUE"),
    (dt.datetime(2024, 1, 31), "2024-01-31"), (dt.datetime(2024, 1, 31, 9, 5), "2024-01-31 09:05:00"),
    (dt.date(2024, 1, 31), "2024-01-31"), (dt.time(9, 5), "09:05:00"), ("two\nlines", "two lines"),
])
def test_xlsx_cells_formatted_as_read(value, text):
    assert format_cell(value) == text


# Sound up to its first row (openpyxl reads the dimension when it opens the workbook), cut after it.
BROKEN_SHEET = (b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
                b'<dimension ref="A1:B9"/><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>x</t></is>'
                b'</c></row><row r="2"><c r=')


def test_xlsx_damaged_sheet_is_unreadable_midway_and_the_first_sheet_was_read(tmp_path):
    """openpyxl in read-only mode parses a sheet only when it is iterated: the failure comes while
    the sections stream, and still arrives as Unreadable."""
    good = make_xlsx(tmp_path / "good.xlsx")
    bad = tmp_path / "bad.xlsx"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            dst.writestr(info, BROKEN_SHEET if info.filename.endswith("sheet2.xml") else data)
    reading = read_document(bad, max_bytes=LIMIT)
    seen = []
    with pytest.raises(Unreadable) as caught:
        for s in reading.sections:
            seen.append(s)
    assert caught.value.kind == "corrupt XLSX"
    assert seen and all(s.where["sheet"] == "Sales" for s in seen)


# --- notebooks ---------------------------------------------------------------------------------

def test_notebook_cells_headings_and_no_outputs(tmp_path):
    reading = read_document(make_notebook(tmp_path / "churn.ipynb"), max_bytes=LIMIT)
    assert (reading.format, reading.title) == ("ipynb", "Churn analysis")
    assert (reading.unit, reading.units) == ("cells", 5)
    assert reading.metadata == {"language": "python"}
    got = sections(reading)
    top, load = ["Churn analysis"], ["Churn analysis", "Load"]
    assert [(s.kind, s.level, s.text, s.where) for s in got] == [
        ("heading", 1, "Churn analysis", {"cell": 1, "cell_type": "markdown", "heading_path": top}),
        ("text", 0, "What drives churn.", {"cell": 1, "cell_type": "markdown", "heading_path": top}),
        ("heading", 2, "Load", {"cell": 1, "cell_type": "markdown", "heading_path": load}),
        ("text", 0, "```python\n# a comment, not a heading\n```",
         {"cell": 1, "cell_type": "markdown", "heading_path": load}),
        ("code", 0, "import pandas as pd\ndf = pd.read_csv('churn.csv')",
         {"cell": 2, "cell_type": "code", "heading_path": load}),
        ("text", 0, 'Pasted: <img src="data:(embedded file omitted)">',
         {"cell": 3, "cell_type": "markdown", "heading_path": load}),
        ("text", 0, "raw cell text", {"cell": 5, "cell_type": "raw", "heading_path": load}),
    ]
    text = "".join(s.text for s in got)
    assert PNG_B64[:20] not in text and "iVBORw0KGgo" not in text and "loaded 10 rows" not in text


def test_notebook_v3_worksheets_and_heading_cells(tmp_path):
    nb = {"nbformat": 3, "metadata": {"name": "old"}, "worksheets": [{"cells": [
        {"cell_type": "heading", "level": 2, "source": ["Setup"]},
        {"cell_type": "code", "language": "python", "input": ["x = 1"], "outputs": [
            {"output_type": "pyout", "png": PNG_B64}]},
        {"cell_type": "markdown", "source": "Done\n---\nall of it"},
    ]}]}
    reading = read_document(make_notebook(tmp_path / "old.ipynb", nb), max_bytes=LIMIT)
    assert reading.metadata == {"language": "python"} and reading.title == "Setup" and reading.units == 3
    assert [(s.kind, s.text, s.where.get("heading_path")) for s in sections(reading)] == [
        ("heading", "Setup", ["Setup"]), ("code", "x = 1", ["Setup"]),
        ("heading", "Done", ["Done"]), ("text", "all of it", ["Done"])]


@pytest.mark.parametrize("content", [b"not json at all", b'{"cells": 3}', b"[1, 2]", b"\xff\xfe\x00garbage",
                                     b'{"metadata": {}}'])
def test_not_a_notebook(tmp_path, content):
    (tmp_path / "x.ipynb").write_bytes(content)
    assert refused(tmp_path / "x.ipynb").kind == "not a notebook"


# --- refusals ----------------------------------------------------------------------------------

def test_zip_bomb_refused_from_the_directory_without_inflating(tmp_path):
    bomb = zeros_zip(tmp_path / "bomb.docx", "word/document.xml", 300)
    assert bomb.stat().st_size < 3_000_000
    e = refused(bomb)
    assert e.kind == "zip bomb"
    assert e.detail == (f"{bomb} would inflate to {300 * 2**20 + 8} bytes, over the limit of {LIMIT} "
                        "(SITUATE_MAX_DOCUMENT_BYTES)")


def test_zip_member_compressed_over_100_to_1_refused_under_the_limit(tmp_path):
    bomb = zeros_zip(tmp_path / "ratio.xlsx", "xl/worksheets/sheet1.xml", 5)
    e = refused(bomb, max_bytes=10**9)
    assert e.kind == "zip bomb" and "over 100:1" in e.detail


def test_zip_total_over_the_limit_refused_even_when_incompressible(tmp_path):
    path = tmp_path / "big.pptx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.bin", os.urandom(600_000))
        zf.writestr("b.bin", os.urandom(600_000))
    with zipfile.ZipFile(path) as zf, pytest.raises(Unreadable) as caught:
        check_zip(zf, path, 1_000_000)
    assert caught.value.kind == "zip bomb" and "would inflate to 1200000 bytes" in caught.value.detail
    with zipfile.ZipFile(path) as zf:
        check_zip(zf, path, 2_000_000)  # under the limit: no complaint


def test_zip_with_too_many_members_refused(tmp_path, monkeypatch):
    from situate.tasks.corpus.readers import zipguard

    monkeypatch.setattr(zipguard, "MAX_MEMBERS", 10)
    path = tmp_path / "many.epub"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(11):
            zf.writestr(f"m{i}", b"x")
    with pytest.raises(Unreadable, match="11 members"):
        open_zip(path, "EPUB", LIMIT)


def test_read_member_bounds_what_a_member_gives_even_when_its_size_lies(tmp_path):
    path = tmp_path / "liar.docx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.xml", b"a" * 1_000_000)
    with zipfile.ZipFile(path) as zf:
        with pytest.raises(Unreadable) as caught:
            read_member(zf, "big.xml", 10_000)
        assert caught.value.kind == "zip bomb"
        assert read_member(zf, "big.xml", 1_000_000) == b"a" * 1_000_000
    # Now declare 1,000 bytes in both headers: zipfile stops at the declared size and the CRC fails.
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 22, 1000)
    central = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, 1000)
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as zf:
        with pytest.raises(Unreadable) as caught:
            read_member(zf, "big.xml", 10_000)
        assert caught.value.kind == "corrupt package"


def test_text_file_named_xlsx_is_not_an_xlsx(tmp_path):
    (tmp_path / "notes.xlsx").write_text("just some text, saved with the wrong name\n")
    e = refused(tmp_path / "notes.xlsx")
    assert (e.kind, e.detail) == ("not an XLSX", "the file's content is not an XLSX (a zip package)")


def test_password_protected_docx_is_encrypted(tmp_path):
    (tmp_path / "secret.docx").write_bytes(ole_file(["EncryptionInfo", "EncryptedPackage"]))
    e = refused(tmp_path / "secret.docx")
    assert (e.kind, e.detail) == ("encrypted DOCX", "password-protected; remove the password and save again")
    (tmp_path / "secret.pptx").write_bytes(ole_file(["EncryptedPackage", "EncryptionInfo"]))
    assert refused(tmp_path / "secret.pptx").kind == "encrypted PPTX"


def test_ole_file_is_encrypted_only_under_an_office_name(tmp_path):
    (tmp_path / "book.epub").write_bytes(ole_file(["EncryptionInfo", "EncryptedPackage"]))
    with pytest.raises(Unreadable) as caught:
        open_zip(tmp_path / "book.epub", "EPUB", LIMIT)
    assert caught.value.kind == "not an EPUB"


def test_legacy_doc_renamed_docx_is_not_a_docx(tmp_path):
    (tmp_path / "old.docx").write_bytes(ole_file(["WordDocument", "1Table"]))
    e = refused(tmp_path / "old.docx")
    assert e.kind == "not a DOCX" and "legacy Word .doc" in e.detail


def test_truncated_docx_is_corrupt(tmp_path):
    good = make_docx(tmp_path / "good.docx")
    (tmp_path / "cut.docx").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    assert refused(tmp_path / "cut.docx").kind == "corrupt DOCX"


def test_spreadsheet_named_docx_and_other_zips_are_not_a_docx(tmp_path):
    xlsx = make_xlsx(tmp_path / "book.xlsx", rows=3)
    (tmp_path / "book.docx").write_bytes(xlsx.read_bytes())
    e = refused(tmp_path / "book.docx")
    assert e.kind == "not a DOCX" and "Excel workbook" in e.detail
    with zipfile.ZipFile(tmp_path / "plain.pptx", "w") as zf:
        zf.writestr("readme.txt", "a zip, no Office package")
    assert refused(tmp_path / "plain.pptx").kind == "not a PPTX"


def test_damaged_document_xml_is_corrupt_docx(tmp_path):
    good = make_docx(tmp_path / "good.docx")
    bad = tmp_path / "bad.docx"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            dst.writestr(info, b"<w:document><broken" if info.filename == "word/document.xml" else data)
    e = refused(bad)
    assert e.kind == "corrupt DOCX" and e.detail
