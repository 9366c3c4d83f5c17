"""What the Claude contextualizer's tests share: the fake service with its key, documents on
either side of Haiku's cache floor, and a contextualizer built against the fake."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from situate.core.records import Document, Usage
from situate.storage.cache import DiskContextCache
from situate.tasks.contexts.base import ContextConfig, ContextResult, get_contextualizer
from situate.tasks.contexts.cache import situate_document
from situate.tasks.contexts.claude import (
    MODELS,
    AnthropicContextualizer,
)
from situate.tasks.corpus.load import make_chunks
from tests.fakes.anthropic_server import FakeAnthropic

KEY = "sk-ant-test-key-0123456789"
HAIKU = MODELS["claude-haiku-4-5"]


def _doc(doc_id: str, tokens: int, chunk_chars: int = 800) -> Document:
    """A document of about `tokens` fake tokens, chunked the way the loaders chunk."""
    words = [f"{doc_id}_word{i}" for i in range(tokens * 4 // 12 + 1)]
    text = ""
    for n, w in enumerate(words):
        text += w + ("\n" if n % 8 == 7 else " ")
    text = text[: tokens * 4]
    return Document(doc_id, text, make_chunks(doc_id, text, chunk_chars, 0))


BIG = _doc("big", 6000)  # above Haiku 4.5's 4,096-token floor
SMALL = _doc("small", 1500)  # below it


def _make(fake: FakeAnthropic, tmp_path: Path | None = None, **kwargs: object
          ) -> AnthropicContextualizer:
    extra = {"base_url": fake.base_url, "retry_base_seconds": 0.01, "batch_poll_seconds": 0.02}
    extra.update(kwargs.pop("extra", {}))  # type: ignore[arg-type]
    config = ContextConfig(name="anthropic", concurrency=int(kwargs.pop("concurrency", 8)),
                           state_dir=str(tmp_path or ""), extra=extra, **kwargs)  # type: ignore[arg-type]
    contextualizer = get_contextualizer(config)
    assert isinstance(contextualizer, AnthropicContextualizer)
    return contextualizer


def _situate_all(cz: AnthropicContextualizer, docs: Sequence[Document],
                 cache: DiskContextCache | None = None) -> list[ContextResult]:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda d: situate_document(cz, d, cache), docs))


def _total(results: Sequence[ContextResult]) -> Usage:
    usage = Usage()
    for r in results:
        usage.add(r.usage)
    return usage


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _assert_contexts_match(results: Sequence[ContextResult], docs: Sequence[Document]) -> None:
    """Every chunk has a context, in order, and it is the answer to that chunk's own request."""
    for result, doc in zip(results, docs, strict=True):
        assert [s.chunk.index for s in result.situated] == [c.index for c in doc.chunks]
        for s in result.situated:
            assert f"[ctx {_digest(s.chunk.text)}]" in s.context


class _DyingCache(DiskContextCache):
    """A cache whose process dies at its write number `lives + 1`: a run killed mid-way."""

    def __init__(self, directory: Path, lives: int) -> None:
        super().__init__(directory)
        self.lives = lives

    def put(self, key: str, context: str) -> None:
        if self.lives == 0:
            raise RuntimeError("killed")
        self.lives -= 1
        super().put(key, context)
