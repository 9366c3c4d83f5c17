"""How sure a Pass@k is: a 95% bootstrap interval over queries, and for two systems on the same
queries (two modes, two collections) the paired difference with its interval and the p-value of
a paired randomization (sign-flip) test.

Why these: the queries are the sample, so the interval resamples queries (with replacement, the
percentile bootstrap); two systems answer the same queries, so their comparison is paired on the
per-query difference, which is far tighter than two separate intervals. Both are seeded, so a
report is reproducible. With few queries that differ (2^n sign patterns <= `resamples`) the
randomization test enumerates every pattern and its p-value is exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from situate.tasks.retrieval.interval import Significance

SEED = 2024
RESAMPLES = 10_000
LEVEL = 0.95


def per_query_pass(ranks: Sequence[Sequence[int | None]], k: int) -> list[float]:
    """Each query's Pass@k (0..1): the share of its golden chunks ranked within k (the terms
    `metrics.pass_at_k_of_ranks` averages)."""
    return [sum(1 for r in q if r is not None and r <= k) / len(q) if q else 0.0 for q in ranks]


def bootstrap_interval(values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED,
                       level: float = LEVEL) -> tuple[float, float]:
    """The percentile-bootstrap interval of the mean of `values` (resampled with replacement,
    `resamples` times, from numpy's PCG64 seeded with `seed`)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    step = max(1, 2_000_000 // max(1, x.size))  # bounded memory for large query sets
    for start in range(0, resamples, step):
        n = min(step, resamples - start)
        means[start:start + n] = x[rng.integers(0, x.size, size=(n, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


def randomization_p(differences: Sequence[float], *, resamples: int = RESAMPLES,
                    seed: int = SEED) -> float:
    """Two-sided p-value of a paired randomization test of mean(differences) == 0.

    Under the null each query's difference is as likely to have the other sign; p is the share
    of sign patterns whose mean is at least as far from 0 as the observed one. Exact (every
    pattern) when the non-zero differences are few enough; otherwise `resamples` random
    patterns, counted with the observed one ((hits + 1) / (resamples + 1)), never 0.
    """
    d = np.asarray([v for v in differences if v != 0], dtype=float)
    if d.size == 0:
        return 1.0
    n_all = len(differences)
    observed = abs(d.sum()) / n_all
    tolerance = 1e-12
    if 2 ** d.size <= resamples:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        means = np.abs(signs @ d) / n_all
        return float(np.mean(means >= observed - tolerance))
    rng = np.random.default_rng(seed)
    hits = 0
    step = max(1, 2_000_000 // d.size)
    for start in range(0, resamples, step):
        n = min(step, resamples - start)
        signs = rng.choice((1.0, -1.0), size=(n, d.size))
        hits += int(np.sum(np.abs(signs @ d) / n_all >= observed - tolerance))
    return (hits + 1) / (resamples + 1)


@dataclass(frozen=True)
class Difference(Significance):
    """`b` minus `a` on the same queries, in points of Pass@k, with its interval and p-value."""

    mean: float
    low: float
    high: float
    p: float


def paired_difference(a: Sequence[float], b: Sequence[float], *, resamples: int = RESAMPLES,
                      seed: int = SEED, level: float = LEVEL) -> Difference:
    """The paired difference of two systems' per-query scores (0..1), in percentage points:
    mean, bootstrap interval (queries resampled, both systems together) and randomization
    p-value."""
    if len(a) != len(b):
        raise ValueError(f"paired scores need the same queries: {len(a)} vs {len(b)}")
    d = [100.0 * (y - x) for x, y in zip(a, b, strict=True)]
    lo, hi = bootstrap_interval(d, resamples=resamples, seed=seed, level=level)
    mean = float(np.mean(d)) if d else 0.0
    return Difference(mean, lo, hi, randomization_p(d, resamples=resamples, seed=seed))


def intervals_of(ranks: Mapping[str, Sequence[Sequence[int | None]]], ks: Sequence[int], *,
                 seed: int = SEED, resamples: int = RESAMPLES) -> dict[str, dict[str, list[float]]]:
    """mode -> str(k) -> [low, high] (percent, 2 decimals): each Pass@k's bootstrap interval."""
    out: dict[str, dict[str, list[float]]] = {}
    for mode, mode_ranks in ranks.items():
        out[mode] = {}
        for k in ks:
            lo, hi = bootstrap_interval(per_query_pass(mode_ranks, k), seed=seed,
                                        resamples=resamples)
            out[mode][str(k)] = [round(100 * lo, 2), round(100 * hi, 2)]
    return out


def compare(a: Sequence[Sequence[int | None]], b: Sequence[Sequence[int | None]], k: int, *,
            seed: int = SEED, resamples: int = RESAMPLES) -> Difference:
    """Pass@k of `b` minus `a` (golden ranks per query, same queries), paired."""
    return paired_difference(per_query_pass(a, k), per_query_pass(b, k), seed=seed,
                             resamples=resamples)


def mode_pairs(modes: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b) for each pair of modes, the later mode minus the earlier (hybrid − bm25, ...)."""
    return [(modes[i], modes[j]) for j in range(len(modes)) for i in range(j)][::-1]
