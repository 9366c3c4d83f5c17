"""Cutting read documents along their own structure, the place each chunk records, the structural
context that says it, and golden quotes that match across formats."""

from __future__ import annotations

from situate.core.records import Chunk, Document
from situate.tasks.contexts.structural import StructuralContextualizer
from situate.tasks.corpus.chunking import FORCED, chunk_text
from situate.tasks.corpus.readers.base import Place, Section
from situate.tasks.corpus.sections import chunk_sections
from situate.tasks.retrieval.metrics import Golden, normalize_quote


def _para(word: str, n: int) -> str:
    return " ".join(f"{word}{i}" for i in range(n)) + "."


def test_a_forced_boundary_is_cut_even_in_a_short_text_and_never_overlapped():
    text = "alpha beta\n\ngamma delta\n"
    pieces = chunk_text(text, 800, 100, {12: FORCED})
    assert [p for _, p in pieces] == ["alpha beta\n\n", "gamma delta\n"]
    assert [s for s, _ in pieces] == [0, 12]


def test_headings_outrank_paragraph_breaks_and_sections_are_not_overlapped():
    sections = [Section("Intro", kind="heading", level=1), Section(_para("a", 60)),
                Section(_para("b", 30)), Section("Refunds", kind="heading", level=2),
                Section(_para("c", 60))]
    text, pieces = chunk_sections(sections, 400, 100)
    starts = [p.start for p in pieces]
    assert text.index("Refunds") in starts  # cut before the heading, not mid-section
    refunds = next(p for p in pieces if p.text.startswith("Refunds"))
    assert refunds.where["heading_path"] == ["Intro", "Refunds"]
    before = pieces[starts.index(refunds.start) - 1]
    assert "Refunds" not in before.text and "c0" not in before.text  # no overlap across the edge
    assert all(len(p.text) <= 400 for p in pieces)
    assert "".join(text[p.start:p.start + len(p.text)] for p in pieces) == "".join(
        p.text for p in pieces)


def test_pages_are_packed_with_their_range_and_sheets_never_share_a_chunk():
    pages = [Section(f"page {n} text", Place(page=n)) for n in (1, 2, 3)]
    text, pieces = chunk_sections(pages, 800, 100)
    assert len(pieces) == 1 and pieces[0].where == {"page": 1, "page_end": 3}
    sheets = [Section("a | b", Place(sheet="Q1", rows=(1, 2))),
              Section("c | d", Place(sheet="Q1", rows=(3, 4))),
              Section("e | f", Place(sheet="Q2", rows=(1, 1)))]
    _, pieces = chunk_sections(sheets, 800, 100)
    assert [p.where for p in pieces] == [{"sheet": "Q1", "rows": [1, 4]},
                                        {"sheet": "Q2", "rows": [1, 1]}]


def test_slides_with_notes_and_cells_keep_their_place():
    sections = [Section("Roadmap", Place(slide=4, slide_title="Roadmap")),
                Section("ship it", Place(slide=4, slide_title="Roadmap", notes=True),
                        kind="notes")]
    _, pieces = chunk_sections(sections, 800, 100)
    assert pieces[0].where == {"slide": 4, "slide_title": "Roadmap", "notes": True}
    cells = [Section("# Setup", Place(cell=1, cell_type="markdown")),
             Section("x = 1", Place(cell=2, cell_type="code"), kind="code")]
    _, pieces = chunk_sections(cells, 800, 100)
    assert pieces[0].where == {"cell": 1, "cell_end": 2, "cell_type": "mixed"}


def _context(doc: Document, chunk: Chunk) -> str:
    return StructuralContextualizer().situate(doc, [chunk]).situated[0].context


def test_the_structural_context_says_the_format_title_and_place():
    doc = Document("docs/handbook.pdf", "text", (), "docs/handbook.pdf",
                   {"format": "pdf", "document_title": "Employee Handbook"})
    chunk = Chunk(doc.id, 0, "text", 0, {"page": 12, "heading_path": ["3 Money", "3.2 Refunds"]})
    assert _context(doc, chunk) == ("From docs/handbook.pdf (PDF: Employee Handbook). "
                                    "Page 12 > 3 Money > 3.2 Refunds.")
    slides = Document("deck.pptx", "t", (), "deck.pptx", {"format": "pptx"})
    chunk = Chunk("deck.pptx", 0, "t", 0, {"slide": 4, "slide_end": 5, "slide_title": "Plan",
                                           "notes": True})
    assert _context(slides, chunk) == "From deck.pptx (slides). Slides 4-5: Plan (with speaker notes)."
    sheet = Document("c.xlsx", "t", (), "c.xlsx", {"format": "xlsx"})
    assert _context(sheet, Chunk("c.xlsx", 0, "t", 0, {"sheet": "Q3", "rows": [1, 50]})) == (
        "From c.xlsx (spreadsheet). Sheet Q3, rows 1-50.")


def test_golden_quotes_match_across_formats():
    golden = Golden(doc_id="guide/setup.md", quote="the well-known “retrieval” step")
    pdf_text = "the well-\nknown \u201cretrie\u2010\nval\u201d   step"
    assert golden.matches("guide/setup.pdf", pdf_text)
    assert golden.matches("guide/setup.html", 'the well-known "retrieval"\n step')
    assert not golden.matches("other/setup.pdf", pdf_text)
    assert not golden.matches("guide/setup.pdf", "the well known retrieval step")
    assert normalize_quote("e\ufb03cient  \n text") == "efficient text"
    assert Golden(doc_id="api/dns.md", quote="`dns.lookup()` uses the OS").matches(
        "api/dns.pdf", "dns.lookup() uses\nthe OS")


MARKDOWN = """---
title: front matter is metadata
---
# DNS

<!--introduced_in=v0.10.0-->

The [Domain Name System (DNS)][] resolves names; see [`dns.lookup()`](#dnslookup) and
![a diagram](img/dns.png).

Resolvers
---------

```js
// # not a heading
dns.lookup('example.org');
```

[Domain Name System (DNS)]: https://en.wikipedia.org/wiki/Domain_Name_System
"""


def test_markdown_is_read_as_rendered_with_headings_and_verbatim_code():
    from situate.tasks.corpus.readers.markdown import markdown_sections

    sections = list(markdown_sections(MARKDOWN))
    assert [(s.kind, s.level, s.text) for s in sections] == [
        ("heading", 1, "DNS"),
        ("text", 0, "The Domain Name System (DNS) resolves names; see `dns.lookup()` and\na diagram."),
        ("heading", 2, "Resolvers"),
        ("code", 0, "// # not a heading\ndns.lookup('example.org');"),
    ]
    text, pieces = chunk_sections(sections, 800, 100)
    assert "front matter" not in text and "wikipedia" not in text and "introduced_in" not in text
    assert pieces[0].where == {"heading_path": ["DNS"]}
