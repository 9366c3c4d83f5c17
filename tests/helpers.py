"""Shortcuts the tests share: a flow run from keyword options, as the CLI builds them, and stores
opened by a test (closed by the `state` fixture when the test ends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_opened: list[Any] = []


def ingest(**options: Any) -> Any:
    """`ingest_flow` on IngestOptions built from `options` (None: left to the settings)."""
    from situate.flows.ingest import ingest_flow
    from situate.pipeline.options import IngestOptions

    return ingest_flow(IngestOptions.build(**options))


def evaluate(**options: Any) -> Any:
    """`evaluate_flow` on EvaluateOptions built from `options`."""
    from situate.flows.evaluate import evaluate_flow
    from situate.pipeline.options import EvaluateOptions

    return evaluate_flow(EvaluateOptions.build(**options))


def open_store(uri: str) -> Any:
    """A MilvusStore on `uri`, closed when the test ends."""
    from situate.storage.milvus import MilvusStore

    opened = MilvusStore(uri)
    _opened.append(opened)
    return opened


def close_opened() -> None:
    while _opened:
        _opened.pop().close()


def zip_bomb(path: Path) -> None:
    """A .docx whose one member inflates to 300 MB (over the 200 MB default limit), written
    from a stream so the test never holds it: 300 KB on disk."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("word/document.xml", "w",
                                                                       force_zip64=True) as f:
        block = b"\0" * (1 << 20)
        for _ in range(300):
            f.write(block)


def write_bad_inputs(folder: Path, with_zip_bomb: bool = True) -> None:
    """In `folder`, a file (or folder) for each kind of bad corpus or evaluation set the README's
    bad-input table lists."""
    (folder / "bad.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": \n')
    (folder / "empty.json").write_text("")
    (folder / "notes.pdf").write_text("plain text, not a PDF")
    (folder / "notes.xyz").write_text("x")
    (folder / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504)
    if with_zip_bomb:
        zip_bomb(folder / "bomb.docx")
    (folder / "notext.jsonl").write_text('{"id": "a", "body": "x"}\n')
    (folder / "dup.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    (folder / "shape.json").write_text('{"documents": []}')
    (folder / "nothing").mkdir()
    (folder / "nothing" / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (folder / "big.txt").write_text("word " * 100)
    (folder / "latin1.jsonl").write_bytes('{"id": "a", "text": "caf\xe9"}\n'.encode("latin-1"))
    (folder / "nulid.jsonl").write_text('{"id": "a\\u0000b", "text": "x"}\n')
    (folder / "emptyq.jsonl").write_text('{"query": "  ", "golden_chunks": [{"doc_id": "d", '
                                         '"chunk_index": 0}]}\n')
    (folder / "nogolden.jsonl").write_text('{"query": "where", "golden_chunks": []}\n')
    (folder / "one.jsonl").write_text('{"id": "a", "text": "One document, one line."}\n')


def huge_and_small(folder: Path) -> None:
    """A Markdown corpus in `folder`: one document over a 3,000-token context window (sorted first, so a
    run meets it while the others are in flight) and 12 small ones."""
    folder.mkdir(exist_ok=True)
    (folder / "a_huge.md").write_text("# Huge\n\n" + "\n\n".join(
        f"Paragraph {i} of a document far larger than the model can read. " * 4 for i in range(60)))
    for n in range(12):
        (folder / f"doc_{n:02}.md").write_text("\n\n".join(
            f"## Part {i}\n\nDocument {n} part {i} says something worth indexing. " * 6
            for i in range(6)))


def searches_like_fresh(uri: str, synced: str, fresh: str, queries: int = 4) -> None:
    """`synced` (a collection kept up to date) against `fresh` (a fresh ingest of the same state):
    the same ids with the same stored vectors (within 1e-5), and, for a few queries drawn from
    the documents' own words, the same (id, score to 5 places) lists in every mode (dense, bm25,
    hybrid) and k (1, 3, 5, 10, 20)."""
    import re

    import numpy as np

    from situate.api.retriever import Retriever

    store = open_store(uri)
    rows = {name: {r["id"]: r for r in store.rows(name, fields=("id", "text", "dense"))}
            for name in (synced, fresh)}
    assert sorted(rows[synced]) == sorted(rows[fresh]) and rows[fresh]
    for row_id, row in rows[fresh].items():
        assert np.allclose(rows[synced][row_id]["dense"], row["dense"], rtol=0, atol=1e-5), row_id
    texts = [rows[fresh][i]["text"] for i in sorted(rows[fresh])]
    words = sorted({w.lower() for t in texts for w in re.findall(r"[A-Za-z]{4,}", t)})
    asked = [*words[::max(1, len(words) // queries)][:queries],
             " ".join(re.findall(r"\w+", texts[len(texts) // 2])[:8])]
    answers = {}
    for name in (synced, fresh):
        with Retriever(name, uri) as retriever:
            answers[name] = {(mode, k, q): [(h.id, round(h.score, 5)) for h in
                                            retriever.search(q, k, mode)]
                             for mode in ("dense", "bm25", "hybrid") for k in (1, 3, 5, 10, 20)
                             for q in asked}
    for key, fresh_hits in answers[fresh].items():
        assert answers[synced][key] == fresh_hits, key
