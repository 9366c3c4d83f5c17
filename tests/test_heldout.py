"""The held-out evaluation sets' builders (benchmarks/heldout.py): the query never stays in the
corpus verbatim, and its golden quote is in the corpus exactly once."""

from __future__ import annotations

import json

from benchmarks.heldout import build_markdown, strip_sections

DOC = """# Title

Intro paragraph that belongs to no section heading at all here.

## `fs.read(fd)`

<!-- YAML
added: v0.1.0
-->

* `fd` {integer}

Reads data from the file specified by `fd` into a buffer. It then
calls the callback. More text follows here.

```js
fs.read(fd);  // Reads data from the file specified
```

### Event: `'close'`

Short one.

### `fs.write(fd)`

Writes data to the file specified by the descriptor given to it.
"""


def test_a_sections_first_sentence_becomes_its_query_and_leaves_the_text():
    kept, pairs = strip_sections(DOC)
    assert pairs == [
        ("Reads data from the file specified by `fd` into a buffer.", "## `fs.read(fd)`"),
        ("Writes data to the file specified by the descriptor given to it.", "### `fs.write(fd)`"),
    ]  # lists, comments and code are skipped; a sentence under six words is no query
    for query, heading in pairs:
        assert query not in kept and kept.count(heading) == 1
    assert "It then calls the callback. More text follows here." in kept  # the rest stays
    assert "Intro paragraph" in kept and "Short one." in kept
    assert "// Reads data from the file specified" in kept  # code blocks are left alone


def test_build_markdown_writes_a_corpus_and_an_evaluation_set(tmp_path):
    src = tmp_path / "docs"
    src.mkdir()
    (src / "fs.md").write_text(DOC)
    (src / "big.md").write_text(DOC + "x" * 500)
    summary = build_markdown(tmp_path / "out", src, max_bytes=len(DOC.encode()) + 10)
    assert summary["files"] == 1 and summary["queries"] == 2
    lines = [json.loads(x) for x in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    assert lines[0]["golden_quotes"] == [{"doc_id": "fs.md", "quote": "## `fs.read(fd)`"}]
    assert not (tmp_path / "out" / "corpus" / "big.md").exists()
