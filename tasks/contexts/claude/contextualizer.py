"""Claude contexts at the lowest cost the pricing rules allow (`--context anthropic`).

One request per chunk with the whole document in the prompt is the method of Anthropic's
contextual-retrieval guide. What makes it cheap is the prompt cache: the document block carries
`cache_control`, the first request of a document writes the cache (1.25x the input price) and
every other request of that document reads it (0.1x). A cache entry becomes readable only once
the response that wrote it has started, so the requests of one document are scheduled first alone,
then the rest concurrently (the engine's `LLMClient`); a bounded pool shared by every document
keeps the global concurrency.

Documents under the model's minimum cacheable length cannot be cached; `group_chunks` then
situates all their chunks in one request (the document with its chunks marked, a JSON schema with
one context per chunk id), and retries on its own any chunk the answer misses. `batch` sends the
same requests through the Message Batches API at half price, with 1-hour cache entries (a batch
round can outlive the 5-minute cache; Anthropic recommends the 1-hour cache for batches with
shared context), and with each batch recorded until it is read in full, so a restarted run reads
it instead of paying twice.

Every context is kept (the driver's `keep`: the disk cache) by the worker that received its
answer, before that worker sends another request, so a killed run loses at most the `concurrency`
answers still on the wire; batch results are kept line by line as they are read.

What is Claude's here: the wire (`wire`: Messages, cache_control, usage, errors), the price table
(`pricing`) and Message Batches (`batches`). Planning, scheduling, retries, reading answers and
fencing prompts are the engine's (`situate.tasks.contexts.engine`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from situate.core.records import Chunk, Document
from situate.core.secrets import api_key as resolve_key
from situate.tasks.contexts.base import ContextConfig, ContextResult, Keep
from situate.tasks.contexts.claude.batches import Batches, BatchState
from situate.tasks.contexts.claude.wire import CATALOG, ClaudeClient
from situate.tasks.contexts.engine.contextualizer import LLMContextualizer
from situate.tasks.contexts.engine.planning import Options


class AnthropicContextualizer(LLMContextualizer):
    """Claude contexts, cache-aware scheduling, one retry policy, usage in dollars."""

    name = "anthropic"
    _api: ClaudeClient

    def make_options(self, config: ContextConfig, extra: dict[str, Any]) -> Options:
        return Options.from_config(CATALOG, config.model, extra)

    def connect(self, config: ContextConfig, extra: dict[str, Any],
                api_key: str | None) -> ClaudeClient:
        key = api_key or resolve_key("anthropic", required=True,
                                     user="context provider 'anthropic'")
        client = ClaudeClient(
            key, self.model,
            base_url=extra.get("base_url") or None,  # None: the SDK reads ANTHROPIC_BASE_URL
            timeout=float(extra.get("timeout_seconds", 120.0)),
            concurrency=config.concurrency, policy=self.policy, pricing=self.info.pricing)
        self._batches = Batches(
            client, self.planner, BatchState(self.state_dir), pricing=self.info.pricing,
            group=self.group_chunks,
            identity=json.dumps(self.options.identity(self.group_chunks), sort_keys=True),
            unpriced_model=None if self.priced else self.model,
            poll_seconds=float(extra.get("batch_poll_seconds", 30.0)),
            ttl=str(extra.get("batch_cache_ttl") or "1h"))
        return client

    def situate_corpus(self, items: Sequence[tuple[Document, Sequence[Chunk]]],
                       keep: Keep | None = None) -> list[ContextResult] | None:
        """Every (document, chunks) pair through the Message Batches API at half price (see
        `batches.Batches.situate_corpus`), each context to `keep` as its result is read; None
        when batch mode is off."""
        if not self.batch:
            return None
        return self._batches.situate_corpus(items, keep)


def from_config(config: ContextConfig) -> AnthropicContextualizer:
    """The registry's entry point for `--context anthropic`."""
    return AnthropicContextualizer(config)
