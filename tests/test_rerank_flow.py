"""The `rerank` retrieval mode (hybrid candidates reranked by Cohere) in search and evaluation,
against the loopback Cohere fake."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLE_CORPUS, SAMPLE_EVAL
from tests.fakes.cohere_server import FakeCohere


@pytest.fixture
def cohere(monkeypatch):
    with FakeCohere() as fake:
        monkeypatch.setenv("COHERE_API_KEY", fake.api_key)
        monkeypatch.setenv("COHERE_BASE_URL", fake.base_url)
        yield fake


def test_evaluate_runs_rerank_when_a_cohere_key_is_set(prefect_harness, state, cohere, embedders):
    from situate.api.retriever import Retriever
    from situate.tasks.rerankers.base import get_reranker
    from situate.tasks.retrieval.metrics import load_eval_set
    from situate.tasks.retrieval.search import RERANK_DEPTH
    from tests.helpers import evaluate, ingest, open_store

    ingest(corpus=str(SAMPLE_CORPUS), collection="rr", embedder="hash")
    store = open_store(state["milvus_uri"])
    query = "How can I requeue a dead-lettered job?"
    retriever = Retriever.over(store, "rr", embedders=embedders, reranker=get_reranker("cohere"))
    hybrid = retriever.search(query, RERANK_DEPTH, "hybrid")
    reranked = retriever.search(query, 5, "rerank")
    assert len(reranked) == 5
    # The reranker saw every hybrid candidate (context + chunk) and ordered them by its scores.
    sent = cohere.log[-1]
    assert len(sent["documents"]) == len(hybrid)
    assert any(h.context and h.context in doc for h in hybrid for doc in sent["documents"])
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)
    assert {h.id for h in reranked} <= {h.id for h in hybrid}

    requests_before = cohere.requests
    result = evaluate(eval_set=str(SAMPLE_EVAL), collection="rr")
    assert set(result.only().pass_at_k) == {"dense", "bm25", "hybrid", "rerank"}
    assert cohere.requests - requests_before == len(load_eval_set(SAMPLE_EVAL))


def test_rerank_without_a_key_is_one_clear_error(monkeypatch, state):
    from situate.core.errors import ProviderError
    from situate.tasks.retrieval.search import check_modes, default_modes

    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    assert "rerank" not in default_modes()
    assert check_modes(["rerank"]) == ["rerank"]
    from situate.tasks.rerankers.base import get_reranker

    with pytest.raises(ProviderError, match="set COHERE_API_KEY"):
        get_reranker()
