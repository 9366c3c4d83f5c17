"""Pass@k on hand-made cases, and evaluation-set validation."""

from __future__ import annotations

import json

import pytest

from situate.core.errors import InputError
from situate.tasks.retrieval.metrics import Golden, load_eval_set, mean_pass_at_k, parse_ks, pass_at_k
from tests.conftest import CODEBASE, SAMPLE_EVAL


def G(*contents: str) -> list[Golden]:
    return [Golden(content=c) for c in contents]


def R(*texts: str) -> list[tuple[str, str]]:
    return [("d", t) for t in texts]


def test_pass_at_k_counts_golden_chunks_in_the_first_k():
    golden = G("a", "b")
    retrieved = R("x", "a ", "y", "b")
    assert pass_at_k(golden, retrieved, 1) == 0.0
    assert pass_at_k(golden, retrieved, 2) == 0.5
    assert pass_at_k(golden, retrieved, 4) == 1.0
    assert pass_at_k(golden, [], 5) == 0.0


def test_content_match_is_exact_after_stripping():
    assert pass_at_k(G("fn main() {}"), R("\nfn main() {}\n\n"), 1) == 1.0
    assert pass_at_k(G("fn main() {}"), R("fn main() {} // more"), 1) == 0.0


def test_mean_is_over_queries_in_percent():
    cases = [(G("a"), R("a")), (G("a", "b"), R("a", "z")), (G("c"), R("z"))]
    assert mean_pass_at_k(cases, 5) == pytest.approx(100 * (1 + 0.5 + 0) / 3)


def test_quote_golden_needs_the_document_and_the_quote():
    g = [Golden(doc_id="a.md", quote="needle")]
    assert pass_at_k(g, [("a.md", "hay needle hay")], 1) == 1.0
    assert pass_at_k(g, [("b.md", "hay needle hay")], 1) == 0.0


def test_the_benchmark_eval_set_loads():
    queries = load_eval_set(CODEBASE / "evaluation_set.jsonl")
    assert len(queries) == 248
    assert all(q.golden and q.golden[0].content for q in queries)


def test_sample_eval_set_loads():
    assert len(load_eval_set(SAMPLE_EVAL)) >= 12


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ('{"query": "q", "golden_chunks": [{"content": "x"}]}\n{"query": \n', "bad JSON at line 2"),
        ('{"golden_chunks": [{"content": "x"}]}\n', "line 1 has no 'query'"),
        ('{"query": " ", "golden_chunks": [{"content": "x"}]}\n', "line 1: empty query"),
        ('{"query": "q"}\n', "line 1 has no golden chunks"),
        ('{"query": "q", "golden_quotes": [{"doc_id": "a"}]}\n', "needs 'doc_id' and a non-empty"),
    ],
)
def test_bad_eval_sets(tmp_path, content, message):
    f = tmp_path / "eval.jsonl"
    f.write_text(content)
    with pytest.raises(InputError) as e:
        load_eval_set(f)
    assert message in str(e.value) and str(f) in str(e.value)


def test_parse_ks():
    assert parse_ks("20,5,10") == [5, 10, 20]
    for bad in ("", "a", "0", "5,-1"):
        with pytest.raises(InputError):
            parse_ks(bad)


def test_missing_eval_set(tmp_path):
    with pytest.raises(InputError, match="evaluation set not found"):
        load_eval_set(tmp_path / "x.jsonl")
    json.dumps({})


def test_pass_at_k_of_ranks_is_the_benchmarks_pass_at_k():
    from situate.tasks.retrieval.metrics import golden_ranks, pass_at_k_of_ranks

    gold = [Golden(content="a"), Golden(content="b")]
    cases = [(gold, [("d", "x"), ("d", "a"), ("d", "y"), ("d", "b")]),
             (gold[:1], [("d", "z")]),
             (gold[1:], [("d", "b")])]
    ranks = [golden_ranks(g, r) for g, r in cases]
    assert ranks == [[2, 4], [None], [1]]
    for k in (1, 2, 3, 4, 10):
        assert pass_at_k_of_ranks(ranks, k) == pytest.approx(mean_pass_at_k(cases, k))
