"""The Cohere reranker, through the real cohere SDK, against the loopback fake of /v2/rerank."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import cohere
import pytest

from situate.core.errors import InputError, ProviderError
from situate.core.records import Hit
from situate.tasks.rerankers.base import Reranker, get_reranker
from tests.fakes.cohere_server import FakeCohere

pytestmark = pytest.mark.timeout(30)

KEY = "co-secret-key-0123456789"
QUERY = "milvus hybrid search ranker"


def _hit(n: int, text: str, context: str = "") -> Hit:
    return Hit(id=f"id{n}", doc_id=f"doc{n}", index=n, text=text, context=context, score=0.01 * n,
               metadata={"n": n})


# Input order is deliberately not the relevance order. Relevance (share of the 4 query words):
HITS = [
    _hit(0, "nothing relevant here"),  # 0/4
    _hit(1, "milvus search"),  # 2/4
    _hit(2, "the hybrid search of milvus with a ranker"),  # 4/4
    _hit(3, "a ranker"),  # 1/4
    _hit(4, "the search", context="milvus hybrid"),  # 3/4, two of them from the context only
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCohere]:
    with FakeCohere(api_key=KEY, retry_after=0.05, slow_seconds=1.0) as fake:
        yield fake


@pytest.fixture()
def fake(server: FakeCohere, monkeypatch: pytest.MonkeyPatch) -> FakeCohere:
    server.settle()  # a "slow" request of the test before is still answered (and billed) late
    server.reset()
    monkeypatch.setenv("COHERE_API_KEY", KEY)
    monkeypatch.setenv("COHERE_BASE_URL", server.base_url)
    return server


def _reranker(**kwargs: object) -> Reranker:
    return get_reranker("cohere", retry_base=0.01, **kwargs)  # type: ignore[arg-type]


def test_reorders_by_cohere_relevance_and_replaces_scores(fake: FakeCohere) -> None:
    ranked = _reranker().rerank(QUERY, HITS, top_n=5)
    assert [h.id for h in ranked] == ["id2", "id4", "id1", "id3", "id0"]
    assert [h.score for h in ranked] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    assert ranked[0] == Hit("id2", "doc2", 2, HITS[2].text, "", 1.0, {"n": 2})  # the rest kept
    assert fake.requests == 1 and fake.search_units == 1
    assert fake.log[0]["model"] == "rerank-v3.5" and fake.log[0]["query"] == QUERY


def test_top_n_cuts_the_answer(fake: FakeCohere) -> None:
    ranked = _reranker().rerank(QUERY, HITS, top_n=2)
    assert [h.id for h in ranked] == ["id2", "id4"]
    assert fake.log[0]["top_n"] == 2
    assert [h.id for h in _reranker().rerank(QUERY, HITS[:2], top_n=10)] == ["id1", "id0"]


def test_contexts_are_sent_before_the_text(fake: FakeCohere) -> None:
    _reranker().rerank(QUERY, HITS, top_n=3)
    assert fake.log[0]["documents"] == [
        "nothing relevant here", "milvus search", "the hybrid search of milvus with a ranker",
        "a ranker", "milvus hybrid\n\nthe search"]


def test_one_request_for_a_hundred_candidates(fake: FakeCohere) -> None:
    hits = [_hit(n, f"chunk {n} about milvus" if n == 73 else f"chunk {n}") for n in range(100)]
    ranked = _reranker().rerank("milvus", hits, top_n=10)
    assert ranked[0].id == "id73" and len(ranked) == 10
    assert fake.requests == 1 and fake.search_units == 1


def test_model_from_the_spec(fake: FakeCohere) -> None:
    get_reranker("cohere:rerank-english-v3.0").rerank(QUERY, HITS, top_n=1)
    assert fake.log[0]["model"] == "rerank-english-v3.0"


@pytest.mark.parametrize("faults", [["429"], ["500"], ["503"], ["drop"], ["429", "500", "drop", "503"]])
def test_transient_failures_are_retried_until_an_answer(fake: FakeCohere, faults: list[str]) -> None:
    fake.fail(*faults)
    ranked = _reranker().rerank(QUERY, HITS, top_n=2)
    assert [h.id for h in ranked] == ["id2", "id4"]
    assert fake.requests == len(faults) + 1
    assert fake.search_units == 1  # only the answered request is billed


def test_a_timeout_is_retried(fake: FakeCohere) -> None:
    fake.fail("slow")
    ranked = _reranker(timeout=0.3).rerank(QUERY, HITS, top_n=1)
    assert [h.id for h in ranked] == ["id2"] and fake.requests == 2


def test_retry_after_is_honoured(fake: FakeCohere) -> None:
    fake.retry_after = 0.6  # far above the 0.01 s backoff base
    try:
        fake.fail("429")
        start = time.monotonic()
        _reranker().rerank(QUERY, HITS, top_n=1)
        assert time.monotonic() - start >= 0.6
    finally:
        fake.retry_after = 0.05


def test_attempts_are_bounded(fake: FakeCohere) -> None:
    fake.fail("503", "503", "503", "503")
    with pytest.raises(ProviderError, match=r"after 3 attempts \(503: service unavailable"):
        _reranker(max_attempts=3).rerank(QUERY, HITS, top_n=1)
    assert fake.requests == 3 and fake.search_units == 0


def test_a_bad_key_fails_fast_with_one_clear_line(fake: FakeCohere, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    wrong = "co-wrong-key-9876543210"
    monkeypatch.setenv("COHERE_API_KEY", wrong)
    with pytest.raises(ProviderError) as info:
        _reranker().rerank(QUERY, HITS, top_n=1)
    message = str(info.value)
    assert message == "Cohere rerank refused the request (401: invalid api token): set a valid COHERE_API_KEY"
    assert wrong not in message and wrong not in repr(info.value) and info.value.__cause__ is None
    assert fake.requests == 1


def test_an_unknown_model_fails_fast(fake: FakeCohere) -> None:
    with pytest.raises(ProviderError, match=r"404: model 'rerank-nope' not found.*check the model name"):
        get_reranker("cohere:rerank-nope", retry_base=0.01).rerank(QUERY, HITS, top_n=1)
    assert fake.requests == 1


def test_a_refused_request_is_not_retried(fake: FakeCohere) -> None:
    with pytest.raises(ProviderError, match=r"400: invalid request: query cannot be empty"):
        _reranker().rerank("   ", HITS, top_n=1)
    assert fake.requests == 1


@pytest.mark.parametrize("fault", ["bad_index", "dup_index"])
def test_an_invalid_answer_is_an_error(fake: FakeCohere, fault: str) -> None:
    fake.fail(fault)
    with pytest.raises(ProviderError, match="invalid or repeated index"):
        _reranker().rerank(QUERY, HITS, top_n=3)


def test_empty_hits_make_no_request(fake: FakeCohere) -> None:
    assert _reranker().rerank(QUERY, [], top_n=5) == []
    with pytest.raises(InputError, match="top_n must be at least 1"):
        _reranker().rerank(QUERY, HITS, top_n=0)
    assert fake.requests == 0


def test_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COHERE_API_KEY", raising=False)
    with pytest.raises(ProviderError) as info:
        get_reranker("cohere")
    assert str(info.value) == ("reranker 'cohere' needs an API key: set COHERE_API_KEY (or store it in a "
                               "Prefect Secret block named 'cohere-api-key')")


def test_unknown_name_lists_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COHERE_API_KEY", KEY)
    with pytest.raises(InputError, match=r"unknown reranker 'voyage': use one of cohere"):
        get_reranker("voyage:rerank-2")


def test_unreachable_service_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeCohere(api_key=KEY) as gone:
        url = gone.base_url  # a port that was just free, closed again below
    monkeypatch.setenv("COHERE_API_KEY", KEY)
    monkeypatch.setenv("COHERE_BASE_URL", url)
    expected = rf"could not reach Cohere at {url} after 2 attempts \(ConnectError\)"
    with pytest.raises(ProviderError, match=expected):
        get_reranker(max_attempts=2, retry_base=0.01).rerank(QUERY, HITS, top_n=1)


def test_one_reranker_serves_many_threads_on_its_one_client(fake: FakeCohere) -> None:
    reranker = _reranker()
    assert isinstance(reranker.client, cohere.ClientV2)
    with ThreadPoolExecutor(4) as pool:
        ranked = list(pool.map(lambda q: reranker.rerank(q, HITS, top_n=1)[0].id,
                               ["ranker", "nothing", "hybrid", "ranker"]))
    assert ranked == ["id2", "id0", "id2", "id2"] and fake.requests == 4
