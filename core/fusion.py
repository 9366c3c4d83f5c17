"""Fusing ranked lists from several retrievers (dense and BM25) into one ranking.

`dbsf` (`SITUATE_FUSION=dbsf`): distribution-based score fusion. Each leg's scores
are standardised over its own candidates, z = (s - mean) / std, and summed. A candidate that one
leg did not return is scored by that leg all the same (the retrieval module asks the store for
those ids' own cosine, or BM25, 0 when they share no term with the query) and standardised with
that leg's mean and std; without such a score it gets the leg's lowest z (it scored at most that
there). No weight is fitted to any corpus. (Qdrant ships the same idea as its `dbsf` fusion.)

`cdbsf` (the default): confidence-weighted dbsf. Each leg's z-scores are weighted, query by
query, by how far that leg's best candidate stands above its own candidates (its top z, a
scale-free post-retrieval query-performance predictor), the weights normalised to sum to 1: a
leg that is sure of this query leads it, a leg that is guessing follows (QPP-weighted fusion;
Santra et al. 2026, arXiv 2601.17339). How it was chosen: BENCHMARKS.md.

`rrf`: reciprocal rank fusion, the sum of 1 / (k + rank) over the legs (rank from 1, k = 60),
equal weight whatever the scores; the same rule as Milvus's `RRFRanker`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

RRF_K = 60

Leg = Sequence[tuple[str, float]]  # (id, score), best first


Extra = Mapping[str, float]  # a leg's own scores of candidates it did not return


def _standardised(leg: Leg, extra: Extra) -> tuple[dict[str, float], dict[str, float]]:
    """z-scores of the leg's candidates, and of `extra` scored by the same leg, both against the
    mean and standard deviation of the leg's own candidates."""
    n = len(leg)
    mean = math.fsum(s for _, s in leg) / n
    std = math.sqrt(math.fsum((s - mean) ** 2 for _, s in leg) / n)
    if std <= 1e-12:  # every candidate alike: this leg says nothing about their order
        return {i: 0.0 for i, _ in leg}, {i: 0.0 for i in extra}
    return ({i: (s - mean) / std for i, s in leg},
            {i: (s - mean) / std for i, s in extra.items()})


def _fused(legs: Sequence[Leg], extras: Sequence[Extra] | None,
           weighted: bool) -> list[tuple[str, float]]:
    kept = [(leg, extras[n] if extras else {}) for n, leg in enumerate(legs) if leg]
    if not kept:
        return []
    scored = [_standardised(leg, extra) for leg, extra in kept]
    zs = [z for z, _ in scored]
    if weighted:
        tops = [max(0.0, max(z.values())) for z in zs]
        total = sum(tops)
        weights = [t / total for t in tops] if total > 0 else [1.0 / len(zs)] * len(zs)
    else:
        weights = [1.0] * len(zs)
    floors = [min(z.values()) for z in zs]
    ids = dict.fromkeys(i for leg, _ in kept for i, _ in leg)
    fused = {i: sum(w * z.get(i, x.get(i, floor))
                    for (z, x), floor, w in zip(scored, floors, weights, strict=True))
             for i in ids}
    return _best_first(fused)


def _best_first(fused: Mapping[str, float]) -> list[tuple[str, float]]:
    """Fused scores best first; equal scores by id, so that a ranking never depends on the order
    a store returned equal candidates in."""
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def dbsf(legs: Sequence[Leg], extras: Sequence[Extra] | None = None) -> list[tuple[str, float]]:
    """All candidates of `legs`, best first, by the sum of their per-leg z-scores.

    `extras[n]`, when given, holds leg n's own scores of candidates it did not return (an id
    missing there too gets the leg's lowest z)."""
    return _fused(legs, extras, weighted=False)


def cdbsf(legs: Sequence[Leg], extras: Sequence[Extra] | None = None) -> list[tuple[str, float]]:
    """All candidates of `legs`, best first, by their per-leg z-scores weighted by each leg's top z
    (negative tops count as 0; when no leg stands out, the legs weigh the same). `extras` as for
    `dbsf`: they change candidates' values, never a leg's weight."""
    return _fused(legs, extras, weighted=True)


def rrf(legs: Sequence[Leg], extras: Sequence[Extra] | None = None,
        k: int = RRF_K) -> list[tuple[str, float]]:
    """All candidates of `legs`, best first, by the sum of 1 / (k + rank) over the legs that
    returned them (ranks from 1). Scores and `extras` are not used: ranks alone decide."""
    fused: dict[str, float] = {}
    for leg in legs:
        for rank, (i, _) in enumerate(leg, start=1):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + rank)
    return _best_first(fused)


Fusion = Callable[[Sequence[Leg], Sequence[Extra] | None], list[tuple[str, float]]]
# Every fusion by name; those in SCORED use the legs' scores of each other's candidates.
FUSIONS: dict[str, Fusion] = {"cdbsf": cdbsf, "dbsf": dbsf, "rrf": rrf}
SCORED = frozenset({"cdbsf", "dbsf"})
