"""`--context openai`: the shared engine with OpenAI's wire, through the real `openai` SDK against
the loopback fake of chat completions with automatic prefix caching (tests/fakes/openai_chat_server).

One run over the codebase set (90 documents, 737 chunks, read in place) at concurrency 8 is shared
by the tests that look at it: each document's prefix written once, the cached tokens against the
ideal, every chunk with its own context, and the dry run's plan against the fake's bill.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from situate.core.errors import ProviderError
from situate.core.records import Document, Usage, sha256
from situate.storage.cache import DiskContextCache
from situate.tasks.contexts.base import ContextConfig, ContextResult, get_contextualizer
from situate.tasks.contexts.cache import situate_documents
from situate.tasks.contexts.cost import Assumptions, Estimate, get_cost_models
from situate.tasks.contexts.engine.prompts import chunk_prompt, document_block, fence_of
from situate.tasks.contexts.openai_chat import MODELS, SEPARATOR, OpenAIContextualizer
from situate.tasks.corpus.load import load_corpus
from tests.conftest import CODEBASE
from tests.fakes.openai_chat_server import (
    CACHE_MIN,
    CACHE_STEP,
    CHARS_PER_TOKEN,
    FakeOpenAIChat,
    count_tokens,
)

pytestmark = pytest.mark.timeout(120)

KEY = "sk-test-openai-contexts-0123"
MODEL = "gpt-4.1-mini"
OUTPUT = 40
PRICE = MODELS[MODEL].pricing


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _config(fake: FakeOpenAIChat, tmp_path: Path | None = None, **kwargs: object) -> ContextConfig:
    extra = {"base_url": fake.base_url + "/v1", "retry_base_seconds": 0.01}
    extra.update(kwargs.pop("extra", {}))  # type: ignore[arg-type]
    return ContextConfig(name=str(kwargs.pop("name", f"openai:{MODEL}")),
                         concurrency=int(kwargs.pop("concurrency", 8)),  # type: ignore[arg-type]
                         state_dir=str(tmp_path or ""), extra=extra, **kwargs)  # type: ignore[arg-type]


def _make(fake: FakeOpenAIChat, tmp_path: Path | None = None, **kwargs: object
          ) -> OpenAIContextualizer:
    cz = get_contextualizer(_config(fake, tmp_path, **kwargs))
    assert isinstance(cz, OpenAIContextualizer)
    return cz


def _total(results: list[ContextResult]) -> Usage:
    usage = Usage()
    for r in results:
        usage.add(r.usage)
    return usage


def _prefix_tokens(doc: Document) -> int:
    """The fake's tokens of what every request of `doc` shares: the fenced document block."""
    return count_tokens(document_block(doc.text, fence_of(doc)) + SEPARATOR)


@dataclass
class CodebaseRun:
    docs: list[Document]
    results: list[ContextResult]
    fake: FakeOpenAIChat
    plan: Estimate
    plan_cost: float


@pytest.fixture(scope="module")
def codebase(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CodebaseRun]:
    """The codebase set situated once per chunk at concurrency 8, and planned beforehand."""
    docs = list(load_corpus(CODEBASE / "codebase_chunks.json").documents)
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", KEY)
    mp.delenv("OPENAI_BASE_URL", raising=False)
    tmp = tmp_path_factory.mktemp("codebase")
    with FakeOpenAIChat(api_key=KEY, latency=0.005, output_tokens=OUTPUT) as fake:
        config = _config(fake, tmp)
        [model, *_] = get_cost_models(config, Assumptions(chars_per_token=CHARS_PER_TOKEN,
                                                          context_tokens=OUTPUT))
        plan = Estimate()
        for doc in docs:
            plan.add(model.estimate(doc, doc.chunks))
        plan_cost = model.price(plan.usage)
        cz = get_contextualizer(config)
        try:
            results = situate_documents(cz, docs, DiskContextCache(tmp / "cache"))
        finally:
            cz.close()
        yield CodebaseRun(docs, results, fake, plan, plan_cost)
    mp.undo()


# --- the codebase set ---------------------------------------------------------------------------

def test_every_chunk_of_the_codebase_gets_its_own_context(codebase: CodebaseRun) -> None:
    situated = [s for r in codebase.results for s in r.situated]
    assert len(situated) == 737
    assert all(s.source == "generated" and s.context.startswith("[ctx ") for s in situated)
    import hashlib

    for s in situated:  # the answer to that chunk's own request
        assert f"[ctx {hashlib.sha256(s.chunk.text.encode()).hexdigest()[:12]}]" in s.context


def test_each_documents_prefix_is_written_once_at_concurrency_8(codebase: CodebaseRun) -> None:
    """No request missed a prefix an earlier request of its document had written: the first
    request of a document reads nothing, every other one reads at least the document's prefix
    (in 128-token steps), and no request wrote a step another was still writing."""
    fake = codebase.fake
    assert 1 < fake.max_in_flight <= 8
    by_route: dict[str, list[int]] = defaultdict(list)
    for call in fake.calls:
        by_route[call.route].append(call.cached_tokens)
    keys = {r.situated[0].chunk.doc_id: None for r in codebase.results}
    assert len(by_route) == len(keys) == 90  # one prompt_cache_key per document
    cacheable = 0
    for doc in codebase.docs:
        route = f"situate-{sha256(doc.hash)[:32]}"  # the document's prompt_cache_key
        cached = by_route[route]
        prefix = _prefix_tokens(doc)
        assert cached[0] == 0
        # Steps past the prefix hold the chunk: two chunks that begin alike may share one.
        assert not [c for c in fake.calls if c.route == route and c.duplicate
                    and c.duplicate <= prefix], doc.id
        if prefix >= CACHE_MIN and len(doc.chunks) > 1:
            cacheable += 1
            assert min(cached[1:]) >= prefix // CACHE_STEP * CACHE_STEP, doc.id
    assert cacheable >= 40


def test_cached_tokens_reach_90_percent_of_the_ideal(codebase: CodebaseRun) -> None:
    """Ideal: every chunk after a document's first reads the whole document prefix, wherever the
    prefix reaches OpenAI's 1,024-token floor."""
    ideal = sum((len(d.chunks) - 1) * _prefix_tokens(d) for d in codebase.docs
                if _prefix_tokens(d) >= CACHE_MIN)
    usage = _total(codebase.results)
    assert usage.cache_read_tokens == codebase.fake.usage["cached_tokens"]
    print(f"\ncached {usage.cache_read_tokens} of ideal {ideal} "
          f"({usage.cache_read_tokens / ideal:.1%})")
    assert usage.cache_read_tokens >= 0.9 * ideal


def test_the_bill_is_the_fakes_usage_priced_at_the_cached_rate(codebase: CodebaseRun) -> None:
    usage = _total(codebase.results)
    fake = codebase.fake.usage
    assert usage.requests == fake["requests"] == 737
    assert usage.input_tokens + usage.cache_read_tokens == fake["prompt_tokens"]
    assert usage.output_tokens == fake["completion_tokens"] == 737 * OUTPUT
    billed = ((fake["prompt_tokens"] - fake["cached_tokens"]) * PRICE.input
              + fake["cached_tokens"] * PRICE.cache_read
              + fake["completion_tokens"] * PRICE.output) / 1e6
    assert usage.cost_usd == pytest.approx(billed)


def test_the_dry_run_predicts_the_bill(codebase: CodebaseRun) -> None:
    """Requests exact; prompt, cached and output tokens and dollars within 2% of the fake's."""
    plan, fake = codebase.plan.usage, codebase.fake.usage
    billed = ((fake["prompt_tokens"] - fake["cached_tokens"]) * PRICE.input
              + fake["cached_tokens"] * PRICE.cache_read
              + fake["completion_tokens"] * PRICE.output) / 1e6
    print(f"\nplan {plan.requests} requests ${codebase.plan_cost:.5f}; billed {fake['requests']} "
          f"${billed:.5f}; cached {plan.cache_read_tokens}/{fake['cached_tokens']}")
    assert plan.requests == fake["requests"]
    for predicted, actual in ((plan.input_tokens + plan.cache_read_tokens,
                               fake["prompt_tokens"]),
                              (plan.cache_read_tokens, fake["cached_tokens"]),
                              (plan.output_tokens, fake["completion_tokens"]),
                              (codebase.plan_cost, billed)):
        assert abs(predicted - actual) <= 0.02 * actual, (predicted, actual)


# --- small documents ------------------------------------------------------------------------------

def _doc(doc_id: str, tokens: int, chunk_chars: int = 800) -> Document:
    from situate.tasks.corpus.load import make_chunks

    words = [f"{doc_id}_word{i}" for i in range(tokens * 4 // 12 + 1)]
    text = " ".join(words)[: tokens * 4]
    return Document(doc_id, text, make_chunks(doc_id, text, chunk_chars, 0))


@pytest.fixture
def fake() -> Iterator[FakeOpenAIChat]:
    with FakeOpenAIChat(api_key=KEY, latency=0.01, output_tokens=OUTPUT) as server:
        yield server


def test_the_request_lays_the_document_out_first_and_the_chunk_last(fake: FakeOpenAIChat
                                                                    ) -> None:
    doc = _doc("layout", 3000)
    cz = _make(fake)
    cz.situate(doc, doc.chunks)
    block = document_block(doc.text, fence_of(doc)) + SEPARATOR
    assert len(fake.bodies) == len(doc.chunks)
    for body in fake.bodies:
        [message] = body["messages"]
        assert message["role"] == "user" and message["content"].startswith(block)
        assert body["prompt_cache_key"] == fake.bodies[0]["prompt_cache_key"]
        assert doc.id not in body["prompt_cache_key"]  # a hash, never the document's name
        assert body["max_tokens"] == 1024 and "response_format" not in body
    # What follows the block is each chunk's question, the chunk last.
    tails = sorted(b["messages"][0]["content"][len(block):] for b in fake.bodies)
    assert tails == sorted(chunk_prompt(c.text, fence_of(doc)) for c in doc.chunks)
    # The official API gets max_completion_tokens (reasoning models refuse max_tokens).
    from situate.tasks.contexts.openai_chat import OpenAIWire

    wire = OpenAIWire(None, MODEL, PRICE, "https://api.openai.com/v1")
    assert "max_completion_tokens" in wire.body(cz.planner.plan(doc, doc.chunks[:1], False)[0][0]
                                                .jobs[0])


def test_grouped_requests_ask_for_json_of_the_schema(fake: FakeOpenAIChat) -> None:
    docs = [_doc("g1", 900), _doc("g2", 1500)]
    fake.group_omit_rate = 0.3
    cz = _make(fake, group_chunks=True)
    results = [cz.situate(d, d.chunks) for d in docs]
    for result, doc in zip(results, docs, strict=True):
        assert [s.chunk.index for s in result.situated] == [c.index for c in doc.chunks]
        assert all(s.source == "generated" and s.context for s in result.situated)
    formats = [b["response_format"] for b in fake.bodies if "response_format" in b]
    assert len(formats) == 2 and all(f["type"] == "json_schema" and f["json_schema"]["strict"]
                                     for f in formats)
    assert any("missed chunk" in n for r in results for n in r.notes)


def test_429_with_retry_after_and_dropped_connections_are_retried(fake: FakeOpenAIChat) -> None:
    import time

    doc = _doc("retry", 1500)
    fake.script.extend(["429", "500", "drop"])
    fake.retry_after = 0.3
    start = time.monotonic()
    result = _make(fake).situate(doc, doc.chunks)
    assert time.monotonic() - start >= 0.3  # retry-after honoured
    assert all(s.source == "generated" for s in result.situated)
    assert (fake.responses[429], fake.responses[500], fake.responses["drop"]) == (1, 1, 1)
    assert fake.usage["requests"] == len(doc.chunks)


def test_a_refused_key_is_one_line_and_stops_at_the_first_call(
        fake: FakeOpenAIChat, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-42")
    cz = _make(fake)
    docs = [_doc(f"d{i}", 600) for i in range(4)]
    with pytest.raises(ProviderError) as info:
        situate_documents(cz, docs, None)
    message = str(info.value)
    assert "\n" not in message and "sk-wrong-key-42" not in message
    assert "rejected the API key (401 invalid_api_key" in message and "OPENAI_API_KEY" in message
    assert dict(fake.responses) == {401: 1}


def test_an_unknown_model_and_a_window_too_small_are_one_line(fake: FakeOpenAIChat) -> None:
    doc = _doc("m", 600)
    with pytest.raises(ProviderError, match=r"does not serve model 'no-such-model'.*"
                                            r"--context openai:MODEL"):
        _make(fake, name="openai:no-such-model").situate(doc, doc.chunks)
    fake.models["tiny-window"] = 1000
    with pytest.raises(ProviderError, match=r"longer than the model's context window.*"
                                            r"SITUATE_LLM_CONTEXT_WINDOW"):
        _make(fake, name="openai:tiny-window", extra={"context_window": 4096}).situate(
            _doc("long", 2000), _doc("long", 2000).chunks[:1])


def test_an_unreachable_server_is_one_line() -> None:
    with FakeOpenAIChat(api_key=KEY) as gone:
        url = gone.base_url
    cz = get_contextualizer(ContextConfig(name="openai:local-model", extra={
        "base_url": url + "/v1", "retry_base_seconds": 0.01}, max_attempts=2))
    with pytest.raises(ProviderError, match=r"could not reach the OpenAI-compatible server at "
                                            r".*--llm-base-url"):
        cz.situate(_doc("x", 300), _doc("x", 300).chunks)


def test_a_local_server_needs_no_key_and_costs_nothing(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    doc = _doc("local", 1500)
    with FakeOpenAIChat(api_key=None, output_tokens=OUTPUT) as server:
        cz = _make(server, tmp_path, name="openai:local-model")
        result = cz.situate(doc, doc.chunks)
        cz.close()
        config = _config(server, tmp_path, name="openai:local-model")
    assert all(s.source == "generated" for s in result.situated)
    assert result.usage.cost_usd == 0 and not result.notes
    assert cz.cache_identity()["server"].startswith("http://127.0.0.1:")
    # The run measured the server's pace; the next plan is timed by it.
    assert (tmp_path / "llm-rates.json").is_file()
    [model, _] = get_cost_models(config, Assumptions())
    estimate = model.estimate(doc, doc.chunks)
    assert model.price(estimate.usage) == 0
    assert model.measured is not None and model.seconds(estimate, 1) > 0


def test_price_overrides_and_the_cached_rate(fake: FakeOpenAIChat) -> None:
    doc = _doc("priced", 3000)
    cz = _make(fake, name="openai:local-model",
               extra={"price_input": 2.0, "price_cached_input": 0.5, "price_output": 8.0})
    u = cz.situate(doc, doc.chunks).usage
    assert u.cache_read_tokens > 0
    assert u.cost_usd == pytest.approx((u.input_tokens * 2.0 + u.cache_read_tokens * 0.5
                                        + u.output_tokens * 8.0) / 1e6)


def test_the_cache_identity_names_the_server_and_the_model(fake: FakeOpenAIChat) -> None:
    local = _make(fake, name="openai:local-model").cache_identity()
    assert local["provider"] == "openai" and local["model"] == "local-model"
    assert local["server"] == fake.base_url + "/v1"
    official = get_contextualizer(ContextConfig(name="openai")).cache_identity()
    assert "server" not in official and official["model"] == "gpt-4.1-mini"


def test_a_killed_run_resumed_pays_at_most_the_answers_in_flight(tmp_path: Path) -> None:
    """The process dies at the cache's 60th write: nothing more is sent (`abort`), the answers
    still on the wire are paid and lost. The next run pays only for what was not kept, so over
    both runs at most the 8 answers in flight were paid twice."""
    docs = [_doc(f"k{i}", 2500) for i in range(8)]
    chunks = sum(len(d.chunks) for d in docs)

    class Dying(DiskContextCache):
        lives = 60

        def put(self, key: str, context: str) -> None:
            if Dying.lives == 0:
                dying.abort()  # a dead process sends nothing more
                raise RuntimeError("killed")
            Dying.lives -= 1
            super().put(key, context)

    with FakeOpenAIChat(api_key=KEY, latency=0.02, output_tokens=OUTPUT) as server:
        dying = _make(server)
        with pytest.raises((RuntimeError, ProviderError)):
            situate_documents(dying, docs, Dying(tmp_path / "cache"))
        first = server.usage["requests"]
        assert 60 <= first < chunks
        results = situate_documents(_make(server), docs, DiskContextCache(tmp_path / "cache"))
        paid = server.usage["requests"]
    assert all(s.source in ("generated", "cache") for r in results for s in r.situated)
    assert sum(len(r.situated) for r in results) == chunks
    print(f"\nkilled after {first} answers; paid {paid} over both runs for {chunks} chunks")
    assert chunks <= paid <= chunks + 8
