"""The reStructuredText reader: section titles as the structure (levels by first use of each
adornment style), literal blocks and code directives verbatim, tables as written, inline markup by
its text; every sentence of the file in some chunk, and a chunk's context names its section as a
Markdown chunk's does."""

from __future__ import annotations

from pathlib import Path

import pytest

from situate.tasks.contexts.structural import StructuralContextualizer
from situate.tasks.corpus.coverage import plain_sentences, sentence_coverage
from situate.tasks.corpus.load import load_corpus
from situate.tasks.corpus.readers import Unreadable, read_document, reader_for
from situate.tasks.corpus.readers.rst import clean_inline, rst_sections

GUIDE = """\
=========
The Guide
=========

:Author: Someone Careful

The guide opens with ``inline code``, a `link to the site <https://example.com>`_ and some
*emphasis* in its first paragraph.

.. contents::
   :depth: 2

.. _install:

Install
=======

Use **pip** to install it. See :ref:`the reference <api>` and :func:`situate.load` for more.

From source
-----------

Clone the repository and build it::

    git clone https://example.com/x.git
    cd x

    make setup

Then run the check before every commit.

.. code-block:: python
   :linenos:

   import situate
   situate.load("corpus")

.. note::
   Keep the virtual environment inside the repository.

   The second paragraph of the note says more.

+-------+-------+
| Name  | Value |
+=======+=======+
| alpha | 1     |
+-------+-------+

.. a comment the page does not show
   over two lines

Usage
=====

Run the tool [#f1]_ with Python_ on a corpus of your own.

.. [#f1] The footnote tells the reader where to look.

.. _Python: https://python.org

----

Going further
~~~~~~~~~~~~~

The last section has the last words of the guide.
"""

SENTENCES = [
    "The guide opens with inline code, a link to the site and some emphasis in its first paragraph.",
    "Use pip to install it.", "See the reference and situate.load for more.",
    "Clone the repository and build it:", "Then run the check before every commit.",
    "Keep the virtual environment inside the repository.",
    "The second paragraph of the note says more.", "Run the tool with Python on a corpus of your own.",
    "The footnote tells the reader where to look.",
    "The last section has the last words of the guide.",
]


def _sections(text: str) -> list[tuple[str, int, str]]:
    return [(s.kind, s.level, s.text) for s in rst_sections(text)]


def test_the_reader_claims_rst() -> None:
    reader = reader_for(".RST")
    assert reader is not None and (reader.format, reader.label) == ("rst", "reStructuredText")


def test_titles_levels_code_and_tables() -> None:
    got = _sections(GUIDE)
    assert [(kind, level, text) for kind, level, text in got if kind == "heading"] == [
        ("heading", 1, "The Guide"), ("heading", 2, "Install"), ("heading", 3, "From source"),
        ("heading", 2, "Usage"), ("heading", 4, "Going further")]
    code = [text for kind, _, text in got if kind == "code"]
    assert code == ["git clone https://example.com/x.git\ncd x\n\nmake setup",
                    'import situate\nsituate.load("corpus")']
    tables = [text for kind, _, text in got if kind == "table"]
    assert tables == ["+-------+-------+\n| Name  | Value |\n+=======+=======+\n| alpha | 1     |\n"
                      "+-------+-------+"]
    texts = " ".join(text for kind, _, text in got if kind == "text")
    assert "comment" not in texts and "https://python.org" not in texts and "depth" not in texts
    assert "Clone the repository and build it:" in texts and "::" not in texts


def test_levels_follow_the_first_use_of_each_style() -> None:
    text = "Part\n####\n\nA\n***\n\nB\n===\n\nC\n***\n\nD\n===\n"
    assert [(level, t) for kind, level, t in _sections(text) if kind == "heading"] == [
        (1, "Part"), (2, "A"), (3, "B"), (2, "C"), (3, "D")]
    over = "=====\nTitle\n=====\n\nSub\n=====\n"  # overlined and not: two styles
    assert [level for kind, level, _ in _sections(over) if kind == "heading"] == [1, 2]


def test_what_is_not_a_title() -> None:
    text = "Some text\nover lines\n=========\n\nAb\n--\n\nA longer line of text\n---\n"
    got = _sections(text)
    assert [kind for kind, _, _ in got] == ["text", "heading", "text"]
    assert got[0][2] == "Some text\nover lines\n========="  # inside a paragraph: text
    assert got[2][2] == "A longer line of text\n---"  # an underline too short for its title


def test_inline_markup_by_its_text() -> None:
    assert clean_inline("``a *b*`` and *c* and **d** and `e <f>`_ and :class:`G` and h_") == (
        "a *b* and c and d and e and G and h")
    assert clean_inline("__init__ and snake_case stay") == "__init__ and snake_case stay"


def test_a_chunk_under_a_section_is_situated_by_it(tmp_path: Path) -> None:
    (tmp_path / "guide.rst").write_text(GUIDE, encoding="utf-8")
    (tmp_path / "guide.md").write_text("# The Guide\n\n## Install\n\n### From source\n\nClone it.\n",
                                       encoding="utf-8")
    corpus = load_corpus(tmp_path, chunk_size=300, chunk_overlap=0)
    docs = {d.id: d for d in corpus.documents}
    rst = docs["guide.rst"]
    assert rst.metadata["format"] == "rst" and rst.metadata["document_title"] == "The Guide"
    contexts = StructuralContextualizer().situate(rst, rst.chunks).situated
    note = next(s for s in contexts if s.chunk.text.startswith("Keep the virtual environment"))
    assert note.chunk.where["heading_path"] == ["The Guide", "Install", "From source"]
    assert note.context == ("From guide.rst (reStructuredText: The Guide). "
                             "The Guide > Install > From source.")
    md = docs["guide.md"]
    md_context = StructuralContextualizer().situate(md, md.chunks).situated[-1].context
    assert md_context == "From guide.md (Markdown: The Guide). The Guide > Install > From source."


@pytest.mark.parametrize("size", [200, 800])
def test_every_sentence_is_in_a_chunk(tmp_path: Path, size: int) -> None:
    (tmp_path / "guide.rst").write_text(GUIDE, encoding="utf-8")
    chunks = [c.text for d in load_corpus(tmp_path, chunk_size=size, chunk_overlap=0).documents
              for c in d.chunks]
    assert plain_sentences(" ".join(SENTENCES))  # the sentences count as the coverage test counts
    got = sentence_coverage(SENTENCES, chunks)
    assert got.missing == []
    words = {w.strip(".,:;()*`_[]#") for w in " ".join(SENTENCES).split()}
    assert words <= {w.strip(".,:;()*`_[]#") for c in chunks for w in c.split()}


def test_not_rst_is_unreadable(tmp_path: Path) -> None:
    binary = tmp_path / "x.rst"
    binary.write_bytes(b"\x00\x01binary")
    with pytest.raises(Unreadable, match="not reStructuredText"):
        read_document(binary, max_bytes=1 << 20)
    latin = tmp_path / "y.rst"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(Unreadable, match="not UTF-8"):
        read_document(latin, max_bytes=1 << 20)
    big = tmp_path / "z.rst"
    big.write_text("word " * 100, encoding="utf-8")
    with pytest.raises(Unreadable, match="too large"):
        read_document(big, max_bytes=100)
