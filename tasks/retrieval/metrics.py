"""Evaluation sets and Pass@k, exactly as the codebase benchmark defines it.

Pass@k: for each query, the fraction of its golden chunks whose content (stripped) equals the
content of one of the first k retrieved chunks; averaged over all queries, in percent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath

from situate.core.errors import InputError
from situate.core.text import normalize_quote
from situate.tasks.corpus.load import iter_jsonl
from situate.tasks.retrieval.search import MAX_K, clean_query


@lru_cache(maxsize=4096)
def _normalized(text: str) -> tuple[str, str]:
    """A chunk's text normalized, and without hyphens: a compound cut at a line end ("well-" /
    "known") cannot be told from a word cut in two, so the second form lets "well-known" match
    either reading."""
    joined = normalize_quote(text)
    return joined, joined.replace("-", "")


def _stem(doc_id: str) -> str:
    path = PurePosixPath(doc_id)
    return str(path.with_suffix("")) if path.suffix else doc_id


@dataclass(frozen=True)
class Golden:
    """One golden chunk: its exact content (the benchmark's form), or a document and a quote.

    The quote form keeps hand-written evaluation sets valid when the chunking or the format
    changes: a retrieved chunk matches if it comes from `doc_id` (or from the same path with
    another extension: `guide.md`'s quote matches in `guide.pdf`) and contains `quote`, both
    compared after `normalize_quote`.
    """

    content: str = ""
    doc_id: str = ""
    quote: str = ""
    # Where the chunk comes from, for reports only (the benchmark's `meta.relative_path`).
    source: str = ""
    _quote: tuple[str, str] = field(default=("", ""), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        quote = normalize_quote(self.quote)
        object.__setattr__(self, "_quote", (quote, quote.replace("-", "")))

    def matches(self, doc_id: str, text: str) -> bool:
        if self.content:
            return text.strip() == self.content
        if doc_id != self.doc_id and _stem(doc_id) != _stem(self.doc_id):
            return False
        if self.quote in text:
            return True
        joined, bare = _normalized(text)
        return self._quote[0] in joined or self._quote[1] in bare


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
        # The benchmark names each golden document's path in `golden_documents[].meta`.
        documents = item.get("golden_documents")
        paths = {str(d.get("uuid")): str(d["meta"].get("relative_path") or "")
                 for d in (documents if isinstance(documents, list) else [])
                 if isinstance(d, dict) and isinstance(d.get("meta"), dict)}
        if isinstance(item.get("golden_chunks"), list):
            for g in item["golden_chunks"]:
                if not isinstance(g, dict) or not isinstance(g.get("content"), str):
                    raise InputError(f"{p}: line {number}: every golden_chunks entry needs 'content'")
                doc_id = str(g.get("doc_id") or g.get("doc_uuid") or "")
                golden.append(Golden(content=g["content"].strip(), doc_id=doc_id,
                                     source=paths.get(doc_id, "")))
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


def golden_ranks(golden: Sequence[Golden], retrieved: Sequence[tuple[str, str]]) -> list[int | None]:
    """For each golden chunk, the 1-based rank of the first retrieved (doc_id, text) it matches, or
    None when none of `retrieved` does: the failure analysis' raw data (Pass@k is the share of
    ranks <= k)."""
    return [next((rank for rank, (d, t) in enumerate(retrieved, start=1) if g.matches(d, t)), None)
            for g in golden]


def pass_at_k_of_ranks(ranks: Sequence[Sequence[int | None]], k: int) -> float:
    """Pass@k in percent from `golden_ranks` per query: the same figure as `mean_pass_at_k`,
    without matching the chunks again."""
    if not ranks:
        return 0.0
    shares = [sum(1 for r in q if r is not None and r <= k) / len(q) if q else 0.0 for q in ranks]
    return 100.0 * sum(shares) / len(ranks)


def miss_sources(dense: Sequence[Sequence[int | None]],
                 bm25: Sequence[Sequence[int | None]]) -> dict[str, int]:
    """Golden chunks (not queries) counted by which retriever never ranked them: `dense_only`
    (BM25 found it), `bm25_only` (dense found it), `both`; `golden_chunks` is the total. Each
    argument holds one list of ranks (None: not retrieved) per query, as `golden_ranks` gives."""
    counts = {"golden_chunks": 0, "dense_only": 0, "bm25_only": 0, "both": 0}
    for d_ranks, b_ranks in zip(dense, bm25, strict=True):
        for d, b in zip(d_ranks, b_ranks, strict=True):
            counts["golden_chunks"] += 1
            if d is None and b is None:
                counts["both"] += 1
            elif d is None:
                counts["dense_only"] += 1
            elif b is None:
                counts["bm25_only"] += 1
    return counts


def latency_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Median and 95th percentile (nearest rank) of per-query times, in milliseconds."""
    if not seconds:
        return {"median": 0.0, "p95": 0.0}
    ordered = sorted(seconds)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    p95 = ordered[max(0, math.ceil(0.95 * n) - 1)]
    return {"median": round(1000 * median, 2), "p95": round(1000 * p95, 2)}


def parse_ks(text: str) -> list[int]:
    """'5,10,20' -> [5, 10, 20]; an InputError for anything else."""
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--k must be comma-separated positive integers, got {text!r}") from None
    if not ks or ks[0] <= 0:
        raise InputError(f"--k must be comma-separated positive integers, got {text!r}")
    if ks[-1] > MAX_K:
        raise InputError(f"--k {ks[-1]} is more hits than one search returns: give cut-offs of at "
                         f"most {MAX_K}")
    return ks
