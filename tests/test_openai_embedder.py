"""The `openai` embedder (pymilvus-model over the real openai SDK) against the loopback fake of
OpenAI's embeddings API that benchmarks/bench_scale.py uses."""

from __future__ import annotations

import math

import pytest

from situate.core.errors import ProviderError
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture
def fake(monkeypatch):
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
        yield server


def test_documents_and_queries_embed_through_the_sdk(fake, embedders):
    e = embedders.get("openai")
    assert e.dim == 1536
    docs = e.embed_documents(["lease the queue", "flush the segment", "lease the queue"], batch_size=2)
    assert len(docs) == 3 and all(len(v) == 1536 for v in docs)
    assert docs[0] == docs[2] and docs[0] != docs[1]
    assert math.isclose(sum(x * x for x in docs[0]), 1.0, rel_tol=1e-5)
    assert fake.requests == 2 and fake.texts == 3  # batches of 2: two requests
    [query] = e.embed_queries(["queue the lease"])
    assert query == docs[0]  # the same words, the same hashed vector


def test_a_refused_key_is_one_error_without_the_key(fake, monkeypatch, embedders):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-123456")
    with pytest.raises(ProviderError) as info:
        embedders.get("openai").embed_documents(["x"])
    assert "sk-wrong-key-123456" not in str(info.value)
    assert "401" in str(info.value) or "AuthenticationError" in str(info.value)
