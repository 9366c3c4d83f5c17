"""Retrieval over any `SearchStore`: dense, BM25, hybrid (both legs fused here: cdbsf, dbsf or
RRF, `situate.core.fusion`) and hybrid reranked (Cohere or a local cross-encoder), one query at a
time (`answer`). The store searches one leg at a time; the embedder and the reranker are given,
loaded by the caller (`situate.api.Retriever`, which every face of search goes through).

Given a thread pool, hybrid runs its two legs at the same time, then the two legs' scores of each
other's candidates: the store's calls wait on a server (or on Milvus Lite's own threads), so a
query takes the longer leg's time instead of the sum. The calls and their results are the same
either way, and so is the fusion."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, TypeVar

from situate.core.errors import InputError
from situate.core.fusion import FUSIONS, SCORED
from situate.core.protocols import LEGS, SearchStore
from situate.core.records import Hit
from situate.core.secrets import has_key
from situate.tasks.corpus.clean import clean_text

if TYPE_CHECKING:
    from situate.tasks.embedders.base import Embedder
    from situate.tasks.rerankers.base import Reranker

MODES_WITHOUT_RERANKER = (*LEGS, "hybrid")
MODES = (*MODES_WITHOUT_RERANKER, "rerank")
# Candidates each leg of a hybrid search contributes to the fusion.
FUSION_DEPTH = 100
# Hybrid candidates handed to the reranker: one Cohere request (one search unit) per query.
RERANK_DEPTH = 100
# Most hits one search returns (`k`): ten times the candidates each leg gives the fusion.
MAX_K = 1_000
# Characters of a query kept for embedding and BM25: ten times a chunk, and far more than any
# embedder reads (MiniLM reads 256 word pieces); a longer query is cut, not refused.
MAX_QUERY_CHARS = 8_192
# Terms of a query that are searched (`searched_query`): what BM25 looks up and the embedder
# reads. An embedder reads one span of a query (MiniLM: 256 word pieces; 64 words of prose
# take about 80), and BM25's cost grows with every term: without the cut an 8,192-character
# query cost as much as forty short ones.
MAX_QUERY_TERMS = 64
_TERM = re.compile(r"\w+")

log = logging.getLogger("situate.retrieve")
T = TypeVar("T")


def clean_query(text: str) -> str:
    """A query as it is searched: NUL bytes removed, lone surrogates replaced (as the loaders
    clean documents), cut to MAX_QUERY_CHARS; InputError if nothing is left to search for."""
    text, _ = clean_text(text)
    if not text.strip():
        raise InputError("empty query: give words to search for")
    if len(text) > MAX_QUERY_CHARS:
        log.warning(f"query of {len(text)} characters cut to its first {MAX_QUERY_CHARS}")
        text = text[:MAX_QUERY_CHARS]
    return text


def _terms_end(text: str) -> int:
    """Where `text`'s MAX_QUERY_TERMS-th term ends (len(text) when it has no more terms than
    that): reads no further than that term."""
    count = 0
    for term in _TERM.finditer(text):
        count += 1
        if count == MAX_QUERY_TERMS:
            return len(text) if _TERM.search(text, term.end()) is None else term.end()
    return len(text)


def searched_query(text: str) -> str:
    """What of a cleaned query (`clean_query`) is searched: its first MAX_QUERY_TERMS terms
    (words, as BM25's analyzer splits them), in both legs and the reranker."""
    return text[:_terms_end(text)]


def query_cut(query: str) -> str:
    """What a reply says when a query is not searched whole ("" when it is): how much of it was,
    and where it was cut."""
    text, _ = clean_text(query)
    end = _terms_end(text[:MAX_QUERY_CHARS])
    if end >= len(text):
        return ""
    why = (f"its first {MAX_QUERY_TERMS} terms" if end < min(len(text), MAX_QUERY_CHARS)
           else f"its first {MAX_QUERY_CHARS:,} characters")
    return (f"the query was cut: {why} (characters 1 to {end:,} of {len(text):,}, ending "
            f"{text[max(0, end - 24):end]!r}) were searched, the rest ignored")


def can_rerank(reranker: str = "cohere") -> bool:
    """Whether the rerank mode can run with this reranker: a local one (`st:`), or Cohere with
    its key set."""
    local = reranker.partition(":")[0].strip().lower() != "cohere"
    return local or has_key("cohere")


def unavailable(mode: str) -> str:
    """Why `mode` cannot run here (the rerank mode without a reranker that can run)."""
    return (f"retrieval mode {mode!r} is not available here: it needs a reranker (COHERE_API_KEY, "
            f"or SITUATE_RERANKER=st:NAME_OR_PATH for a local cross-encoder); use one of "
            f"{', '.join(MODES_WITHOUT_RERANKER)}")


def default_modes(reranker: str = "cohere") -> str:
    """Every mode this configuration can run: `rerank` joins when the reranker is local (`st:`)
    or a Cohere key is set."""
    return ",".join(MODES if can_rerank(reranker) else MODES_WITHOUT_RERANKER)


def check_modes(modes: Sequence[str]) -> list[str]:
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise InputError(f"unknown retrieval mode {bad[0]!r}: use one of {', '.join(MODES)}")
    if not modes:
        raise InputError(f"no retrieval mode given: use one or more of {', '.join(MODES)}")
    return list(modes)


def check_fusion(fusion: str) -> str:
    if fusion not in FUSIONS:
        raise InputError(f"SITUATE_FUSION={fusion!r} is not a fusion: use one of "
                         f"{', '.join(FUSIONS)}")
    return fusion


def mode_search(store: SearchStore, collection: str, mode: str, query_text: str,
                query_vector: Sequence[float] | None, limit: int, fusion: str = "cdbsf",
                pool: Executor | None = None) -> list[Hit]:
    """The top `limit` chunks of one search mode: a leg of the store (`dense`, `bm25`) or both
    legs fused (`hybrid`, its legs at the same time in `pool`'s threads if given). `mode` and
    `fusion` were checked where the search was asked for (`Retriever`, the options)."""
    if mode == "hybrid":
        return hybrid(store, collection, query_text, query_vector, limit, fusion, pool)
    return store.leg_search(collection, mode, query_text, query_vector, limit)


def concurrently(calls: Sequence[Callable[[], T]], pool: Executor | None) -> list[T]:
    """Each call's result, in order: all but the last in `pool`'s threads while this thread
    makes the last (one after another without a pool). A call's error is raised once every call
    is done, so that none is left running behind the caller."""
    if pool is None or len(calls) < 2:
        return [call() for call in calls]
    futures = [pool.submit(call) for call in calls[:-1]]
    try:
        last = calls[-1]()
    finally:
        results = [f.result() for f in futures]  # waited for even when the last one failed
    return [*results, last]


def hybrid(store: SearchStore, collection: str, query_text: str,
           query_vector: Sequence[float] | Callable[[], Sequence[float] | None] | None,
           limit: int, fusion: str = "cdbsf", pool: Executor | None = None) -> list[Hit]:
    """Dense and BM25 fused: each leg's top FUSION_DEPTH candidates, and (for the score-based
    fusions) each leg's own scores of the other leg's candidates it did not return, fused by
    `fusion`; each hit's score becomes its fused score. With `pool`, the two legs' searches run
    at the same time, then their two `leg_scores`.

    `query_vector` may be a function that embeds the query: BM25's leg, which needs no vector,
    then runs while it does, and with `pool`, on a store that reads its candidates' rows to score
    them (`prefetch`: Milvus Lite, where its lexical index holds no vectors), reads those rows
    too, so that the query's dense scores of them and its hits find them read."""
    fuse = FUSIONS[fusion]
    depth = max(limit, FUSION_DEPTH)
    prefetch = getattr(store, "prefetch", None) if pool is not None and fusion in SCORED else None

    def lexical() -> list[tuple[str, float]]:
        ranked = store.ranking(collection, "bm25", query_text, None, depth)
        if prefetch is not None:
            prefetch(collection, [i for i, _ in ranked])
        return ranked

    vectors: list[Sequence[float] | None] = []  # the query's, once embedded

    def dense() -> list[tuple[str, float]]:
        vectors.append(query_vector() if callable(query_vector) else query_vector)
        return store.ranking(collection, "dense", query_text, vectors[0], depth)

    assert LEGS == ("dense", "bm25"), "the legs as fused: dense, then BM25"
    bm25_leg, dense_leg = concurrently([lexical, dense], pool)
    legs = [dense_leg, bm25_leg]
    extras = None
    if fusion in SCORED:
        candidates = list(dict.fromkeys(i for leg in reversed(legs) for i, _ in leg))
        returned = [{i for i, _ in leg} for leg in legs]
        extras = concurrently([_leg_scores(store, collection, leg, query_text, vectors[0],
                                           [i for i in candidates if i not in ids])
                               for leg, ids in zip(LEGS, returned, strict=True)], pool)
    return store.hits(collection, fuse(legs, extras)[:limit])


def _leg_scores(store: SearchStore, collection: str, leg: str, query_text: str,
                query_vector: Sequence[float] | None, ids: list[str]
                ) -> Callable[[], dict[str, float]]:
    return lambda: store.leg_scores(collection, leg, query_text, query_vector, ids)


def check_k(k: object) -> int:
    """A number of hits: a whole number from 1 to MAX_K, else one InputError saying so."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InputError(f"k={k!r} is not a number of hits: give a whole number from 1 to {MAX_K}")
    return k


def answer(store: SearchStore, collection: str, query: str, mode: str, limit: int,
           encoder: Embedder | None, reranker: Reranker | None = None,
           fusion: str = "cdbsf", pool: Executor | None = None) -> list[Hit]:
    """The top `limit` hits of one query in one mode: embedded (every mode but `bm25`, by
    `encoder`, to the vector it gets alone), searched (hybrid's legs at the same time in `pool`),
    and for `rerank` the hybrid top RERANK_DEPTH reranked by `reranker`. Every face searches
    through here, by `Retriever.run`, which has checked the query, the mode and the fusion.
    The query is searched up to its MAX_QUERY_TERMS-th term (`searched_query`)."""
    query = searched_query(query)

    def vector() -> Sequence[float] | None:
        return encoder.embed_queries([query])[0] if encoder is not None else None

    if mode == "rerank":
        assert reranker is not None, "the rerank mode is asked for with a reranker"
        candidates = hybrid(store, collection, query, vector, max(limit, RERANK_DEPTH), fusion,
                            pool)
        return reranker.rerank(query, candidates, limit)
    if mode == "hybrid":  # BM25's leg goes on while the query is embedded
        return hybrid(store, collection, query, vector, limit, fusion, pool)
    return mode_search(store, collection, mode, query, vector() if mode != "bm25" else None,
                       limit, fusion, pool)
