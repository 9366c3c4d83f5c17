"""`--context ollama`: Ollama's native /api/chat over plain HTTP against the loopback fake, which
cuts a prompt longer than num_ctx silently, as Ollama does. Nothing may be cut: num_ctx follows
each prompt, prompt_eval_count is checked, and a document over the context window is situated in spans of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from situate.core.errors import ProviderError
from situate.core.records import Document
from situate.tasks.contexts.base import ContextConfig, get_contextualizer
from situate.tasks.contexts.cache import situate_documents
from situate.tasks.contexts.cost import Assumptions, get_cost_models
from situate.tasks.contexts.ollama import OllamaContextualizer, base_url_of
from situate.tasks.corpus.load import load_corpus, make_chunks
from tests.conftest import CODEBASE
from tests.fakes.ollama_server import FakeOllama

pytestmark = pytest.mark.timeout(120)


def _doc(doc_id: str, tokens: int, chunk_chars: int = 800) -> Document:
    words = [f"{doc_id}_word{i}" for i in range(tokens * 4 // 12 + 1)]
    text = " ".join(words)[: tokens * 4]
    return Document(doc_id, text, make_chunks(doc_id, text, chunk_chars, 0))


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        yield server


def _make(fake: FakeOllama, spec: str = "ollama:llama3.2", **kwargs: object
          ) -> OllamaContextualizer:
    extra = {"base_url": fake.base_url, "retry_base_seconds": 0.01}
    extra.update(kwargs.pop("extra", {}))  # type: ignore[arg-type]
    cz = get_contextualizer(ContextConfig(name=spec, extra=extra, **kwargs))  # type: ignore[arg-type]
    assert isinstance(cz, OllamaContextualizer)
    return cz


def _own(doc: Document, results: list) -> None:
    for s in results:
        assert f"[ctx {hashlib.sha256(s.chunk.text.encode()).hexdigest()[:12]}]" in s.context, (
            doc.id, s.chunk.index)


def test_the_codebase_set_is_situated_with_no_prompt_cut(fake: FakeOllama) -> None:
    """Most codebase documents are longer than Ollama's default 2,048 tokens: num_ctx follows
    each prompt, so no request is cut and every context is its own chunk's."""
    docs = list(load_corpus(CODEBASE / "codebase_chunks.json").documents)[:30]
    cz = _make(fake, concurrency=4)
    results = situate_documents(cz, docs, None)
    cz.close()
    assert fake.truncated == 0
    assert any(r["tokens"] > 2048 for r in fake.requests)
    for doc, result in zip(docs, results, strict=True):
        _own(doc, result.situated)
    assert all(r["num_ctx"] >= r["tokens"] for r in fake.requests)
    usage = sum(r.usage.input_tokens for r in results)
    assert usage == sum(r["evaluated"] for r in fake.requests)
    assert sum(r.usage.cost_usd for r in results) == 0


def test_a_document_over_the_context_window_is_situated_in_spans(fake: FakeOllama) -> None:
    fake.models["small-window"] = 4096
    doc = _doc("long", 12_000)
    cz = _make(fake, "ollama:small-window", extra={"context_window": 4096})
    result = cz.situate(doc, doc.chunks)
    assert fake.truncated == 0 and all(r["num_ctx"] <= 4096 for r in fake.requests)
    assert all(s.source == "generated" for s in result.situated)
    _own(doc, result.situated)
    assert any("exceeds the 4096-token context window" in n for n in result.notes)


def test_a_cut_prompt_is_asked_again_with_more_room_never_kept() -> None:
    """A tokenizer denser than situate's estimate (2 characters a token): a prompt that leaves
    the answer less than its room filled num_ctx (it may have been cut), so it is asked again
    with a larger num_ctx; at the model's context window, an error, never a context from a cut prompt."""
    doc = _doc("dense", 3000)
    with FakeOllama(chars_per_token=2) as fake:
        result = _make(fake, extra={"context_window": 8192}).situate(doc, doc.chunks[:1])
        assert [r["num_ctx"] for r in fake.requests] == [5632, 8192]
        assert fake.truncated == 1 and result.situated[0].source == "generated"
        _own(doc, result.situated)
        with pytest.raises(ProviderError, match=r"Ollama cut the prompt of document dense.*"
                                                r"SITUATE_LLM_CONTEXT_WINDOW"):
            _make(fake, extra={"context_window": 4096}).situate(doc, doc.chunks[:1])


def test_grouped_requests_use_the_format_schema(fake: FakeOllama) -> None:
    doc = _doc("grouped", 1500)
    result = _make(fake, group_chunks=True).situate(doc, doc.chunks)
    assert len(fake.requests) == 1
    assert [s.context.startswith(f"[ctx chunk {s.chunk.index}]") for s in result.situated] == [
        True] * len(doc.chunks)


@pytest.mark.parametrize(("spec", "models", "words"), [
    ("ollama:missing", None, r"does not have model 'missing'.*ollama pull missing"),
    ("ollama:short", {"short": 4096}, r"context window of short .* is 4096 tokens.*"
                                      r"SITUATE_LLM_CONTEXT_WINDOW=4096"),
])
def test_unknown_model_and_context_window_too_small_are_one_line(
        spec: str, models: dict | None, words: str) -> None:
    with FakeOllama(models=models) as fake:
        cz = _make(fake, spec)
        docs = [_doc(f"d{i}", 300) for i in range(3)]
        with pytest.raises(ProviderError, match=words) as info:
            situate_documents(cz, docs, None)
        assert "\n" not in str(info.value)
        assert fake.requests == []  # stopped at /api/show, before any chat


def test_an_unreachable_server_is_one_line() -> None:
    with FakeOllama() as gone:
        url = gone.base_url
    cz = get_contextualizer(ContextConfig(name="ollama", max_attempts=2, extra={
        "base_url": url, "retry_base_seconds": 0.01}))
    with pytest.raises(ProviderError, match=r"could not reach Ollama at .*ollama serve"):
        cz.situate(_doc("x", 300), _doc("x", 300).chunks)


def test_address_identity_and_plan(fake: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:11500")
    assert base_url_of({}) == "http://127.0.0.1:11500"
    assert base_url_of({"base_url": fake.base_url}) == fake.base_url
    identity = _make(fake).cache_identity()
    assert identity["provider"] == "ollama" and identity["model"] == "llama3.2"
    assert identity["server"] == fake.base_url
    [model, grouped] = get_cost_models(ContextConfig(name="ollama", extra={
        "base_url": fake.base_url}), Assumptions())
    doc = _doc("plan", 3000)
    estimate = model.estimate(doc, doc.chunks)
    assert estimate.usage.requests == len(doc.chunks) and model.price(estimate.usage) == 0
    assert grouped.mode == "grouped"
