"""Every reader keeps the text: the same Markdown (tests/data/coverage/source.md) as Markdown, HTML
(pandoc -s, with and without --section-divs), EPUB 3, DOCX (pandoc) and PDF (headless Chromium's
print of pandoc's HTML), each loaded as ingest loads it; at least 99.5% of the source's sentences
(as `pandoc -t plain` shows them) must be in the chunks, verbatim after whitespace normalization.

The fixtures are generated files, committed with the script that remakes them
(tests/data/coverage/make_fixtures.sh: pandoc 2.17.1.1, Chromium 156 here), so the test needs
neither tool and reads the same bytes everywhere; benchmarks/bench_formats.py converts a larger
corpus with the tools at hand each time it runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from situate.tasks.corpus.coverage import plain_sentences, sentence_coverage
from situate.tasks.corpus.load import load_corpus

DATA = Path(__file__).parent / "data" / "coverage"
SENTENCES = plain_sentences((DATA / "source.txt").read_text(encoding="utf-8"))


def _chunks(tmp_path: Path, name: str) -> list[str]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(DATA / name, corpus / name)
    loaded = load_corpus(corpus)
    assert [d.id for d in loaded.documents] == [name]
    return [c.text for d in loaded.documents for c in d.chunks]


def test_the_source_has_the_sentences_the_tests_count() -> None:
    assert len(SENTENCES) == 48
    assert "Run the check before every commit." in SENTENCES  # list items count too


@pytest.mark.parametrize("name", ["source.md", "guide.html", "guide-sections.html", "guide.epub",
                                  "guide.docx", "guide.pdf"])
def test_every_format_keeps_the_sentences(tmp_path: Path, name: str) -> None:
    got = sentence_coverage(SENTENCES, _chunks(tmp_path, name))
    assert got.share >= 0.995, f"{name}: {got.found}/{got.total}, missing {got.missing}"


@pytest.mark.parametrize("name", ["guide-sections.html", "guide.epub"])
def test_nested_sections_keep_every_paragraph(tmp_path: Path, name: str) -> None:
    """pandoc's --section-divs page (and its EPUB, sectioned the same way): one section holds most
    of the text, which the reader once took as the page's content and read alone, losing the
    introduction and the other sections. Every sentence of every paragraph must be there."""
    paragraphs = [p for p in (DATA / "source.txt").read_text(encoding="utf-8").split("\n\n")
                  if p.strip()[-1:] in ".!?" and not p.startswith("  ")]
    assert len(paragraphs) == 23  # the list (three items) is one of them
    assert all(plain_sentences(p) for p in paragraphs)  # every paragraph has sentences counted
    got = sentence_coverage(SENTENCES, _chunks(tmp_path, name))
    assert got.missing == []
