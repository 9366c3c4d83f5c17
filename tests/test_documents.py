"""Documents as users have them, through the loader: a directory holding every format situate
reads and every kind of file it must skip gives the documents with their places, the counts per
format and per skip reason, and one warning per skipped file; the dry run says the same before
anything is paid. The readers' own details are tested in test_readers_*.py."""

from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path

import pytest

from situate.core.settings import configured
from situate.tasks.corpus.load import load_corpus
from tests.test_flows import _cli

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5E"
       "rkJggg==")


def _pdf(path: Path, pages: list[list[str]], image_only: bool = False) -> None:
    import base64
    import io

    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4, invariant=1)
    for lines in pages:
        if image_only:  # a scan: the page is a picture, no text layer
            c.drawImage(ImageReader(io.BytesIO(base64.b64decode(PNG))), 50, 50, 400, 600)
        y = 780
        for line in lines:
            c.drawString(60, y, line)
            y -= 16
        c.showPage()
    c.save()


def _docx(path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Refund policy", 1)
    d.add_paragraph("Refunds are paid within fourteen days of the returned goods arriving.")
    d.add_heading("Exceptions", 2)
    d.add_paragraph("Gift cards are never refunded.")
    t = d.add_table(rows=2, cols=2)
    t.cell(0, 0).text, t.cell(0, 1).text = "item", "days"
    t.cell(1, 0).text, t.cell(1, 1).text = "furniture", "30"
    d.save(str(path))


def _pptx(path: Path) -> None:
    from pptx import Presentation

    p = Presentation()
    for title, body, notes in [("Plan", "Ship the queue", "say the date"),
                               ("Risks", "Storage limits", "mention the database")]:
        s = p.slides.add_slide(p.slide_layouts[1])
        s.shapes.title.text = title
        s.placeholders[1].text = body
        s.notes_slide.notes_text_frame.text = notes
    p.save(str(path))


def _xlsx(path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    a = wb.active
    a.title = "Hosts"
    a.append(["host", "workers"])
    a.append(["alpha", 16])
    b = wb.create_sheet("Growth")
    b.append(["month", "jobs"])
    b.append(["March", 4.0])
    wb.save(str(path))


def _ipynb(path: Path) -> None:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# Lease tuning\n", "Pick the lease."]},
             {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": ["plot(x)"],
              "outputs": [{"output_type": "display_data", "metadata": {},
                           "data": {"image/png": PNG, "text/plain": ["<Figure>"]}}]}]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


HTML = """<html><head><title>Architecture</title><script>var tracking = 1;</script></head><body>
<nav><a href="/">Home</a> <a href="/docs">Docs menu entry</a></nav>
<div class="cookie-banner">We use cookies. Accept all</div>
<main><h1>Architecture</h1><p>Workers lease jobs from PostgreSQL rows.</p>
<h2>Scaling</h2><p>Add worker processes until the pool is the limit.</p>
<pre><code>SELECT id
  FROM jobs FOR UPDATE SKIP LOCKED;</code></pre></main>
<footer>Copyright footer text</footer></body></html>"""


def _epub(path: Path) -> None:
    chapter = ('<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
               "<head><title>{t}</title></head><body><h1>{t}</h1><p>{p}</p></body></html>")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml",
                   '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:'
                   'opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/c.opf" '
                   'media-type="application/oebps-package+xml"/></rootfiles></container>')
        z.writestr("OEBPS/c.opf",
                   '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
                   '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>The Queue Book'
                   '</dc:title></metadata><manifest><item id="a" href="a.xhtml" media-type="'
                   'application/xhtml+xml"/><item id="b" href="b.xhtml" media-type="application/'
                   'xhtml+xml"/></manifest><spine><itemref idref="a"/><itemref idref="b"/></spine>'
                   "</package>")
        z.writestr("OEBPS/a.xhtml", chapter.format(t="Leases", p="A lease expires after thirty seconds."))
        z.writestr("OEBPS/b.xhtml", chapter.format(t="Retries", p="Retries back off with full jitter."))


def _bomb(path: Path, size: int) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("xl/workbook.xml", "w") as f:
        for _ in range(size >> 20):
            f.write(b"\0" * (1 << 20))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    (root / "readme.md").write_text("# Harbor\n\nA job queue.\n")
    (root / "queue.py").write_text("class Queue:\n    def lease(self):\n        return 1\n")
    _pdf(root / "handbook.pdf", [["On-call owns the queue for a week."], ["Escalate to storage."]])
    _docx(root / "policy.docx")
    _pptx(root / "deck.pptx")
    _xlsx(root / "capacity.xlsx")
    _ipynb(root / "tuning.ipynb")
    (root / "site.html").write_text(HTML)
    _epub(root / "book.epub")
    # What must be skipped, each counted and said once.
    (root / "lying.pdf").write_text("this is a text file with a PDF name")
    (root / "locked.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 1024)
    (root / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 1024)
    _pdf(root / "scan.pdf", [[]], image_only=True)
    _bomb(root / "bomb.xlsx", 8 << 20)
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    return root


def _load(root: Path):
    with configured(max_document_bytes=4 << 20):
        return load_corpus(root, code_chunks="syntax")


def test_every_format_is_read_with_its_place_and_every_bad_file_is_a_counted_skip(mixed, caplog):
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        corpus = _load(mixed)
    docs = {d.id: d for d in corpus.documents}
    assert set(docs) == {"readme.md", "queue.py", "handbook.pdf", "policy.docx", "deck.pptx",
                         "capacity.xlsx", "tuning.ipynb", "site.html", "book.epub"}
    assert dict(corpus.formats) == {"md": 1, "pdf": 1, "docx": 1, "pptx": 1, "xlsx": 1, "ipynb": 1,
                                    "html": 1, "epub": 1, "py": 1}
    assert sum(dict(corpus.formats).values()) == len(docs)  # every file read, source code too
    assert dict(corpus.units)["pages"] == 2 and dict(corpus.units)["slides"] == 2
    skipped = dict(corpus.skipped)
    assert skipped["not a PDF"] == 1 and skipped["scanned PDF"] == 1
    assert skipped["zip bomb"] == 1 and skipped["legacy Word .doc"] == 1
    assert sum(v for k, v in skipped.items() if "DOCX" in k) == 1  # the password-protected one
    for name in ("lying.pdf", "locked.docx", "old.doc", "scan.pdf", "bomb.xlsx"):
        said = [r for r in caplog.records if name in r.getMessage()]
        assert len(said) == 1, (name, [r.getMessage() for r in said])
    assert "OCR is not included" in next(r.getMessage() for r in caplog.records
                                         if "scan.pdf" in r.getMessage())

    def places(doc_id: str) -> list[dict]:
        return [c.where for c in docs[doc_id].chunks]

    assert [w.get("page") for w in places("handbook.pdf")] == [1]
    assert places("handbook.pdf")[0].get("page_end") == 2
    assert places("policy.docx")[0]["heading_path"] == ["Refund policy"]
    assert "furniture | 30" in docs["policy.docx"].text
    assert {w.get("slide") for w in places("deck.pptx")} == {1} and places("deck.pptx")[0]["notes"]
    assert "mention the database" in docs["deck.pptx"].text
    assert [w["sheet"] for w in places("capacity.xlsx")] == ["Hosts", "Growth"]
    sheets = docs["capacity.xlsx"].text
    assert "Growth\nmonth | jobs\nMarch | 4" in sheets and "4.0" not in sheets
    notebook = docs["tuning.ipynb"].text
    assert "Pick the lease." in notebook and "plot(x)" in notebook
    assert PNG[:20] not in notebook and "<Figure>" not in notebook
    site = docs["site.html"].text
    assert "Workers lease jobs" in site and "FOR UPDATE SKIP LOCKED;" in site
    assert "SELECT id\n  FROM jobs" in site  # a code block verbatim
    for boilerplate in ("Docs menu entry", "cookies", "Copyright footer", "tracking"):
        assert boilerplate not in site
    assert "<" not in site  # clean text, no markup
    assert [w.get("chapter") for w in places("book.epub")] == [1, 2]
    assert docs["book.epub"].metadata["document_title"] == "The Queue Book"
    assert all(c.where.get("symbols") for c in docs["queue.py"].chunks)


def test_the_dry_run_counts_formats_units_and_skips_in_every_line_with_no_traceback(mixed, tmp_path):
    r = _cli("ingest", str(mixed), "--collection", "mixed", "--dry-run", cwd=tmp_path,
             env={"SITUATE_MAX_DOCUMENT_BYTES": str(4 << 20)})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Traceback" not in out
    for row in ("files pdf", "files epub", "read pages", "read slides", "skipped scanned PDF",
                "skipped zip bomb", "skipped not a PDF"):
        assert row in r.stdout, (row, r.stdout)
    assert not (tmp_path / "m.db").exists()
