"""Huge and hostile input: oversize files, invalid UTF-8, NUL bytes and lone surrogates, chunks too
long to store, empty and 100 kB queries; through the functions, one flow, and the real CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from situate.core.errors import InputError
from situate.tasks.corpus.load import MAX_CHUNK_BYTES, clean_text, load_corpus
from situate.tasks.retrieval.metrics import load_eval_set
from situate.tasks.retrieval.search import MAX_QUERY_CHARS, clean_query
from tests.conftest import ROOT, SAMPLE_CORPUS

SITUATE = Path(sys.executable).parent / "situate"
BIG_QUERY = ("how does the worker retry a failed job with backoff " * 2_000)[:100_000]


def _no_unstorable(text: str) -> bool:
    """What Milvus needs of a text: no NUL, and encodable as UTF-8 (no lone surrogate)."""
    text.encode("utf-8")
    return "\x00" not in text


def _stored_texts(corpus) -> list[str]:
    return [t for d in corpus.documents
            for t in (d.id, d.text, d.title, json.dumps(d.metadata, ensure_ascii=False),
                      *(c.text for c in d.chunks))]


# --- oversize files ------------------------------------------------------------------------------

def test_file_over_the_limit_is_skipped_unread_counted_and_logged(tmp_path, monkeypatch, caplog):
    from situate.core.settings import get_settings

    (tmp_path / "small.md").write_text("# Small\n\nFits.\n")
    big = tmp_path / "sub" / "huge.txt"
    big.parent.mkdir()
    big.write_text("x" * 5_000)
    monkeypatch.setenv("SITUATE_MAX_FILE_BYTES", "4096")
    get_settings.cache_clear()
    read = Path.read_bytes

    def guarded(self: Path) -> bytes:
        assert self.name != "huge.txt", "an oversize file was read"
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", guarded)
    try:
        with caplog.at_level(logging.WARNING, logger="situate.load"):
            corpus = load_corpus(tmp_path)
    finally:
        get_settings.cache_clear()
    assert [d.id for d in corpus.documents] == ["small.md"]
    assert corpus.skipped_large_files == 1 and corpus.skipped_files == 0
    log = caplog.text
    assert str(big) in log and "5000 bytes, over the 4096-byte limit" in log
    assert "skipped 1 file(s) over 4096 bytes" in log


def test_the_default_limit_is_10_mb_and_a_lone_oversize_file_is_refused(tmp_path):
    from situate.core.settings import Settings

    assert Settings().max_file_bytes == 10_000_000
    f = tmp_path / "one.txt"
    f.write_text("y" * 200)
    with pytest.raises(InputError) as e:
        load_corpus(f, max_file_bytes=100)
    assert f"{f}: 200 bytes, over the 100-byte limit for one file" in str(e.value)


def test_a_directory_of_only_oversize_files_is_not_called_empty(tmp_path):
    (tmp_path / "a.txt").write_text("z" * 300)
    corpus = load_corpus(tmp_path, max_file_bytes=100)
    assert corpus.documents == () and corpus.skipped_large_files == 1


def test_fifos_in_a_directory_are_skipped_not_read(tmp_path):
    (tmp_path / "a.md").write_text("text")
    os.mkfifo(tmp_path / "pipe.txt")  # reading it would block forever
    corpus = load_corpus(tmp_path)
    assert [d.id for d in corpus.documents] == ["a.md"] and corpus.skipped_files == 1


# --- invalid UTF-8 -------------------------------------------------------------------------------

def test_invalid_utf8_in_a_jsonl_line_names_that_line(tmp_path):
    f = tmp_path / "docs.jsonl"
    f.write_bytes(b'{"id": "a", "text": "fine \xc3\xa9"}\n\n'
                  b'{"id": "b", "text": "bad \xff byte"}\n{"id": "c", "text": "x"}\n')
    with pytest.raises(InputError) as e:
        load_corpus(f)
    assert str(e.value) == (f"{f}: line 3 is not UTF-8 text (byte 26 of the line); convert the "
                            "file to UTF-8")


def test_invalid_utf8_in_an_evaluation_set_names_the_line(tmp_path):
    f = tmp_path / "eval.jsonl"
    f.write_bytes(b'{"query": "q", "golden_chunks": [{"content": "x"}]}\n{"query": "\xc3("}\n')
    with pytest.raises(InputError, match=r"eval\.jsonl: line 2 is not UTF-8 text"):
        load_eval_set(f)


def test_invalid_utf8_in_a_prechunked_json_names_the_line(tmp_path):
    f = tmp_path / "chunks.json"
    f.write_bytes(b'[\n{"doc_id": "d",\n "content": "\xfe"}]')
    with pytest.raises(InputError, match=r"chunks\.json: line 3 is not UTF-8 text \(byte 14 of the line\)"):
        load_corpus(f)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    f = tmp_path / "docs.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"id": "a", "text": "hello"}\n')
    assert [d.id for d in load_corpus(f).documents] == ["a"]


# --- NUL bytes and lone surrogates ---------------------------------------------------------------

def test_clean_text_removes_nul_and_replaces_lone_surrogates():
    assert clean_text("plain") == ("plain", 0)
    assert clean_text("a\x00b\ud800c\udfffd") == ("ab\ufffdc\ufffdd", 3)
    assert clean_text("emoji \U0001F600 stays") == ("emoji \U0001F600 stays", 0)


def test_jsonl_text_with_nul_and_surrogates_is_cleaned_and_counted(tmp_path, caplog):
    f = tmp_path / "docs.jsonl"
    # JSON escapes: a NUL, a lone high and a lone low surrogate; a valid pair (an emoji) stays.
    f.write_text('{"id": "a", "text": "start\\u0000 mid \\ud800 end \\udc00 \\ud83d\\ude00", '
                 '"metadata": {"title": "T\\u0000\\udfff", "k\\u0000": ["v\\ud801"]}}\n'
                 '{"id": "b", "text": "clean"}\n')
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        corpus = load_corpus(f)
    a = corpus.documents[0]
    assert a.text == "start mid \ufffd end \ufffd \U0001F600"
    assert a.title == "T\ufffd" and a.metadata == {"title": "T\ufffd", "k": ["v\ufffd"]}
    assert corpus.cleaned_chars == 7
    assert all(_no_unstorable(t) for t in _stored_texts(corpus))
    assert a.chunks[0].hash  # hashing (UTF-8) works
    assert "document 'a'" in caplog.text and "cleaned 7 character(s) in 1 document(s)" in caplog.text


def test_prechunked_content_and_chunks_are_cleaned_and_chunks_still_located(tmp_path):
    f = tmp_path / "chunks.json"
    f.write_text(json.dumps([{
        "doc_id": "d", "content": "one\u0000 two \ud800 three",
        "chunks": [{"content": "one\u0000 ", "original_index": 0},
                   {"content": "two \ud800 three", "original_index": 1}]}]))
    corpus = load_corpus(f)
    doc = corpus.documents[0]
    assert doc.text == "one two \ufffd three"
    assert [(c.text, c.start) for c in doc.chunks] == [("one ", 0), ("two \ufffd three", 4)]
    assert corpus.cleaned_chars == 4


def test_directory_file_with_a_late_nul_is_cleaned(tmp_path):
    # A NUL in the first 4 kB marks a binary file (skipped); a stray one later is cleaned.
    (tmp_path / "log.txt").write_bytes(b"line\n" * 1_000 + b"bad\x00byte\n")
    corpus = load_corpus(tmp_path)
    assert corpus.cleaned_chars == 1
    assert "badbyte" in corpus.documents[0].text
    assert all(_no_unstorable(t) for t in _stored_texts(corpus))


@pytest.mark.parametrize(
    ("name", "content", "where", "what"),
    [
        ("docs.jsonl", '{"id": "a\\u0000b", "text": "x"}\n', "line 1", "a NUL byte"),
        ("docs.jsonl", '{"id": "ok", "text": "x"}\n{"id": "\\ud800", "text": "x"}\n', "line 2",
         "a lone surrogate"),
        ("chunks.json", '[{"doc_id": "d\\udc00", "content": "x", "chunks": [{"content": "x"}]}]',
         "document #1", "a lone surrogate"),
    ],
)
def test_document_ids_with_nul_or_surrogates_are_refused(tmp_path, name, content, where, what):
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(InputError) as e:
        load_corpus(f)
    message = str(e.value)
    assert message.startswith(f"{f}: {where}: document id ")
    assert f"contains {what}; ids are kept exact" in message


# --- chunks too long to store --------------------------------------------------------------------

def test_an_oversize_prechunked_chunk_is_skipped_and_the_rest_loaded(tmp_path, caplog):
    huge = "é" * 40_000  # 80,000 bytes
    f = tmp_path / "chunks.json"
    f.write_text(json.dumps([
        {"doc_id": "d1", "content": "alpha " + huge + " omega",
         "chunks": [{"content": "alpha ", "original_index": 0},
                    {"content": huge, "original_index": 1},
                    {"content": " omega", "original_index": 2}]},
        {"doc_id": "d2", "content": huge, "chunks": [{"content": huge, "original_index": 0}]},
        {"doc_id": "d3", "content": "fine", "chunks": [{"content": "fine", "original_index": 0}]},
    ]))
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        corpus = load_corpus(f)
    assert [(d.id, [c.index for c in d.chunks]) for d in corpus.documents] == [("d1", [0, 2]),
                                                                                ("d3", [0])]
    assert corpus.skipped_chunks == 2
    assert all(len(c.text.encode()) <= MAX_CHUNK_BYTES for d in corpus.documents for c in d.chunks)
    assert "skipped document 'd1', chunk 1" in caplog.text and "80000 bytes" in caplog.text
    assert "skipped document 'd2', chunk 0" in caplog.text
    assert "skipped 2 chunk(s) over 65535 bytes" in caplog.text


def test_situate_chunking_with_a_huge_chunk_size_skips_what_cannot_be_stored(tmp_path):
    f = tmp_path / "docs.jsonl"
    f.write_text(json.dumps({"id": "big", "text": "word " * 20_000}) + "\n"
                 + json.dumps({"id": "small", "text": "short"}) + "\n")
    corpus = load_corpus(f, chunk_size=100_000, chunk_overlap=0)
    assert [d.id for d in corpus.documents] == ["small"] and corpus.skipped_chunks == 1


# --- queries -------------------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "   \n\t", "\x00\x00"])
def test_an_empty_query_is_refused(query):
    with pytest.raises(InputError) as e:
        clean_query(query)
    assert str(e.value) == "empty query: give words to search for"


def test_a_long_query_is_cut_and_cleaned(caplog):
    with caplog.at_level(logging.WARNING, logger="situate.retrieve"):
        q = clean_query(BIG_QUERY)
    assert q == BIG_QUERY[:MAX_QUERY_CHARS] and MAX_QUERY_CHARS == 8_192
    assert "query of 100000 characters cut to its first 8192" in caplog.text
    assert clean_query("a\x00b \ud800") == "ab \ufffd"


def test_eval_set_queries_empty_refused_with_file_and_line_long_ones_cut(tmp_path):
    f = tmp_path / "eval.jsonl"
    golden = {"golden_chunks": [{"content": "x"}]}
    f.write_text(json.dumps({"query": BIG_QUERY, **golden}) + "\n")
    [q] = load_eval_set(f)
    assert q.query == BIG_QUERY[:MAX_QUERY_CHARS]
    f.write_text(json.dumps({"query": "fine", **golden}) + "\n"
                 + json.dumps({"query": "  ", **golden}) + "\n")
    with pytest.raises(InputError) as e:
        load_eval_set(f)
    assert str(e.value) == f"{f}: line 2: empty query: give words to search for"


def test_search_refuses_an_empty_query_before_opening_the_store(state):
    from situate.cli.options import SearchOptions

    with pytest.raises(InputError, match="^empty query: give words to search for$"):
        SearchOptions.build(query="  ", collection="never_ingested")
    assert not Path(state["milvus_uri"]).exists()


@pytest.mark.slow
def test_hostile_corpus_ingests_and_long_queries_search(prefect_harness, state, tmp_path):
    """NUL bytes, lone surrogates and an oversize chunk reach the store as clean rows (no Milvus
    error); a 100 kB query then searches in every mode."""
    from situate.cli.options import SearchOptions
    from situate.cli.search import search
    from tests.helpers import ingest, open_store

    f = tmp_path / "chunks.json"
    f.write_text(json.dumps([
        {"doc_id": "worker", "content": "the worker retries\u0000 a failed job \ud800 with backoff",
         "metadata": {"title": "W\udc00"},
         "chunks": [{"content": "the worker retries\u0000 a failed job \ud800 with backoff"}]},
        {"doc_id": "odd", "content": "z" * 70_000 + " tail",
         "chunks": [{"content": "z" * 70_000}, {"content": " tail"}]},
    ]))
    summary = ingest(corpus=str(f), collection="hostile", embedder="hash", context="structural")
    assert summary.rows == 2
    rows = sorted(open_store(state["milvus_uri"]).rows("hostile"), key=lambda r: r["doc_id"])
    assert [(r["doc_id"], r["chunk_index"]) for r in rows] == [("odd", 1), ("worker", 0)]
    assert rows[1]["text"] == "the worker retries a failed job \ufffd with backoff"
    for mode in ("dense", "bm25", "hybrid"):
        hits = search(SearchOptions.build(query=BIG_QUERY, collection="hostile", mode=mode, k=2))
        assert hits and hits[0].doc_id == "worker"


# --- through the real CLI ------------------------------------------------------------------------

def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {**os.environ, "SITUATE_MILVUS_URI": str(cwd / "m.db"),
            "SITUATE_CACHE_DIR": str(cwd / "cache"), "SITUATE_RESULTS_DIR": str(cwd / "results")}
    base.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([str(SITUATE), *args], cwd=ROOT, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=600)


def _one_error_line(r: subprocess.CompletedProcess, command: str) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"situate {command}: error: ")
    return lines[0]


@pytest.mark.slow
def test_cli_refuses_invalid_utf8_and_empty_queries_in_one_line(tmp_path):
    bad = tmp_path / "docs.jsonl"
    bad.write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "\xff"}\n')
    line = _one_error_line(_cli("ingest", str(bad), "--collection", "c", cwd=tmp_path), "ingest")
    assert line.endswith(f"{bad}: line 2 is not UTF-8 text (byte 22 of the line); convert the "
                         "file to UTF-8")

    line = _one_error_line(_cli("search", " ", "--collection", "c", cwd=tmp_path), "search")
    assert line == "situate search: error: empty query: give words to search for"

    ev = tmp_path / "eval.jsonl"
    ev.write_text('{"query": "", "golden_chunks": [{"content": "x"}]}\n')
    line = _one_error_line(_cli("evaluate", str(ev), "--collection", "c", cwd=tmp_path), "evaluate")
    assert line.endswith(f"{ev}: line 1: empty query: give words to search for")
    assert not (tmp_path / "m.db").exists()


@pytest.mark.slow
@pytest.mark.soak  # the soak tier (`make test-soak`): see README, Tests
def test_cli_hostile_corpus_then_100kb_queries(tmp_path):
    """One real ingest (MiniLM): an oversize file skipped and named, NUL bytes and lone surrogates
    cleaned; then a 100 kB query through `search` and in an evaluation set."""
    corpus = tmp_path / "corpus"
    (corpus / "notes").mkdir(parents=True)
    (corpus / "worker.md").write_text("# Worker\n\nThe worker retries a failed job with backoff.\n")
    (corpus / "notes" / "big.txt").write_text("q" * 20_000)
    (corpus / "log.txt").write_bytes(b"entry\n" * 1_000 + b"stray\x00nul\n")
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "s", "text": "lone \\ud800 surrogate and \\u0000 nul"}\n')
    env = {"SITUATE_MAX_FILE_BYTES": "10000"}

    r = _cli("ingest", str(corpus), "--collection", "h", cwd=tmp_path, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Traceback" not in out
    assert f"skipped {corpus / 'notes' / 'big.txt'}: 20000 bytes, over the 10000-byte limit" in out
    assert "skipped 1 file(s) over 10000 bytes" in out
    assert "document 'log.txt'" in out and "removed or replaced 1 NUL" in out

    r = _cli("ingest", str(docs), "--collection", "h", cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "cleaned 2 character(s) in 1 document(s)" in r.stderr

    r = _cli("search", BIG_QUERY, "--collection", "h", "--k", "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert "query of 100000 characters cut to its first 8192" in r.stderr
    assert "worker.md #0" in r.stdout

    ev = tmp_path / "eval.jsonl"
    ev.write_text(json.dumps({"query": BIG_QUERY, "golden_quotes": [
        {"doc_id": "worker.md", "quote": "retries a failed job"}]}) + "\n")
    r = _cli("evaluate", str(ev), "--collection", "h", "--k", "1,3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert "Pass@k (%) on h, 1 queries" in r.stdout


def test_sample_corpus_is_untouched_by_the_cleaning():
    corpus = load_corpus(SAMPLE_CORPUS)
    assert corpus.cleaned_chars == corpus.skipped_chunks == corpus.skipped_large_files == 0
