"""Loaders and chunking: the three corpus forms, and every kind of bad input."""

from __future__ import annotations

import json

import pytest

from situate.core.errors import InputError
from situate.tasks.corpus.chunking import chunk_text
from situate.tasks.corpus.load import load_corpus
from tests.conftest import CODEBASE, SAMPLE_CORPUS


def test_prechunked_codebase_loads_every_chunk_at_its_offset():
    corpus = load_corpus(CODEBASE / "codebase_chunks.json")
    assert corpus.form == "prechunked-json"
    assert len(corpus.documents) == 90
    assert corpus.chunk_count == 737
    for doc in corpus.documents:
        for c in doc.chunks:
            assert doc.text[c.start:c.start + len(c.text)] == c.text


def test_chunk_ids_are_deterministic_and_unique():
    a = load_corpus(CODEBASE / "codebase_chunks.json")
    b = load_corpus(CODEBASE / "codebase_chunks.json")
    ids_a = [c.id for d in a.documents for c in d.chunks]
    assert ids_a == [c.id for d in b.documents for c in d.chunks]
    assert len(set(ids_a)) == 737


def test_directory_walks_recursively_and_names_documents_by_relative_path():
    corpus = load_corpus(SAMPLE_CORPUS)
    ids = {d.id for d in corpus.documents}
    assert {"README.md", "harbor/queue.py", "harbor/backoff.rs", "docs/operations.md"} <= ids
    queue = next(d for d in corpus.documents if d.id == "harbor/queue.py")
    assert len(queue.chunks) > 1
    for c in queue.chunks:
        assert queue.text[c.start:c.start + len(c.text)] == c.text


def test_directory_skips_empty_and_binary_files(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\nSome text.\n")
    (tmp_path / "empty.txt").write_text("   \n")
    (tmp_path / "blob.py").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.md").write_text("hidden")
    corpus = load_corpus(tmp_path)
    assert [d.id for d in corpus.documents] == ["a.md"]
    assert corpus.skipped_empty == 1
    assert corpus.skipped_files == 2


def test_jsonl_documents_are_chunked_and_empty_ones_counted(tmp_path):
    f = tmp_path / "docs.jsonl"
    long_text = "\n\n".join(f"Paragraph {i}. " + "word " * 60 for i in range(20))
    lines = [
        {"id": "long", "text": long_text, "metadata": {"title": "Long one"}},
        {"id": 7, "text": "short document"},
        {"id": "blank", "text": "   "},
    ]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    corpus = load_corpus(f, chunk_size=500, chunk_overlap=50)
    assert [d.id for d in corpus.documents] == ["long", "7"]
    assert corpus.skipped_empty == 1
    assert corpus.documents[0].title == "Long one"
    assert all(len(c.text) <= 500 for c in corpus.documents[0].chunks)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": \n', "bad JSON at line 2"),
        ("noid.jsonl", '{"text": "x"}\n', "line 1 has no 'id'"),
        ("notext.jsonl", '{"id": "a"}\n', "line 1 (a) has no 'text'"),
        ("dup.jsonl", '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "duplicate id 'a'"),
        ("empty.jsonl", "", "is empty"),
        ("bad.json", '[{"doc_id": "d", "content": "x", "chunks": [}]', "bad JSON at line 1"),
        ("obj.json", '{"doc_id": "d"}', "expected a JSON list"),
        ("nochunks.json", '[{"doc_id": "d", "content": "x"}]', "has no 'chunks' list"),
        ("corpus.pdf", "not a pdf at all", "not a PDF"),
        ("corpus.xyz", "text", "unknown corpus form '.xyz'"),
        ("corpus.doc", "text", "legacy Word .doc: save it as .docx"),
    ],
)
def test_bad_input_names_the_file_and_the_problem(tmp_path, name, content, message):
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(InputError) as e:
        load_corpus(f)
    assert message in str(e.value)
    assert str(f) in str(e.value)


def test_missing_corpus(tmp_path):
    with pytest.raises(InputError, match="corpus not found"):
        load_corpus(tmp_path / "nope.json")


def test_empty_directory(tmp_path):
    with pytest.raises(InputError, match="no documents, text, Markdown or source files"):
        load_corpus(tmp_path)


# --- chunking ------------------------------------------------------------------------------------

def test_chunks_cover_the_text_in_order_with_bounded_size_and_overlap():
    text = "\n\n".join(f"def f{i}(x):\n    return x + {i}\n" * 3 for i in range(60))
    pieces = chunk_text(text, size=300, overlap=60)
    assert all(len(p) <= 300 for _, p in pieces)
    for start, piece in pieces:
        assert text[start:start + len(piece)] == piece
    # Every character is in some chunk, and consecutive chunks overlap by at most `overlap`.
    covered_to = 0
    for (s1, p1), (s2, _) in zip(pieces, pieces[1:], strict=False):
        assert s2 > s1
        assert s1 + len(p1) - s2 <= 60
    for s, p in pieces:
        assert s <= covered_to
        covered_to = max(covered_to, s + len(p))
    assert covered_to == len(text)


def test_code_is_cut_before_definitions_not_inside_them():
    body = "    x = 1\n    y = 2\n    return x + y\n"
    text = "".join(f"def function_{i}():\n{body}\n" for i in range(30))
    pieces = chunk_text(text, size=200, overlap=0)
    assert all(p.startswith("def function_") for _, p in pieces)


def test_a_single_long_line_is_cut_at_spaces():
    text = " ".join(f"word{i}" for i in range(400))
    pieces = chunk_text(text, size=100, overlap=0)
    assert "".join(p for _, p in pieces) == text
    assert all(len(p) <= 100 for _, p in pieces)
    assert all(p.endswith(" ") for _, p in pieces[:-1])


def test_short_and_blank_texts():
    assert chunk_text("hello", 100, 10) == [(0, "hello")]
    assert chunk_text("  \n ", 100, 10) == []
    with pytest.raises(InputError):
        chunk_text("x", 0, 0)
