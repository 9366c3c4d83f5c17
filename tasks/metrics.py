"""Evaluation sets and Pass@k, exactly as the codebase benchmark defines it.

Pass@k: for each query, the fraction of its golden chunks whose content (stripped) equals the
content of one of the first k retrieved chunks; averaged over all queries, in percent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from situate.core.errors import InputError
from situate.tasks.load import iter_jsonl
from situate.tasks.retrieve import clean_query


@dataclass(frozen=True)
class Golden:
    """One golden chunk: its exact content (the benchmark's form), or a document and a quote.

    The quote form keeps hand-written evaluation sets valid when the chunking changes: a retrieved
    chunk matches if it comes from `doc_id` and contains `quote`.
    """

    content: str = ""
    doc_id: str = ""
    quote: str = ""

    def matches(self, doc_id: str, text: str) -> bool:
        if self.content:
            return text.strip() == self.content
        return doc_id == self.doc_id and self.quote in text


@dataclass(frozen=True)
class EvalQuery:
    query: str
    golden: tuple[Golden, ...]


def load_eval_set(path: str | Path) -> list[EvalQuery]:
    """Read an evaluation JSONL; every problem is one InputError naming the file and the line.

    Each line needs `query` and its golden chunks: `golden_chunks` (objects with `content`, the
    benchmark's format) or `golden_quotes` (objects with `doc_id` and `quote`). A query is cleaned
    and bounded as `situate search` does it (`clean_query`); a blank one is an error.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"evaluation set not found: {p} (give a JSONL file, one query a line)")
    if p.is_dir():
        raise InputError(f"{p} is a directory; give the evaluation set's JSONL file")
    queries: list[EvalQuery] = []
    for number, item in iter_jsonl(p):
        query = item.get("query")
        if not isinstance(query, str):
            raise InputError(f"{p}: line {number} has no 'query' string")
        try:
            query = clean_query(query)
        except InputError as e:
            raise InputError(f"{p}: line {number}: {e}") from None
        golden: list[Golden] = []
        if isinstance(item.get("golden_chunks"), list):
            for g in item["golden_chunks"]:
                if not isinstance(g, dict) or not isinstance(g.get("content"), str):
                    raise InputError(f"{p}: line {number}: every golden_chunks entry needs 'content'")
                golden.append(Golden(content=g["content"].strip()))
        elif isinstance(item.get("golden_quotes"), list):
            for g in item["golden_quotes"]:
                if not (isinstance(g, dict) and isinstance(g.get("doc_id"), str)
                        and isinstance(g.get("quote"), str) and g["quote"]):
                    raise InputError(f"{p}: line {number}: every golden_quotes entry needs "
                                     "'doc_id' and a non-empty 'quote'")
                golden.append(Golden(doc_id=g["doc_id"], quote=g["quote"]))
        if not golden:
            raise InputError(f"{p}: line {number} has no golden chunks ('golden_chunks' with "
                             "'content', or 'golden_quotes' with 'doc_id' and 'quote')")
        queries.append(EvalQuery(query, tuple(golden)))
    return queries


def pass_at_k(golden: Sequence[Golden], retrieved: Sequence[tuple[str, str]], k: int) -> float:
    """Fraction (0..1) of golden chunks matched by one of the first k retrieved (doc_id, text)."""
    if not golden:
        return 0.0
    top = retrieved[:k]
    return sum(1 for g in golden if any(g.matches(d, t) for d, t in top)) / len(golden)


def mean_pass_at_k(cases: Sequence[tuple[Sequence[Golden], Sequence[tuple[str, str]]]],
                   k: int) -> float:
    """Pass@k over many (golden, retrieved) cases, in percent."""
    if not cases:
        return 0.0
    return 100.0 * sum(pass_at_k(g, r, k) for g, r in cases) / len(cases)


def parse_ks(text: str) -> list[int]:
    """'5,10,20' -> [5, 10, 20]; an InputError for anything else."""
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--k must be comma-separated positive integers, got {text!r}") from None
    if not ks or ks[0] <= 0:
        raise InputError(f"--k must be comma-separated positive integers, got {text!r}")
    return ks
