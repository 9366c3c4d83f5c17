"""One document, the same sections in every format: each reader keeps the headings the
document has, at their levels, and drops what is furniture by the format's own word (a tagged
PDF's artifacts, an EPUB's title page), and nothing else. Small documents made by hand, each
failing on the readers before the issue."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

from situate.tasks.corpus.readers import read_document
from situate.tasks.corpus.readers.html import html_sections, parse
from situate.tasks.corpus.sections import assemble

LIMIT = 50 * 1024 * 1024


# --- A tagged PDF, written by hand ---------------------------------------------------------------

def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def tagged_pdf(path: Path, pages: list[list[tuple[str, str, float, bool]]]) -> None:
    """A PDF whose pages hold lines (tag, text, size, bold), top to bottom, tagged as a browser's
    print tags them: each line of content in a marked-content sequence with its MCID, a structure
    element of that type (H1-H6, P) pointing at it, and the running header and footer lines
    marked /Artifact. Helvetica (not embedded), US Letter."""
    objects: list[bytes] = []

    def add(body: str | bytes) -> int:
        objects.append(body.encode("latin-1") if isinstance(body, str) else body)
        return len(objects)

    catalog = add("")  # filled in below, once the numbers are known
    pages_ref = add("")
    root_ref = add("")
    document_ref = add("")
    parent_tree = add("")
    regular = add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    bold = add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>")
    page_refs: list[int] = []
    elements: list[int] = []
    nums: list[str] = []
    for number, lines in enumerate(pages):
        content_ref = add("")
        page_ref = add(f"<< /Type /Page /Parent {pages_ref} 0 R /MediaBox [0 0 612 792] "
                       f"/Contents {content_ref} 0 R /Resources << /Font << /F1 {regular} 0 R "
                       f"/F2 {bold} 0 R >> >> /StructParents {number} >>")
        ops: list[str] = []
        y = 780.0
        mcid = 0
        kids: list[int] = []
        for tag, text, size, heavy in lines:
            font = "/F2" if heavy else "/F1"
            y -= size * 1.5 + (10 if tag.startswith("H") else 2)
            show = f"BT {font} {size} Tf 72 {y:.1f} Td ({_escape(text)}) Tj ET"
            if tag == "Artifact":
                ops.append(f"/Artifact BMC {show} EMC")
            else:
                ops.append(f"/{tag} << /MCID {mcid} >> BDC {show} EMC")
                kids.append(add(f"<< /Type /StructElem /S /{tag} /P {document_ref} 0 R /Pg {page_ref} 0 R "
                                f"/K {mcid} >>"))
                mcid += 1
        stream = " ".join(ops).encode("latin-1")
        objects[content_ref - 1] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
        page_refs.append(page_ref)
        elements += kids
        nums.append(f"{number} [{' '.join(f'{k} 0 R' for k in kids)}]")
    objects[catalog - 1] = (f"<< /Type /Catalog /Pages {pages_ref} 0 R /MarkInfo << /Marked true >> "
                            f"/StructTreeRoot {root_ref} 0 R >>").encode()
    objects[pages_ref - 1] = (f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_refs)}] "
                              f"/Count {len(page_refs)} >>").encode()
    objects[root_ref - 1] = (f"<< /Type /StructTreeRoot /K [{document_ref} 0 R] "
                             f"/ParentTree {parent_tree} 0 R >>").encode()
    objects[document_ref - 1] = (f"<< /Type /StructElem /S /Document /P {root_ref} 0 R "
                                 f"/K [{' '.join(f'{e} 0 R' for e in elements)}] >>").encode()
    objects[parent_tree - 1] = f"<< /Nums [{' '.join(nums)}] >>".encode()
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\n" % (len(objects) + 1, catalog)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    path.write_bytes(bytes(out))


HEADER = ("Artifact", "11/27/26, 10:21 PM guide", 8, False)
BODY = "Workers lease jobs from the queue and renew the lease while they run."


def _footer(page: int) -> tuple[str, str, float, bool]:
    return ("Artifact", f"file:///srv/docs/guide.html {page}/2", 8, False)


def _guide(path: Path) -> None:
    tagged_pdf(path, [
        [HEADER, ("H1", "Guide", 24, True), ("P", BODY, 12, False), ("H2", "Install", 18, True),
         ("P", "Run the installer once on every machine of the pool.", 12, False),
         ("H3", "On Linux", 14, True), ("P", "Use the package of your distribution.", 12, False),
         _footer(1)],
        [HEADER, ("H4", "Packages", 12, True), ("P", "Debian and Fedora ship the worker.", 12, False),
         ("H2", "Operate", 18, True), ("P", "Watch the lease renewals.", 12, False), _footer(2)],
    ])


def test_a_tagged_pdf_gives_its_headings_at_their_levels(tmp_path: Path) -> None:
    """A print like Chromium's: headings tagged H1-H4, the H3 and H4 set in bold at about the
    body's size (as a browser sets h3 and h4). The reader before read headings by size alone: the
    H3 and H4 were body text, and every chunk under them named the H2."""
    path = tmp_path / "guide.pdf"
    _guide(path)
    sections = list(read_document(path, max_bytes=LIMIT).sections)
    assert [(s.level, s.text) for s in sections if s.kind == "heading"] == [
        (1, "Guide"), (2, "Install"), (3, "On Linux"), (4, "Packages"), (2, "Operate")]
    text, _, spans = assemble(sections)
    paths = {text[s.start:s.end]: s.where.get("heading_path") for s in spans if s.kind == "text"}
    assert paths["Debian and Fedora ship the worker."] == ["Guide", "Install", "On Linux", "Packages"]
    assert paths["Use the package of your distribution."] == ["Guide", "Install", "On Linux"]
    assert paths["Watch the lease renewals."] == ["Guide", "Operate"]


def test_a_tagged_pdf_drops_what_it_marks_as_artifacts(tmp_path: Path) -> None:
    """Chromium marks its running header (date, title) and footer (URL, page/pages) as
    artifacts. On a PDF of two pages the reader before could not learn them (it needs three
    pages that repeat a line) and kept them in the text, the date before the first heading."""
    path = tmp_path / "guide.pdf"
    _guide(path)
    text = "\n".join(s.text for s in read_document(path, max_bytes=LIMIT).sections)
    assert "10:21" not in text and "file:///" not in text and "1/2" not in text and "2/2" not in text
    assert text.startswith("Guide\n" + BODY)


def test_an_untagged_pdf_still_reads_headings_by_size(tmp_path: Path) -> None:
    """The same document without tags (no structure tree, no marked content): headings by the
    size they are set in, as before."""
    from reportlab.pdfgen import canvas

    path = tmp_path / "plain.pdf"
    c = canvas.Canvas(str(path))
    y = 780
    for text, size in (("Guide", 24), (BODY, 12), ("Install", 18), ("Run the installer once.", 12)):
        c.setFont("Helvetica", size)
        c.drawString(72, y, text)
        y -= 40
    c.save()
    sections = list(read_document(path, max_bytes=LIMIT).sections)
    assert [(s.level, s.text) for s in sections if s.kind == "heading"] == [(1, "Guide"), (2, "Install")]


# --- HTML: an anchor is not a role ---------------------------------------------------------------

def test_a_heading_whose_anchor_has_a_furniture_word_is_kept() -> None:
    """pandoc (and GitHub, Sphinx, mkdocs) give each heading an id spelled from its words; a
    heading "Shared cache" gets `shared-cache`, whose first word reads as the furniture word
    "share". The reader before dropped the heading on a plain page and the whole section on a
    sectioned one (pandoc --section-divs, EPUB). An id that is not the heading's words, and a
    class, still mark furniture."""
    page = """<html><body><div id="content"><h1 id="build-cache">Build cache</h1>
<p>Cargo keeps every build under the target directory of the workspace.</p>
<h2 id="shared-cache">Shared cache</h2><p>A third party tool can share builds across workspaces.</p>
<section id="social-login-1" class="level2"><h2>Social login</h2>
<p>Sign in with the provider of your organization.</p></section>
<div id="share-this-page"><a href="#">Share</a> <a href="#">Tweet</a></div>
<div class="social-links"><a href="#">Mastodon</a></div></div></body></html>"""
    sections = list(html_sections(parse(page)))
    assert [s.text for s in sections if s.kind == "heading"] == ["Build cache", "Shared cache",
                                                                  "Social login"]
    text = "\n".join(s.text for s in sections)
    assert "share builds across workspaces" in text and "Sign in with the provider" in text
    assert "Tweet" not in text and "Mastodon" not in text
    under = {s.text: s.where["heading_path"] for s in sections if s.kind == "text"}
    assert under["A third party tool can share builds across workspaces."] == ["Build cache", "Shared cache"]


# --- EPUB: the title page is not a chapter -------------------------------------------------------

def _book(path: Path, chapters: dict[str, str], title: str = "build-cache") -> None:
    page = ('<?xml version="1.0" encoding="UTF-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
            'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>{title}</title></head>{body}</html>')
    items = "".join(f'<item id="i{k}" href="{name}" media-type="application/xhtml+xml"/>'
                    for k, name in enumerate(chapters))
    spine = "".join(f'<itemref idref="i{k}"/>' for k in range(len(chapters)))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml",
                   '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:'
                   'opendocument:xmlns:container"><rootfiles><rootfile full-path="EPUB/content.opf" '
                   'media-type="application/oebps-package+xml"/></rootfiles></container>')
        z.writestr("EPUB/content.opf",
                   '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
                   f'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title>'
                   f"</metadata><manifest>{items}</manifest><spine>{spine}</spine></package>")
        for name, body in chapters.items():
            z.writestr(f"EPUB/{name}", page.format(title=title, body=body))


def test_an_epub_title_page_is_not_a_chapter(tmp_path: Path) -> None:
    """pandoc's EPUB opens with a title page (`epub:type="titlepage"`) holding only the title:
    the reader before read it as chapter 1, a chunk of one word whose context repeated it, and
    numbered the book's real chapters from 2."""
    path = tmp_path / "build-cache.epub"
    _book(path, {
        "title_page.xhtml": '<body epub:type="frontmatter"><section epub:type="titlepage" '
                            'class="titlepage"><h1 class="title">build-cache</h1></section></body>',
        "ch001.xhtml": '<body epub:type="bodymatter"><section id="build-cache" class="level1">'
                       "<h1>Build cache</h1><p>Cargo keeps every build under the target directory."
                       "</p></section></body>"})
    reading = read_document(path, max_bytes=LIMIT)
    sections = list(reading.sections)
    assert reading.units == 1
    assert [s.text for s in sections] == ["Build cache",
                                          "Cargo keeps every build under the target directory."]
    assert all(s.where["chapter"] == 1 for s in sections)


# --- Markdown: what the page shows ---------------------------------------------------------------

def test_a_front_matter_title_is_the_markdown_page_s_title_and_top_heading(tmp_path: Path) -> None:
    """A Docusaurus or Hugo page keeps its title in the front matter and opens with no heading
    of its own; pandoc shows that title above it (so do the HTML, Word, EPUB and PDF made from
    it), and every heading below nests under it. The reader before dropped the front matter
    whole: no title, and paths one level short."""
    page = tmp_path / "mocks.md"
    page.write_text("---\nid: mock-functions\ntitle: 'Mock Functions'\n---\n\nMock functions erase the "
                    "implementation.\n\n## Using a mock function\n\nTest the callback.\n")
    reading = read_document(page, max_bytes=LIMIT)
    sections = list(reading.sections)
    assert reading.title == "Mock Functions"
    assert [(s.kind, s.level, s.text) for s in sections][:2] == [
        ("heading", 1, "Mock Functions"), ("text", 0, "Mock functions erase the implementation.")]
    text, _, spans = assemble(sections)
    assert spans[-1].where["heading_path"] == ["Mock Functions", "Using a mock function"]
    assert "mock-functions" not in text
    own = tmp_path / "own.md"  # a page with a level-1 heading of its own shows it once
    own.write_text("---\ntitle: Caching\n---\n\n# Caching in uv\n\nText.\n")
    assert [s.text for s in read_document(own, max_bytes=LIMIT).sections] == ["Caching in uv", "Text."]


def test_markdown_code_spans_are_code_and_headings_read_as_shown() -> None:
    """Inside a code span, brackets are code, not a link (`[ipv4][, ipv6]` was read as a
    reference link and ", ipv6" lost); a heading's inline code reads as its text, as in every
    other format's heading path."""
    from situate.tasks.corpus.readers.markdown import markdown_sections

    source = ("# DNS\n\n### `resolver.setLocalAddress([ipv4][, ipv6])`\n\nCall "
              "`resolver.setLocalAddress([ipv4][, ipv6])` with [a link](https://x.org) first.\n")
    sections = list(markdown_sections(source))
    assert [(s.kind, s.text) for s in sections] == [
        ("heading", "DNS"), ("heading", "resolver.setLocalAddress([ipv4][, ipv6])"),
        ("text", "Call `resolver.setLocalAddress([ipv4][, ipv6])` with a link first.")]


def test_a_markdown_table_reads_as_every_other_format_reads_it() -> None:
    """A GFM table: a row a line, cells by " | " (as the HTML, Word and PDF readers give it), the
    delimiter row and the cells' padding gone. The reader before kept the source's aligned
    columns, twice the characters of the same table in any other format, so its chunks ended
    elsewhere."""
    from situate.tasks.corpus.readers.markdown import markdown_sections

    source = ("Record types:\n\n| `rrtype`  | contains                 | type     |\n"
              "| --------- | ------------------------ | -------- |\n"
              "| `'A'`     | IPv4 addresses (default) | {string} |\n"
              "| `'MX'`    | mail exchange \\| records | [Object](#object) |\n\nAfter the table.\n")
    assert [(s.kind, s.text) for s in markdown_sections(source)] == [
        ("text", "Record types:"),
        ("table", "`rrtype` | contains | type\n`'A'` | IPv4 addresses (default) | {string}\n"
                  "`'MX'` | mail exchange | records | Object"),
        ("text", "After the table.")]


# --- Where a document's text is cut, and what its context names ------------------------------------

def test_a_page_edge_is_no_cut_of_its_own() -> None:
    """A PDF's sections are cut at each page; the text is the same as its Markdown's. The chunker
    once preferred a page edge to a paragraph break (a priority of its own), so the PDF's chunks
    ended where pages did, not where the Markdown's did. Now the same text is cut at the same
    places with or without its pages."""
    from situate.tasks.corpus.readers.base import Place, Section
    from situate.tasks.corpus.sections import chunk_sections

    paragraphs = [" ".join(f"w{p}x{i}" for i in range(30)) + "." for p in range(12)]
    flowing = [Section("Guide", kind="heading", level=1)] + [Section(p) for p in paragraphs]
    paged = [Section("Guide", Place(page=1), kind="heading", level=1)] + [
        Section(p, Place(page=1 + k // 3)) for k, p in enumerate(paragraphs)]
    text, cut = chunk_sections(flowing, 800, 100)
    paged_text, paged_cut = chunk_sections(paged, 800, 100)
    assert paged_text == text
    assert [p.start for p in paged_cut] == [p.start for p in cut]


def test_a_chapter_title_heads_the_heading_path_once() -> None:
    """An EPUB chapter's title (its entry in the book's table of contents) is the top of its
    heading path, not said twice when its first heading is the same, and the context names the
    chapter by number and path ("Chapter 2 > Backoff > Retries"), as a PDF's names its page."""
    from situate.core.records import Chunk, Document
    from situate.tasks.contexts.structural import StructuralContextualizer
    from situate.tasks.corpus.readers.base import Place, Section
    from situate.tasks.corpus.sections import chunk_sections

    one = Place(chapter=1, chapter_title="Leases", heading_path=("Leases",))
    two = Place(chapter=2, chapter_title="Backoff", heading_path=("Retries",))
    jitter = replace(two, heading_path=("Retries", "Jitter"))
    sections = [Section("Leases", one, kind="heading", level=1),
                Section("A lease expires.", one),
                Section("Retries", two, kind="heading", level=1),
                Section("Jitter", jitter, kind="heading", level=2),
                Section("Full jitter.", jitter)]
    _, pieces = chunk_sections(sections, 800, 100)
    assert [p.where["heading_path"] for p in pieces] == [["Leases"], ["Backoff", "Retries", "Jitter"]]
    doc = Document("book.epub", "t", (), "book.epub", {"format": "epub"})
    chunk = Chunk(doc.id, 1, pieces[1].text, pieces[1].start, pieces[1].where)
    assert StructuralContextualizer().situate(doc, [chunk]).situated[0].context == (
        "From book.epub (e-book). Chapter 2 > Backoff > Retries > Jitter.")


def test_the_title_is_the_heading_a_document_opens_with(tmp_path: Path) -> None:
    """A page's <title> (and the PDF printed from it) is what a tool wrote, here the file's
    name; the page opens with its own title. Every format's document title is now that heading,
    as the Markdown's and the Word document's were."""
    from situate.tasks.corpus.load import load_corpus

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "child_process.html").write_text(
        "<html><head><title>child_process</title></head><body><h1>Child process</h1>"
        "<p>Spawn a subprocess and pipe its output.</p></body></html>")
    (corpus / "untitled.html").write_text(
        "<html><head><title>Queues</title></head><body><p>Workers lease jobs.</p>"
        "<h1>Leases</h1><p>A lease expires.</p></body></html>")
    titles = {d.id: d.metadata.get("document_title") for d in load_corpus(corpus).documents}
    assert titles == {"child_process.html": "Child process", "untitled.html": "Queues"}
