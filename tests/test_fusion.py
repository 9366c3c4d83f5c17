"""Fusion of dense and BM25 rankings (core/fusion.py): what each rule does with sure and unsure legs."""

from __future__ import annotations

import pytest

from situate.core.fusion import cdbsf, dbsf

# Twenty candidates a leg. BM25 is sure of "g" (far above its other candidates); dense is unsure
# (its candidates evenly spread, "x" first).
SURE = [("g", 30.0)] + [(f"c{i}", 3.0 - 0.05 * i) for i in range(19)]
FLAT = [("x", 0.60)] + [(f"c{i}", 0.59 - 0.005 * i) for i in range(19)]


def test_a_sure_leg_outweighs_an_unsure_one():
    assert dbsf([SURE, FLAT])[0][0] == "g"
    assert dbsf([FLAT, SURE])[0][0] == "g"  # the order of the legs does not matter


def test_a_candidate_missing_from_a_leg_gets_that_legs_lowest_z():
    fused = dict(dbsf([[("p", 2.0), ("q", 1.0)], [("q", 5.0), ("r", 1.0)]]))
    # z in a two-candidate leg is +1 / -1; "p" is missing from the second leg, "r" from the first.
    assert fused == pytest.approx({"p": 0.0, "q": 0.0, "r": -2.0})


def test_a_missing_candidates_own_score_replaces_the_lowest_z_and_leaves_the_weights():
    legs = [[("p", 2.0), ("q", 1.0)], [("q", 5.0), ("r", 1.0)]]
    # "p" scored 3.0 by the second leg (z = (3 - 3) / 2 = 0), "r" scored 0.0 by the first
    # (z = (0 - 1.5) / 0.5 = -3): against each leg's own mean and spread, not the lowest z.
    extras = [{"r": 0.0}, {"p": 3.0}]
    assert dict(dbsf(legs, extras)) == pytest.approx({"p": 1.0, "q": 0.0, "r": -4.0})
    # cdbsf's weights are the legs' top z's (+1 each here): unchanged by the extras
    assert dict(cdbsf(legs, extras)) == pytest.approx({"p": 0.5, "q": 0.0, "r": -2.0})
    # an id missing from the extras too keeps the lowest z
    assert dict(dbsf(legs, [{}, {"p": 3.0}]))["r"] == pytest.approx(-2.0)


def test_a_leg_whose_candidates_are_all_alike_does_not_reorder_the_other():
    alike = [("a", 0.5), ("b", 0.5), ("c", 0.5)]
    other = [("c", 3.0), ("b", 2.0), ("a", 1.0)]
    assert [i for i, _ in dbsf([alike, other])] == ["c", "b", "a"]


def test_every_candidate_once_and_empty_legs_ignored():
    fused = dbsf([SURE, FLAT, []])
    ids = [i for i, _ in fused]
    assert sorted(ids) == sorted({i for i, _ in SURE + FLAT}) and len(ids) == len(set(ids))
    assert dbsf([[], []]) == []


def test_cdbsf_weighs_each_leg_by_how_far_its_best_stands_out():
    # Each leg puts its own favourite first; the two favourites tie under dbsf (the same z's,
    # mirrored), and cdbsf gives the query to the leg whose best stands further above the rest.
    sure = [("s", 10.0), ("o", 2.0)] + [(f"c{i}", 1.0) for i in range(8)]
    unsure = [("o", 3.0), ("s", 2.0)] + [(f"c{i}", 1.5 - 0.1 * i) for i in range(8)]
    fused = dict(cdbsf([sure, unsure]))
    assert max(fused, key=fused.get) == "s"
    # the weights are the legs' top z's, normalised: recompute them by hand
    def z(leg):
        n = len(leg)
        mean = sum(v for _, v in leg) / n
        std = (sum((v - mean) ** 2 for _, v in leg) / n) ** 0.5
        return {i: (v - mean) / std for i, v in leg}
    zs, zu = z(sure), z(unsure)
    ws, wu = zs["s"] / (zs["s"] + zu["o"]), zu["o"] / (zs["s"] + zu["o"])
    assert fused["o"] == pytest.approx(ws * zs["o"] + wu * zu["o"])
    assert fused["c3"] == pytest.approx(ws * zs["c3"] + wu * zu["c3"])


def test_cdbsf_with_no_leg_standing_out_weighs_them_alike_and_keeps_every_candidate_once():
    alike = [("a", 0.5), ("b", 0.5), ("c", 0.5)]
    assert cdbsf([alike, alike]) == [(i, 0.0) for i in "abc"]
    assert cdbsf([SURE, FLAT])[0][0] == "g" and cdbsf([FLAT, SURE])[0][0] == "g"
    ids = [i for i, _ in cdbsf([SURE, FLAT, []])]
    assert sorted(ids) == sorted({i for i, _ in SURE + FLAT}) and len(ids) == len(set(ids))
    assert cdbsf([[], []]) == []


def test_an_unknown_fusion_setting_is_one_line_before_anything_runs(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, SAMPLE_EVAL

    env = {**os.environ, "SITUATE_MILVUS_URI": str(tmp_path / "m.db"), "SITUATE_FUSION": "max"}
    r = subprocess.run([sys.executable, "-m", "situate.cli.main", "evaluate", str(SAMPLE_EVAL),
                        "--collection", "c"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == ("situate evaluate: error: SITUATE_FUSION='max' is not a fusion: "
                                "use one of cdbsf, dbsf, rrf")
    assert not (tmp_path / "m.db").exists()
