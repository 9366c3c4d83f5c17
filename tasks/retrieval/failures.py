"""Where retrieval fails: the queries every mode misses at the largest k, what ranked first
instead, and which retriever lost each golden chunk."""

from __future__ import annotations

from collections.abc import Sequence

from situate.core.records import Hit
from situate.tasks.retrieval.evaluation import DocRef, Failures, FirstHit, Missed, MissSources
from situate.tasks.retrieval.metrics import EvalQuery, Golden, miss_sources

FAILURES_LISTED = 20  # failures listed in the Markdown report; the JSON keeps every rank
SNIPPET_CHARS = 160


def one_line(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _golden_doc(g: Golden) -> DocRef:
    return DocRef(doc_id=g.doc_id, source=g.source)


def _first_hit(hit: Hit, paths: dict[str, str], golden: Sequence[Golden]) -> FirstHit:
    """A hit's document for a report: its id, its path (its own metadata's, else the one the
    evaluation set gives its original id), and its original id when the corpus kept one."""
    meta = hit.metadata or {}
    original = str(meta.get("original_uuid") or "")
    source = meta.get("relative_path") or meta.get("path") or paths.get(original) or paths.get(hit.doc_id)
    same = any(g.doc_id in (hit.doc_id, original) for g in golden)
    return FirstHit(doc_id=hit.doc_id, source=str(source or ""), original_id=original,
                    same_document=same, snippet=one_line(hit.text))


def failure_analysis(queries: Sequence[EvalQuery], ranks: dict[str, list[list[int | None]]],
                     firsts: dict[str, list[Hit | None]], k: int,
                     listed: int = FAILURES_LISTED) -> Failures:
    """Where retrieval fails, at the largest k.

    A query is missed by a mode when none of its golden chunks is in that mode's top k (its
    Pass@k is 0); the queries every mode missed are counted and the first `listed` of them kept,
    each with its golden documents and what ranked first instead (hybrid's first hit when hybrid
    ran). `sources` counts golden chunks, not queries, by which of dense and BM25 never retrieved
    them in its top k (only when both modes ran).
    """
    modes = list(ranks)
    missed = [i for i in range(len(queries))
              if all(all(r is None for r in ranks[m][i]) for m in modes)]
    first_mode = "hybrid" if "hybrid" in firsts else modes[0]
    paths = {g.doc_id: g.source for q in queries for g in q.golden if g.doc_id and g.source}
    examples = []
    for i in missed[:listed]:
        hit = firsts[first_mode][i]
        examples.append(Missed(
            query=queries[i].query, golden=[_golden_doc(g) for g in queries[i].golden],
            first_mode=first_mode,
            first=None if hit is None else _first_hit(hit, paths, queries[i].golden)))
    sources = (MissSources(**miss_sources(ranks["dense"], ranks["bm25"]))
               if "dense" in ranks and "bm25" in ranks else None)
    return Failures(k=k, queries_missed=len(missed), listed=examples, sources=sources)
