"""Nothing moves: the codebase benchmark ingested with the default settings stores the rows, and
ranks each query, exactly as the code did when tests/data/codebase_ranking.json was recorded
(benchmarks/record_ranking.py). A change meant to reorganise the code, not to change results,
must leave this test passing; a change meant to move results records the file again, and says
so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

MODES = ("dense", "bm25", "hybrid")
RECORDED = Path(__file__).parent / "data" / "codebase_ranking.json"
# Scores within this of each other are a tie that another CPU's float kernels may order either way.
TIE = 1e-5


def test_nothing_moves_rows_and_rankings_are_as_recorded(tmp_path):
    """The codebase's rows and the top 20 of each of its 248 queries in dense, bm25 and hybrid
    are what the recorded checkout stored and ranked (tests/data/codebase_ranking.json, written
    by benchmarks/record_ranking.py before the code was reorganised): every row's fields, each
    vector's sum, and each query's hits in order. Only hits whose recorded scores tie (within
    TIE) may trade places. In a Milvus Lite file, whose dense search is exact at this size (a
    server's HNSW index is approximate: its deeper hits may differ from one build to the next)."""
    from benchmarks.record_ranking import ingest, ranking

    recorded = json.loads(RECORDED.read_text())
    uri = str(tmp_path / "milvus.db")
    ingest(uri, str(tmp_path / "cache"), "codebase")
    now = ranking(uri, "codebase")
    assert (now["rows"], now["ids"], now["rows_sha256"]) == \
        (recorded["rows"], recorded["ids"], recorded["rows_sha256"])
    assert max(abs(a - b) for a, b in zip(now["vector_sums"], recorded["vector_sums"],
                                          strict=True)) < 1e-3
    moved = [(mode, i) for mode in MODES
             for i, (a, b) in enumerate(zip(now["hits"][mode], recorded["hits"][mode], strict=True))
             if not _same_up_to_ties(a, b)]
    assert moved == []
    _the_readme_says_what_this_ranking_measures(uri, now)


def _the_readme_says_what_this_ranking_measures(uri: str, now: dict) -> None:
    """The README's headline (hybrid Pass@5/10/20 of its two commands on the committed codebase
    benchmark: `situate ingest`, `situate evaluate`, the defaults, a Lite file) is this ranking's,
    as `situate evaluate` measures Pass@k."""
    import re

    from situate.tasks.retrieval.metrics import load_eval_set, mean_pass_at_k
    from tests.conftest import CODEBASE, ROOT
    from tests.helpers import open_store

    readme = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"\*\*(\d+\.\d\d)%\*\* of the questions \(hybrid Pass@10; (\d+\.\d\d) at 5, "
                     r"(\d+\.\d\d) at 20\)", readme)
    assert said, "the README's headline sentence changed: update this test's pattern"
    assert ("situate ingest data/benchmarks/codebase/codebase_chunks.json --collection codebase "
            "situate evaluate data/benchmarks/codebase/evaluation_set.jsonl --collection "
            "codebase") in readme
    texts = {r["id"]: (r["doc_id"], r["text"])
             for r in open_store(uri).rows("codebase", fields=("id", "doc_id", "text"))}
    queries = load_eval_set(CODEBASE / "evaluation_set.jsonl")
    cases = [(q.golden, [texts[now["ids"][place]] for place, _ in hits])
             for q, hits in zip(queries, now["hits"]["hybrid"], strict=True)]
    measured = {k: round(mean_pass_at_k(cases, k), 2) for k in (5, 10, 20)}
    at10, at5, at20 = (float(x) for x in said.groups())
    assert measured == {5: at5, 10: at10, 20: at20}


def _same_up_to_ties(now: list[list[float]], recorded: list[list[float]]) -> bool:
    """The same hits in the same order, scores equal within TIE, except that hits whose scores
    tie may come in either order (and the last tie may be cut at k differently)."""
    if len(now) != len(recorded):
        return False
    if any(abs(a[1] - b[1]) > TIE for a, b in zip(now, recorded, strict=True)):
        return False
    groups: list[list[int]] = []
    for i, (_, score) in enumerate(recorded):
        if groups and abs(recorded[groups[-1][-1]][1] - score) <= TIE:
            groups[-1].append(i)
        else:
            groups.append([i])
    return all(sorted(now[i][0] for i in group) == sorted(recorded[i][0] for i in group)
               for group in groups[:-1]) and \
        all(now[i][0] == recorded[i][0] for i in groups[-1] if len(groups[-1]) == 1)
