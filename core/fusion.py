"""Fusing ranked lists from several retrievers (dense and BM25) into one ranking.

`dbsf` (the default, `SITUATE_FUSION=dbsf`): distribution-based score fusion. Each leg's scores
are standardised over its own candidates, z = (s - mean) / std, and summed; a candidate missing
from a leg's list gets that leg's lowest z (it scored at most that there). A leg counts for as
much as it is sure for this query: one whose best candidates stand far above the rest (an exact
identifier match in BM25, a close paraphrase in dense) dominates, one whose candidates are all
alike barely reorders the other. No weight is fitted to any corpus. (Qdrant ships the same idea
as its `dbsf` fusion.)

`rrf`: reciprocal rank fusion, sum of 1 / (k + rank), k = 60, equal weight whatever the scores;
Milvus's own `RRFRanker` does it (storage/milvus.py), so it is not re-written here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

FUSIONS = ("dbsf", "rrf")
RRF_K = 60

Leg = Sequence[tuple[str, float]]  # (id, score), best first


def _standardised(leg: Leg) -> dict[str, float]:
    n = len(leg)
    mean = sum(s for _, s in leg) / n
    std = math.sqrt(sum((s - mean) ** 2 for _, s in leg) / n)
    if std <= 1e-12:  # every candidate alike: this leg says nothing about their order
        return {i: 0.0 for i, _ in leg}
    return {i: (s - mean) / std for i, s in leg}


def dbsf(legs: Sequence[Leg]) -> list[tuple[str, float]]:
    """All candidates of `legs`, best first, by the sum of their per-leg z-scores."""
    legs = [leg for leg in legs if leg]
    zs = [_standardised(leg) for leg in legs]
    floors = [min(z.values()) for z in zs]
    ids = dict.fromkeys(i for leg in legs for i, _ in leg)  # first-seen order breaks ties
    fused = {i: sum(z.get(i, floor) for z, floor in zip(zs, floors, strict=True)) for i in ids}
    return sorted(fused.items(), key=lambda item: -item[1])
