"""The contextualizer every LLM provider is: plan a document's requests (`planning`), send them
through one client (`client`: the document's first request alone, the rest after it started,
retries, fail-fast), read the answers (`answers`: each context kept as it arrives), and retry on
their own the chunks a group answer missed. A provider subclass says only how to reach its
service (`connect`: a `Wire` in an `LLMClient`) and what it knows of its models (`options`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from situate.core.records import Chunk, Document
from situate.core.retry import RetryPolicy
from situate.core.settings import get_settings
from situate.tasks.contexts.base import ContextConfig, ContextResult, Contextualizer, Keep
from situate.tasks.contexts.engine import rates
from situate.tasks.contexts.engine.answers import Outcome
from situate.tasks.contexts.engine.client import LLMClient
from situate.tasks.contexts.engine.planning import Options, Unit


class LLMContextualizer(Contextualizer):
    """Contexts from an LLM service, cache-aware scheduling, one retry policy, usage in dollars.

    One instance is shared by every document of a run (the flow maps documents over threads), so
    the limiter (a pool of `concurrency` workers), the fail-fast state and the rate-limit pause are
    shared; the bill is returned per ContextResult.
    """

    name = "llm"
    # Whether a run's pace is worth keeping for the next plan's time estimate (a local server,
    # whose time is its cost).
    measures_rate = False

    def __init__(self, config: ContextConfig, api_key: str | None = None) -> None:
        self.config = config
        extra = dict(config.extra or {})
        self.options = self.make_options(config, extra)
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
        self.policy = RetryPolicy(self.max_attempts, float(extra.get("retry_base_seconds", 1.0)),
                                  float(extra.get("retry_max_seconds", 60.0)))
        # Where batch ids and a free server's measured pace are kept: beside the context cache
        # (under ./data by default, the user's choice), never in the working directory.
        self.state_dir = Path(config.state_dir or extra.get("state_dir") or get_settings().cache_dir)
        self._api: LLMClient = self.connect(config, extra, api_key)

    # --- what a provider says -----------------------------------------------------------------

    def make_options(self, config: ContextConfig, extra: dict[str, Any]) -> Options:
        raise NotImplementedError

    def connect(self, config: ContextConfig, extra: dict[str, Any],
                api_key: str | None) -> LLMClient:
        raise NotImplementedError

    # --- the rest is shared --------------------------------------------------------------------

    # Pickled into workers (Dask, Prefect payloads): ship the settings, never the key or client.
    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["config"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    def cache_identity(self) -> dict[str, str | int]:
        """See `planning.Options.identity`: shared with the cost estimate."""
        return self.options.identity(self.group_chunks)

    def abort(self) -> None:
        self._api.abort()

    def close(self) -> None:
        self._api.close()
        if self.measures_rate:
            rates.record(self.state_dir, self.options, self._api.timings)

    def situate(self, doc: Document, chunks: Sequence[Chunk],
                keep: Keep | None = None) -> ContextResult:
        """Contexts for `chunks` of `doc`, in order, with the bill of the requests made; each
        context goes to `keep` as its answer arrives (one per request, a group's at once)."""
        chunks = list(chunks)
        outcome = Outcome(keep=keep)
        if not chunks:
            return ContextResult([], outcome.usage)
        group = self.group_chunks and self.can_group()
        units, outcome.notes = self.planner.plan(doc, chunks, group)
        self._run(units, outcome)
        missed = [c for c in chunks if c.index not in outcome.contexts]
        if missed and group:
            outcome.notes.append(f"document {doc.id}: the group answer missed chunk(s) "
                                 f"{', '.join(str(c.index) for c in missed)}; asked one by one")
            retry_units, _ = self.planner.plan(doc, missed, group=False)
            self._run(retry_units, outcome)
        return outcome.result(chunks, self._unpriced())

    def can_group(self) -> bool:
        """Whether the service answers with JSON of a schema (else chunks go one by one)."""
        return True

    def _run(self, units: Sequence[Unit], outcome: Outcome) -> None:
        for unit in units:
            self._api.run_unit(unit, outcome.take)

    def _unpriced(self) -> str | None:
        return None if self.priced else self.model
