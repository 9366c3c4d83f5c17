"""How much of a document a reader keeps: the share of the source's sentences that appear verbatim
in the chunks made from it.

The measure behind the readers' coverage tests (tests/test_coverage.py) and the formats benchmark
(benchmarks/bench_formats.py): the same text written once (Markdown) and converted to each format,
the source's sentences as a renderer shows them (`pandoc -t plain`), and each looked for in the
chunks of the converted document after `normalize_quote` (whitespace runs collapsed, line-end
hyphenation joined, typographic quotes and compatibility forms folded), as a golden quote is
matched at evaluation. A sentence cut across two chunks counts as missing: search can only find
what one chunk holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from situate.core.text import normalize_quote

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_LIST_MARKER = re.compile(r"^(?:[-*+]|\d+[.)])\s+")


@dataclass
class Coverage:
    """`found` of `total` sentences were in some chunk; `missing` lists the others."""

    total: int
    found: int
    missing: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.found / self.total if self.total else 1.0


def plain_sentences(plain: str, min_words: int = 4) -> list[str]:
    """The sentences of a plain-text rendering (`pandoc -t plain --wrap=none`: one paragraph or
    list item a line): prose paragraphs and list items (without their markers), cut after . ! or ?
    before a capital; table rows and code (indented lines) and headings (no final punctuation)
    left out, as are pieces under `min_words` words."""
    out = []
    for line in plain.splitlines():
        if line.startswith("  "):
            continue  # a table row or a code block, laid out differently by every format
        line = _LIST_MARKER.sub("", line.strip())
        for piece in _SENTENCE_END.split(line):
            if len(piece.split()) >= min_words and piece[-1] in ".!?":
                out.append(piece)
    return out


def sentence_coverage(sentences: Iterable[str], chunks: Iterable[str]) -> Coverage:
    """How many of `sentences` appear in some one of `chunks`, both normalized as golden quotes are
    (hyphens also ignored, as `Golden.matches` does for a word broken at a line end)."""
    texts = [normalize_quote(c) for c in chunks]
    bare = [t.replace("-", "") for t in texts]
    found = 0
    missing = []
    total = 0
    for sentence in sentences:
        total += 1
        want = normalize_quote(sentence)
        if any(want in t for t in texts) or any(want.replace("-", "") in t for t in bare):
            found += 1
        else:
            missing.append(sentence)
    return Coverage(total, found, missing)
