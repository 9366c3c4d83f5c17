"""Claude contexts at the lowest cost the pricing rules allow (`--context anthropic`).

One request per chunk with the whole document in the prompt is the method of Anthropic's
contextual-retrieval guide. What makes it cheap is the prompt cache: the document block carries
`cache_control`, the first request of a document writes the cache (1.25x the input price) and
every other request of that document reads it (0.1x). A cache entry becomes readable only once
the response that wrote it has started, so the requests of one document are scheduled first alone,
then the rest concurrently; a bounded pool shared by every document keeps the global concurrency.

Documents under the model's minimum cacheable length cannot be cached; `group_chunks` then
situates all their chunks in one request (the document with its chunks marked, a JSON schema with
one context per chunk id), and retries on its own any chunk the answer misses. `batch` sends the
same requests through the Message Batches API at half price, with each batch recorded until it
is read in full, so a restarted run reads it instead of paying twice.

Every context is kept (the driver's `keep`: the disk cache) by the worker that received its
answer, before that worker sends another request, so a killed run loses at most the `concurrency`
answers still on the wire; batch results are kept line by line as they are read.

Billing uses the usage the service reports; token estimates only steer scheduling (is a document
cacheable, does it fit the context window). The API key lives in the client only: it is never in a
message, the cache, a pickle or a file.

The pieces: `prompts` (what is asked), `pricing` (model facts and the bill), `planning` (which
requests), `client` (the pool, calls and retries), `answers` (reading replies), `batches`
(Message Batches). This module puts them together behind the `Contextualizer` interface.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from situate.core.records import Chunk, Document
from situate.core.retry import RetryPolicy
from situate.core.secrets import api_key as resolve_key
from situate.tasks.contexts.base import ContextConfig, ContextResult, Contextualizer, Keep
from situate.tasks.contexts.claude.answers import Outcome
from situate.tasks.contexts.claude.batches import Batches, BatchState
from situate.tasks.contexts.claude.client import ClaudeClient
from situate.tasks.contexts.claude.planning import Job, Options, Unit


class AnthropicContextualizer(Contextualizer):
    """Claude contexts, cache-aware scheduling, one retry policy, usage in dollars.

    One instance is shared by every document of a run (the flow maps documents over threads), so
    the limiter (a pool of `concurrency` workers), the fail-fast state and the rate-limit pause are
    shared; the bill is returned per ContextResult.
    """

    name = "anthropic"

    def __init__(self, config: ContextConfig, api_key: str | None = None) -> None:
        self.config = config
        extra = dict(config.extra or {})
        self.options = Options.from_config(config.model, extra)
        self.model = self.options.model
        self.info = self.options.info
        self.priced = self.options.priced
        self.group_chunks = config.group_chunks
        self.batch = config.batch
        self.max_attempts = max(1, config.max_attempts)
        self.max_tokens = self.options.max_tokens
        self.context_tokens = self.options.context_tokens
        self.group_size = self.options.group_size
        self.planner = self.options.planner()
        key = api_key or resolve_key("anthropic", required=True,
                                     user="context provider 'anthropic'")
        self._api = ClaudeClient(
            key, self.model,
            base_url=extra.get("base_url") or None,  # None: the SDK reads ANTHROPIC_BASE_URL
            timeout=float(extra.get("timeout_seconds", 120.0)),
            concurrency=config.concurrency,
            policy=RetryPolicy(self.max_attempts, float(extra.get("retry_base_seconds", 1.0)),
                               float(extra.get("retry_max_seconds", 60.0))))
        state_dir = Path(config.state_dir or extra.get("state_dir") or ".situate-state")
        self._batches = Batches(
            self._api, self.planner, BatchState(state_dir), pricing=self.info.pricing,
            group=self.group_chunks,
            identity=json.dumps(self.cache_identity(), sort_keys=True),
            unpriced_model=self._unpriced(),
            poll_seconds=float(extra.get("batch_poll_seconds", 30.0)))

    # Pickled into workers (Dask, Prefect payloads): ship the settings, never the key or client.
    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        AnthropicContextualizer.__init__(self, state["config"])

    def __repr__(self) -> str:
        return f"AnthropicContextualizer(model={self.model!r})"

    def cache_identity(self) -> dict[str, str | int]:
        """See `planning.Options.identity`: shared with the cost estimate."""
        return self.options.identity(self.group_chunks)

    def abort(self) -> None:
        self._api.abort()

    def close(self) -> None:
        self._api.close()

    # --- the per-document path --------------------------------------------------------------

    def situate(self, doc: Document, chunks: Sequence[Chunk],
                keep: Keep | None = None) -> ContextResult:
        """Contexts for `chunks` of `doc`, in order, with the bill of the requests made; each
        context goes to `keep` as its answer arrives (one per request, a group's at once)."""
        chunks = list(chunks)
        outcome = Outcome(keep=keep)
        if not chunks:
            return ContextResult([], outcome.usage)
        units, outcome.notes = self.planner.plan(doc, chunks, self.group_chunks)
        self._run(units, outcome)
        missed = [c for c in chunks if c.index not in outcome.contexts]
        if missed and self.group_chunks:
            outcome.notes.append(f"document {doc.id}: the group answer missed chunk(s) "
                                 f"{', '.join(str(c.index) for c in missed)}; asked one by one")
            retry_units, _ = self.planner.plan(doc, missed, group=False)
            self._run(retry_units, outcome)
        return outcome.result(chunks, self._unpriced())

    def _run(self, units: Sequence[Unit], outcome: Outcome) -> None:
        def take(job: Job, message: Any) -> None:
            outcome.take(job, message, self.info.pricing, batch=False)

        for unit in units:
            self._api.run_unit(unit, take)

    def _unpriced(self) -> str | None:
        return None if self.priced else self.model

    # --- batch mode -------------------------------------------------------------------------

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

