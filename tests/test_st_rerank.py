"""`--rerank st:NAME_OR_PATH`: a local sentence-transformers CrossEncoder beside Cohere's reranker
(tasks/rerankers/st.py), with tiny cross-encoders built here: wiring, errors and latency, not quality
(no reranker weights can be loaded on this machine)."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from situate.core.errors import InputError, ProviderError
from situate.core.records import Hit
from situate.tasks.rerankers.base import Reranker, get_reranker
from tests.conftest import SAMPLE_CORPUS, SAMPLE_EVAL
from tests.fakes.tiny_models import build_cross_encoder, build_embedder

QUERY = "how does a worker lease a job"


def _hit(n: int, text: str, context: str = "") -> Hit:
    return Hit(id=f"id{n}", doc_id=f"doc{n}", index=n, text=text, context=context, score=1.0 - 0.01 * n,
               metadata={"n": n})


HITS = [_hit(0, "the worker leases a job for thirty seconds"), _hit(1, "full jitter backoff"),
        _hit(2, "dead letters are requeued by an operator", context="Inside: requeue"),
        _hit(3, "a lease is taken in one transaction"), _hit(4, "zzz")]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny-ce")


def _own_scores(model: Path, query: str, hits: list[Hit]) -> list[float]:
    """The cross-encoder's scores for the documents as the reranker builds them, straight from
    sentence-transformers."""
    from sentence_transformers import CrossEncoder

    documents = [f"{h.text}\n\n{h.context}" if h.context else h.text for h in hits]
    return [float(s) for s in CrossEncoder(str(model), device="cpu").predict([(query, d) for d in documents])]


def test_orders_by_the_cross_encoders_scores(encoder):
    reranker = get_reranker(f"st:{encoder}")
    assert isinstance(reranker, Reranker) and reranker.name == "st" and reranker.model == str(encoder)
    ranked = reranker.rerank(QUERY, HITS, top_n=5)
    scores = _own_scores(encoder, QUERY, HITS)
    assert len(set(scores)) == len(scores)  # the tiny model tells every candidate apart
    expected = sorted(range(len(HITS)), key=lambda i: -scores[i])
    assert [h.id for h in ranked] == [HITS[i].id for i in expected]
    assert [h.score for h in ranked] == pytest.approx([scores[i] for i in expected], abs=1e-6)
    assert [h.id for h in ranked] != [h.id for h in HITS]  # the order did change
    assert ranked[0].metadata == HITS[expected[0]].metadata and ranked[0].text == HITS[expected[0]].text
    assert [h.id for h in reranker.rerank(QUERY, HITS, top_n=2)] == [h.id for h in ranked[:2]]


def test_empty_hits_and_a_bad_top_n(encoder):
    reranker = get_reranker(f"st:{encoder}")
    assert reranker.rerank(QUERY, [], top_n=5) == []
    with pytest.raises(InputError, match="top_n must be at least 1"):
        reranker.rerank(QUERY, HITS, top_n=0)


def test_missing_models_are_one_clear_error_before_anything_loads(tmp_path, monkeypatch):
    with pytest.raises(ProviderError) as info:
        get_reranker(f"st:{tmp_path}/nope")
    assert str(info.value) == (f"reranker 'st': no model directory at {tmp_path}/nope: give the directory "
                               "a sentence-transformers model was saved to (model.save(DIR)), or a model "
                               "name from the Hugging Face Hub")
    with pytest.raises(InputError, match=r"reranker 'st' needs a model: --rerank st:NAME_OR_PATH"):
        get_reranker("st")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ProviderError, match=r"'cross-encoder/ms-marco-MiniLM-L6-v2' is not in the local "
                                            r"Hugging Face cache and HF_HUB_OFFLINE is set"):
        get_reranker("st:cross-encoder/ms-marco-MiniLM-L6-v2")


def test_a_model_that_will_not_load_fails_on_first_use_in_one_line(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    reranker = get_reranker(f"st:{broken}")  # checked, not loaded: option checks stay fast
    with pytest.raises(ProviderError, match=rf"reranker 'st' could not load {broken}: ") as info:
        reranker.rerank(QUERY, HITS, top_n=1)
    assert "\n" not in str(info.value) and info.value.__cause__ is None


def test_a_model_with_several_outputs_is_refused(tmp_path):
    two = build_cross_encoder(tmp_path / "two", num_labels=2)
    with pytest.raises(ProviderError, match=r"gave 10 scores .* for 5 candidates: use a model with one "
                                            r"output \(num_labels=1\)"):
        get_reranker(f"st:{two}").rerank(QUERY, HITS, top_n=1)


def test_shared_between_threads(encoder):
    reranker = get_reranker(f"st:{encoder}")
    alone = [h.id for h in reranker.rerank(QUERY, HITS, top_n=5)]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda _: [h.id for h in reranker.rerank(QUERY, HITS, top_n=5)], range(8)))
    assert together == [alone] * 8


def test_a_hundred_candidates_rerank_the_same_every_time(encoder, capsys):
    """A hundred candidates, reranked five times by one loaded model: the same ten every time.
    The latency is printed, not asserted: a tiny model says what the wiring costs, not a real
    one."""
    reranker = get_reranker(f"st:{encoder}")
    hits = [_hit(n, f"chunk {n}: the worker leases job {n} and retries it with backoff " * 4)
            for n in range(100)]
    first = [h.id for h in reranker.rerank(QUERY, hits, top_n=10)]  # loaded and warm
    assert len(first) == 10 and len(set(first)) == 10
    seconds = []
    for _ in range(5):
        start = time.perf_counter()
        assert [h.id for h in reranker.rerank(QUERY, hits, top_n=10)] == first
        seconds.append(time.perf_counter() - start)
    with capsys.disabled():
        print(f"\n[st rerank] tiny cross-encoder, 100 candidates: median "
              f"{statistics.median(seconds) * 1000:.1f} ms a query (min {min(seconds) * 1000:.1f}, "
              f"max {max(seconds) * 1000:.1f})")


@pytest.mark.slow
@pytest.mark.e2e
def test_reranks_the_hybrid_candidates_of_a_real_collection(prefect_harness, state, encoder):
    from situate.api.retriever import Retriever
    from situate.tasks.embedders.base import Embedders
    from situate.tasks.rerankers.base import get_reranker
    from situate.tasks.retrieval.search import RERANK_DEPTH
    from tests.helpers import ingest, open_store

    ingest(corpus=str(SAMPLE_CORPUS), collection="strr", embedder="hash")
    store = open_store(state["milvus_uri"])
    query = "How can I requeue a dead-lettered job?"
    retriever = Retriever.over(store, "strr", embedders=Embedders(),
                               reranker=get_reranker(f"st:{encoder}"))
    hybrid = retriever.search(query, RERANK_DEPTH, "hybrid")
    start = time.perf_counter()
    reranked = retriever.search(query, 5, "rerank")
    print(f"hybrid + st rerank of {len(hybrid)} candidates: {time.perf_counter() - start:.3f} s")
    # Every hybrid candidate was read, and the top 5 are its best by the cross-encoder's scores.
    scores = _own_scores(encoder, query, hybrid)
    best = sorted(range(len(hybrid)), key=lambda i: -scores[i])[:5]
    assert [h.id for h in reranked] == [hybrid[i].id for i in best]
    assert [h.id for h in reranked] != [h.id for h in hybrid[:5]]


@pytest.mark.slow
@pytest.mark.e2e
def test_evaluate_flow_reranks_with_a_cross_encoder(prefect_harness, state, encoder, monkeypatch):
    from situate.tasks.retrieval.metrics import load_eval_set
    from tests.helpers import evaluate, ingest

    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    ingest(corpus=str(SAMPLE_CORPUS), collection="strr", embedder="hash")
    from situate.tasks.rerankers.st import CrossEncoderReranker

    calls: list[int] = []
    original = CrossEncoderReranker.rerank

    def counting(self, query, hits, top_n):
        calls.append(len(hits))
        return original(self, query, hits, top_n)

    monkeypatch.setattr(CrossEncoderReranker, "rerank", counting)
    result = evaluate(eval_set=str(SAMPLE_EVAL), collection="strr", reranker=f"st:{encoder}")
    assert set(result.only().pass_at_k) == {"dense", "bm25", "hybrid", "rerank"}  # no Cohere key needed
    assert len(calls) == len(load_eval_set(SAMPLE_EVAL)) and all(n > 5 for n in calls)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.soak  # the soak tier (`make test-soak`): see README, Tests
def test_cli_evaluate_and_search_rerank_st(encoder, tmp_path):
    """`situate evaluate --rerank st:DIR` runs the rerank mode with no Cohere key."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
           "SITUATE_CACHE_DIR": str(tmp_path / "cache"), "SITUATE_RESULTS_DIR": str(tmp_path / "results")}
    for key in ("ANTHROPIC_API_KEY", "COHERE_API_KEY"):
        env.pop(key, None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "situate.cli.main", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    embedder = build_embedder(tmp_path / "tiny-embedder")
    r = cli("ingest", str(SAMPLE_CORPUS), "--collection", "rr", "--embedder", f"st:{embedder}")
    assert r.returncode == 0, r.stderr
    r = cli("evaluate", str(SAMPLE_EVAL), "--collection", "rr", "--rerank", f"st:{encoder}",
            "--json", "r.json")
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result["pass_at_k"]) == {"dense", "bm25", "hybrid", "rerank"}
    r = cli("search", "requeue a dead-lettered job", "--collection", "rr", "--mode", "rerank",
            "--rerank", f"st:{encoder}", "--k", "3")
    assert r.returncode == 0, r.stderr
    ranks = [line.split(".")[0].strip() for line in r.stdout.splitlines() if line[:5].strip().endswith(".")]
    assert ranks == ["1", "2", "3"], r.stdout
    r = cli("evaluate", str(SAMPLE_EVAL), "--collection", "rr", "--rerank", f"st:{tmp_path}/none")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and f"no model directory at {tmp_path}/none" in lines[0]
