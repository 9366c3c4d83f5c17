"""The metrics IR tools report (ir-measures) against a hand computation and against situate's own
Pass@k; the bootstrap interval and the randomization p-value against reference computations on
fixed examples; the TREC files read back; intervals and differences in the reports."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from situate.tasks.retrieval.ir import ir_metrics, qrels_and_run, write_trec
from situate.tasks.retrieval.metrics import pass_at_k_of_ranks
from situate.tasks.retrieval.stats import (
    bootstrap_interval,
    compare,
    intervals_of,
    paired_difference,
    per_query_pass,
    randomization_p,
)

# Three queries: q0's two golden chunks at ranks 2 and 7; q1's one at rank 1; q2's never found.
RANKS = [[2, 7], [1], [None]]


def test_library_metrics_equal_a_hand_computation_on_a_small_fixed_run():
    got = ir_metrics(RANKS, [1, 5, 10])
    log2 = math.log2
    # Recall@k: golden found within k over golden, per query, averaged over the 3 queries.
    assert got["recall@1"] == pytest.approx((0 + 1 + 0) / 3, abs=1e-4)
    assert got["recall@5"] == pytest.approx((0.5 + 1 + 0) / 3, abs=1e-4)
    assert got["recall@10"] == pytest.approx((1 + 1 + 0) / 3, abs=1e-4)
    # MRR@k: 1 / rank of the first golden within k.
    assert got["mrr@1"] == pytest.approx((0 + 1 + 0) / 3, abs=1e-4)
    assert got["mrr@5"] == pytest.approx((1 / 2 + 1 + 0) / 3, abs=1e-4)
    # nDCG@k, binary gains: DCG = sum 1/log2(rank+1); ideal puts the golden at ranks 1..n.
    dcg_q0_10 = 1 / log2(3) + 1 / log2(8)
    ideal_q0 = 1 / log2(2) + 1 / log2(3)
    assert got["ndcg@10"] == pytest.approx((dcg_q0_10 / ideal_q0 + 1 + 0) / 3, abs=1e-4)
    assert got["ndcg@5"] == pytest.approx(((1 / log2(3)) / ideal_q0 + 1 + 0) / 3, abs=1e-4)
    assert got["ndcg@1"] == pytest.approx(1 / 3, abs=1e-4)


def test_library_recall_is_situates_pass_at_k_on_random_runs():
    rng = random.Random(7)
    # Distinct golden chunks sit at distinct ranks (one chunk holding two is the tie case above).
    ranks = [[r if r <= 20 else None for r in rng.sample(range(1, 31), rng.randint(1, 3))]
             for _ in range(60)]
    got = ir_metrics(ranks, [5, 10, 20])
    for k in (5, 10, 20):
        assert 100 * got[f"recall@{k}"] == pytest.approx(pass_at_k_of_ranks(ranks, k), abs=0.01)


def test_trec_files_read_back_by_ir_measures_give_the_same_metrics(tmp_path):
    import ir_measures

    paths = write_trec(tmp_path / "trec", "codebase", {"dense": RANKS, "bm25": [[1, 3], [None],
                                                                                 [4]]}, 10)
    assert [p.name for p in paths] == ["qrels.txt", "run-codebase-dense.txt",
                                       "run-codebase-bm25.txt"]
    qrels = (tmp_path / "trec" / "qrels.txt").read_text().splitlines()
    assert qrels == ["q0 0 q0-g0 1", "q0 0 q0-g1 1", "q1 0 q1-g0 1", "q2 0 q2-g0 1"]
    run = (tmp_path / "trec" / "run-codebase-dense.txt").read_text().splitlines()
    assert run[0] == "q0 Q0 q0-r1 1 10 situate-dense" and run[1] == "q0 Q0 q0-g0 2 9 situate-dense"
    assert len(run) == 30  # 10 ranks for each of 3 queries
    measures = [ir_measures.parse_measure(m) for m in ("R@10", "RR@10", "nDCG@10")]
    read = ir_measures.calc_aggregate(
        measures, list(ir_measures.read_trec_qrels(str(tmp_path / "trec" / "qrels.txt"))),
        list(ir_measures.read_trec_run(str(tmp_path / "trec" / "run-codebase-dense.txt"))))
    ours = ir_metrics(RANKS, [10])
    assert read[measures[0]] == pytest.approx(ours["recall@10"], abs=1e-4)
    assert read[measures[1]] == pytest.approx(ours["mrr@10"], abs=1e-4)
    assert read[measures[2]] == pytest.approx(ours["ndcg@10"], abs=1e-4)


def test_two_golden_chunks_matched_by_one_chunk_share_its_rank():
    qrels, run = qrels_and_run([[3, 3]], 4)
    assert [d for _, d, _, _ in run] == ["q0-r1", "q0-r2", "q0-g0", "q0-g1", "q0-r4"]


# --- statistics -------------------------------------------------------------------------------

DIFFS = [1.0, -0.5, 0.5, 1.0, 0.0, 1.0, 0.25, -1.0, 1.0, 1.0]


def test_randomization_p_equals_the_exhaustive_sign_flip_computation():
    # Reference: every one of the 2^10 sign patterns, by hand.
    observed = abs(sum(DIFFS))
    extreme = sum(1 for signs in itertools.product((1, -1), repeat=len(DIFFS))
                  if abs(sum(s * d for s, d in zip(signs, DIFFS, strict=True))) >= observed - 1e-12)
    reference = extreme / 2 ** len(DIFFS)
    assert randomization_p(DIFFS) == pytest.approx(reference, abs=1e-12)
    assert reference == pytest.approx(0.125)  # the figure itself, should the code drift
    # scipy's exact paired permutation test agrees.
    from scipy.stats import permutation_test

    scipy_p = permutation_test((np.array(DIFFS),), np.mean, permutation_type="samples",
                               alternative="two-sided", n_resamples=10**6).pvalue
    assert randomization_p(DIFFS) == pytest.approx(scipy_p, abs=1e-12)


def test_randomization_p_sampled_when_patterns_are_many_is_near_the_exact_one():
    rng = random.Random(3)
    d = [rng.choice([-1.0, 0.0, 1.0, 1.0]) for _ in range(40)]
    nonzero = [x for x in d if x]
    # Exact by the normal approximation of the sign-flip sum is too loose; compare two seeds and
    # scipy's sampled test at a large count instead.
    from scipy.stats import permutation_test

    reference = permutation_test((np.array(nonzero),), np.sum, permutation_type="samples",
                                 alternative="two-sided", n_resamples=200_000,
                                 rng=np.random.default_rng(0)).pvalue
    assert randomization_p(d, resamples=20_000) == pytest.approx(reference, abs=0.01)
    assert randomization_p([0.0, 0.0]) == 1.0


def test_bootstrap_interval_equals_the_exact_bootstrap_distribution_on_a_fixed_example():
    values = [1.0, 0.0, 0.5, 1.0, 0.0]
    # Reference: all 5^5 equally likely resamples, their means' 2.5% and 97.5% quantiles.
    means = sorted(sum(values[i] for i in idx) / 5
                   for idx in itertools.product(range(5), repeat=5))
    ref_lo, ref_hi = np.quantile(means, [0.025, 0.975])
    lo, hi = bootstrap_interval(values, resamples=40_000)
    # The sample means sit on a grid of 0.1: the Monte Carlo quantiles land on the same points.
    assert (lo, hi) == (pytest.approx(ref_lo, abs=1e-9), pytest.approx(ref_hi, abs=1e-9))
    assert (round(ref_lo, 2), round(ref_hi, 2)) == (0.1, 0.9)
    # Seeded: the same interval every time; scipy's percentile bootstrap agrees closely.
    assert bootstrap_interval(values) == bootstrap_interval(values)
    from scipy.stats import bootstrap

    ci = bootstrap((np.array(values),), np.mean, method="percentile", n_resamples=40_000,
                   rng=np.random.default_rng(1)).confidence_interval
    assert lo == pytest.approx(ci.low, abs=0.05) and hi == pytest.approx(ci.high, abs=0.05)


def test_paired_difference_of_identical_systems_is_zero_and_not_significant():
    ranks = [[1], [None], [4], [2, None]]
    d = compare(ranks, ranks, 5)
    assert (d.mean, d.low, d.high, d.p) == (0.0, 0.0, 0.0, 1.0) and not d.significant
    better = [[1], [1], [1], [1, 1]]
    d = compare(ranks, better, 5)
    # per query Pass@5: [1, 0, 1, 0.5] -> [1, 1, 1, 1]: +37.5 points on average
    assert d.mean == pytest.approx(37.5) and d.low >= 0 and d.high <= 100


def test_intervals_contain_the_estimate_and_are_in_percent():
    ranks = {"dense": [[r] for r in [1, None, 3, 12, 2, None, 6, 1, 1, 9]]}
    spans = intervals_of(ranks, [5, 10])
    for k in (5, 10):
        lo, hi = spans["dense"][str(k)]
        assert lo <= pass_at_k_of_ranks(ranks["dense"], k) <= hi and 0 <= lo < hi <= 100
    assert per_query_pass([[1, None], []], 5) == [0.5, 0.0]
    with pytest.raises(ValueError, match="same queries"):
        paired_difference([1.0], [1.0, 0.0])


def test_reports_carry_intervals_and_mark_a_difference_covering_zero(tmp_path):
    from situate.tasks.retrieval.chart import pass_at_k_chart
    from situate.tasks.retrieval.evaluation import (
        CollectionEvaluation,
        Comparison,
        Evaluation,
        Failures,
    )
    from situate.tasks.retrieval.report import difference_row, markdown_report, summary_text

    same = Comparison(a="bm25", b="hybrid", k=5, difference=-0.86, low=-3.2, high=1.5, p=0.52)
    sure = Comparison(a="dense", b="hybrid", k=5, difference=13.5, low=9.1, high=18.0, p=0.0001)
    assert difference_row(same).endswith("n.s.") and not difference_row(sure).endswith("n.s.")
    result = CollectionEvaluation(
        collection="c", queries=10, pass_at_k={"bm25": {"5": 82.7}, "hybrid": {"5": 81.9}},
        latency_ms={}, failures=Failures(k=5),
        intervals={"bm25": {"5": [78.0, 87.0]}, "hybrid": {"5": [77.0, 86.0]}},
        metrics={"bm25": {"recall@5": 0.827, "mrr@5": 0.7, "ndcg@5": 0.72},
                 "hybrid": {"recall@5": 0.819, "mrr@5": 0.71, "ndcg@5": 0.73}},
        differences=[same, sure])
    text = summary_text(Evaluation(eval_set="e", queries=10, collections=[result]))
    assert "[78.0, 87.0]" in text and "hybrid − bm25 @5: -0.86 [-3.20, +1.50] p=0.520 n.s." in text
    md = markdown_report(result, None)
    assert "| hybrid − bm25 | 5 | -0.86 | [-3.20, +1.50] | 0.520 | not significant |" in md
    assert "| hybrid − dense | 5 | +13.50 | [+9.10, +18.00] | 0.000 |  |" in md
    png = pass_at_k_chart({"c": result.pass_at_k}, [5], "t", {"c": result.intervals},
                          result.differences)
    plain = pass_at_k_chart({"c": result.pass_at_k}, [5], "t")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png != plain
    assert "intervals" in result.public() and "differences" in result.public()
