"""Small hand-made hostile files, built as an attacker would: PDFs whose few kilobytes
cost minutes or gigabytes to read, an XLSX whose shared strings expand through internal entities,
and links, pipes and unreadable files planted in a corpus folder.

Each builder writes one file and returns its path; nothing here reads them.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from pathlib import Path

# --- PDFs, written object by object ------------------------------------------------------------------


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF of `objects` (object 1 is the catalog), with a correct cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def _stream(data: bytes, extra: bytes = b"") -> bytes:
    packed = zlib.compress(data, 9)
    return b"<< /Length %d /Filter /FlateDecode %s>>\nstream\n" % (len(packed), extra) + packed + \
        b"\nendstream"


_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _one_page(content: bytes, resources: bytes) -> list[bytes]:
    """Catalog, page tree, one page drawing `content` with `resources`; objects 1-4, font 5."""
    return [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources " + resources
            + b" /Contents 4 0 R >>",
            _stream(content),
            _FONT]


def overlapping_runs_pdf(path: Path, runs: int = 6_000) -> Path:
    """One line of `runs` text objects, each overlapping the one before (21 KB at 6,000)."""
    lines = [b"BT /F1 10 Tf 1 0 0 1 %.2f 700 Tm (word%d run) Tj ET" % (40 + i * 0.09, i % 10)
             for i in range(runs)]
    path.write_bytes(_pdf(_one_page(b"\n".join(lines), b"<< /Font << /F1 5 0 R >> >>")))
    return path


def xobject_bomb_pdf(path: Path, draws: int = 10_000, fanout: int = 10) -> Path:
    """A form XObject drawn `draws` times: forms nested `log(draws)` deep, each drawing the one
    below `fanout` times (2-3 KB whatever the count)."""
    depth = 0
    while fanout ** depth < draws:
        depth += 1
    first = 6  # objects 1-5: catalog, pages, page, content, font; then form 0 (the leaf) upwards
    forms = [_stream(b"BT /F1 6 Tf 0 0 Td (drawn) Tj ET",
                     b"/Type /XObject /Subtype /Form /BBox [0 0 40 10] "
                     b"/Resources << /Font << /F1 5 0 R >> >> ")]
    for level in range(1, depth + 1):
        body = b"\n".join(b"q 1 0 0 1 %d %d cm /X Do Q" % (j % 5, j // 5) for j in range(fanout))
        forms.append(_stream(body, b"/Type /XObject /Subtype /Form /BBox [0 0 600 800] "
                                   b"/Resources << /XObject << /X %d 0 R >> >> " % (first + level - 1)))
    top = first + depth
    objects = _one_page(b"q 1 0 0 1 20 20 cm /X Do Q", b"<< /XObject << /X %d 0 R >> >>" % top)
    path.write_bytes(_pdf(objects + forms))
    return path


def page_tree_bomb_pdf(path: Path, fanout: int = 10, depth: int = 6) -> Path:
    """A page tree listing the same child `fanout` times at every level: `fanout ** depth` pages
    (a million by default) in 1-2 KB, all one page object."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        number = 2 + level
        kid = b"%d 0 R" % (number + 1)
        parent = b" /Parent %d 0 R" % (number - 1) if level else b""
        objects.append(b"<< /Type /Pages /Kids [%s] /Count %d%s >>"
                       % (b" ".join([kid] * fanout), fanout ** (depth - level), parent))
    page = 2 + depth
    objects.append(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources "
                   b"<< /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>" % (page - 1, page + 2, page + 1))
    objects.append(_stream(b"BT /F1 12 Tf 72 700 Td (The same page, again and again.) Tj ET"))
    objects.append(_FONT)
    path.write_bytes(_pdf(objects))
    return path


# --- XLSX ----------------------------------------------------------------------------------------------


def entity_xlsx(path: Path, strings: int = 110) -> Path:
    """A workbook whose shared strings are made of an internal entity: about 5 KB that expand to
    ~19 MB of cell text (24,000 chunks) through a parser that resolves entities."""
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    pkg = "http://schemas.openxmlformats.org/package/2006"
    types = (f'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="{pkg}/content-types">'
             '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
             'relationships+xml"/>'
             '<Default Extension="xml" ContentType="application/xml"/>'
             '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-'
             'officedocument.spreadsheetml.sheet.main+xml"/>'
             '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-'
             'officedocument.spreadsheetml.worksheet+xml"/>'
             '<Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-'
             'officedocument.spreadsheetml.sharedStrings+xml"/></Types>')
    rels = (f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{pkg}/relationships">'
            f'<Relationship Id="rId1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>')
    workbook = (f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{main}" xmlns:r="{rel}">'
                '<sheets><sheet name="Figures" sheetId="1" r:id="rId1"/></sheets></workbook>')
    workbook_rels = (f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{pkg}/relationships">'
                     f'<Relationship Id="rId1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
                     f'<Relationship Id="rId2" Type="{rel}/sharedStrings" Target="sharedStrings.xml"/>'
                     '</Relationships>')
    rows = "".join(f'<row r="{i + 1}"><c r="A{i + 1}" t="s"><v>{i}</v></c></row>' for i in range(strings))
    sheet = (f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{main}"><sheetData>{rows}'
             '</sheetData></worksheet>')
    # One entity of ~100 characters, referenced 1,000 times per string: 33x per reference, under
    # expat's amplification guard (100x, and only past 8 MiB of output), and ~100 KB per string.
    dtd = ('<!DOCTYPE sst [<!ENTITY a "the quarterly figures were revised upward again, and the '
           'revision was revised once more. ">]>')
    sst = (f'<?xml version="1.0" encoding="UTF-8"?>{dtd}<sst xmlns="{main}" count="{strings}" '
           f'uniqueCount="{strings}">' + ("<si><t>" + "&a;" * 1000 + "</t></si>") * strings + "</sst>")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for name, text in (("[Content_Types].xml", types), ("_rels/.rels", rels),
                           ("xl/workbook.xml", workbook), ("xl/_rels/workbook.xml.rels", workbook_rels),
                           ("xl/worksheets/sheet1.xml", sheet), ("xl/sharedStrings.xml", sst)):
            out.writestr(name, text)
    return path


# --- things planted in a folder ------------------------------------------------------------------------


def plant_links(corpus: Path, secret: Path) -> dict[str, Path]:
    """Links out of `corpus`: absolute and relative to `secret`, to /proc files, to a directory
    outside; returns them by role."""
    (corpus / "docs").mkdir(exist_ok=True)
    links = {
        "absolute": corpus / "notes.md",
        "relative": corpus / "docs" / "x.txt",
        "proc_status": corpus / "status.txt",
        "proc_pagemap": corpus / "pagemap.txt",
        "directory": corpus / "elsewhere",
    }
    links["absolute"].symlink_to(secret)
    links["relative"].symlink_to(os.path.relpath(secret, links["relative"].parent))
    links["proc_status"].symlink_to("/proc/self/status")
    links["proc_pagemap"].symlink_to("/proc/self/pagemap")
    links["directory"].symlink_to(secret.parent, target_is_directory=True)
    return links


# --- a folder holding them all ------------------------------------------------------------------------

SECRET_MARK = "zebracorn-credential-7731"  # in the file outside the corpus: never in the store
ORDINARY = {
    "worker.md": "# Worker\n\nThe worker retries a failed job with exponential backoff and jitter.\n",
    "storage.md": "# Storage\n\nSnapshots of the ledger are written to object storage every hour.\n",
    "search.md": "# Search\n\nQueries are answered from the inverted index, then reranked by recency.\n",
}


def hostile_folder(base: Path, *, bombs: bool = True, draws: tuple[int, ...] = (10_000, 1_000_000)) -> Path:
    """`base/corpus`: three ordinary Markdown files beside every hostile file above (links out,
    absolute and relative, to /proc, to a directory; a FIFO; an unreadable file; the PDFs and
    the XLSX when `bombs`), with the linked secret in `base/outside`. Returns the corpus."""
    outside = base / "outside"
    outside.mkdir(parents=True)
    secret = outside / "secret.md"
    secret.write_text(f"# Credentials\n\naws_secret_access_key = {SECRET_MARK}\n")
    corpus = base / "corpus"
    corpus.mkdir()
    for name, text in ORDINARY.items():
        (corpus / name).write_text(text)
    plant_links(corpus, secret)
    os.mkfifo(corpus / "pipe.md")
    locked = corpus / "locked.md"
    locked.write_text(f"# Locked\n\n{SECRET_MARK} must not be read.\n")
    locked.chmod(0)
    if bombs:
        overlapping_runs_pdf(corpus / "overlapping-runs.pdf")
        for n in draws:
            xobject_bomb_pdf(corpus / f"xobject-{n}.pdf", draws=n)
        page_tree_bomb_pdf(corpus / "page-tree.pdf")
        entity_xlsx(corpus / "entities.xlsx")
        nested_menus_html(corpus / "menus.html")
        too_deep_html(corpus / "deep.html")
    return corpus


def nested_menus_html(path: Path, size: int = 10_800_000) -> Path:
    """A page of nested menus (ul.menu > li.menu-item > a, 120 levels, repeated) around one
    paragraph, `size` characters: the issue's 10.8 MB page that took 69 s to read."""
    from benchmarks.bench_html_furniture import page

    path.write_text(page(size, 120))
    return path


def too_deep_html(path: Path, depth: int = 100_000) -> Path:
    """Elements nested `depth` deep (600 KB): past what the HTML reader walks, a counted skip."""
    path.write_text("<html><body>" + "<div>x" * depth + "</div>" * depth + "</body></html>")
    return path
