"""What LLM contexts would cost, worked out before a run (`situate ingest --dry-run`), for any
provider: the very requests the contextualizer would send (the same `Planner`, the same rules for
the prompt cache), their tokens estimated from characters, their bill from the provider's price
table. A provider says only how its cache bills (`CacheRule`) and what its tokens cost.

Nothing is called and no key is needed. What stays an estimate is said where it is made: the
tokenizer (`models.CHARS_PER_TOKEN` characters per token unless told otherwise), the length of
each context, and the latency of a request (or, for a local server, its pace measured by the
last run against it: `rates`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from situate.core.records import Chunk, Document, Usage
from situate.tasks.contexts.cost import Assumptions, CostModel, Estimate
from situate.tasks.contexts.engine import rates
from situate.tasks.contexts.engine.models import CHARS_PER_TOKEN, expected_tokens, price
from situate.tasks.contexts.engine.planning import Job, Options


@dataclass(frozen=True)
class CacheRule:
    """How a provider's prompt cache bills a unit of requests sharing a document prefix.

    `explicit` (Anthropic): the first request writes the prefix (at the write price), the others
    read it; only when the prefix reaches the model's floor. `automatic` (OpenAI and compatible
    servers): nothing is written at a price; every request after the first reads the prefix
    rounded down to `step` tokens, when it reaches the floor. `none`: every request pays its whole
    prompt. `write_1h`: writes are 1-hour writes. `expires`: entries are gone by the time the
    rest of the unit is sent (a 5-minute entry outlived by a Message Batches round), so they
    write again instead of reading."""

    kind: str = "explicit"  # explicit | automatic | none
    step: int = 1
    write_1h: bool = False
    expires: bool = False


class LLMCost(CostModel):
    """The bill of one mode of a provider (per chunk or grouped, live or batched), request by
    request.

    Per unit of requests sharing a document prefix (see `planning.Unit`): the provider's
    `CacheRule` decides which tokens are written, read, or paid in full. A group request's JSON
    schema is part of its prefix (services make it a system prompt), counted as its JSON text.
    Each context is expected to be `context_tokens` long, capped by the request's `max_tokens`;
    a group answer adds its JSON around them.
    """

    def __init__(self, name: str, options: Options, group: bool, batch: bool, concurrency: int,
                 assumptions: Assumptions, *, mode: str, flags: str, rule: CacheRule,
                 discount: float = 1.0, state_dir: str = "", separator: str = "") -> None:
        self.name = name
        self.options = options
        self.planner = options.planner()
        self.group = group
        self.batch = batch
        self.concurrency = max(1, concurrency)
        self.assumptions = assumptions
        self.chars_per_token = assumptions.chars_per_token or CHARS_PER_TOKEN
        self.mode, self.flags = mode, flags
        self.rule = rule
        self.discount = discount
        self.generates = True
        self.separator = separator  # what the wire puts between the document block and the rest
        self.measured = (rates.measured(Path(state_dir), options)
                         if state_dir and options.info.pricing.input == 0 else None)

    def cache_identity(self) -> dict[str, str | int]:
        return self.options.identity(self.group)

    def tokens(self, text: str) -> int:
        return expected_tokens(text, self.chars_per_token or CHARS_PER_TOKEN)

    def estimate(self, doc: Document, chunks: Sequence[Chunk]) -> Estimate:
        total = Estimate()
        if not chunks:
            return total
        units, _ = self.planner.plan(doc, list(chunks), self.group)
        floor = self.options.info.min_cache_tokens
        rule = self.rule
        for unit in units:
            block = self.tokens(unit.jobs[0].doc_block + self.separator)  # one block per unit
            for n, job in enumerate(unit.jobs):
                prefix = block + self._schema_tokens(job)
                suffix = self.tokens(job.suffix)
                u = Usage(requests=1, output_tokens=self._output_tokens(job),
                          contexts_generated=len(job.chunks), input_tokens=prefix + suffix)
                caches = unit.cacheable and prefix >= floor
                if caches and rule.kind == "explicit":
                    u.input_tokens = suffix
                    if n == 0 or rule.expires:
                        u.cache_write_tokens = prefix
                    else:
                        u.cache_read_tokens = prefix
                elif caches and rule.kind == "automatic" and n > 0:
                    u.cache_read_tokens = prefix // rule.step * rule.step
                    u.input_tokens = prefix + suffix - u.cache_read_tokens
                latency = (self.assumptions.request_seconds
                           + u.output_tokens / self.assumptions.output_tokens_per_second)
                total.add(Estimate(u, latency, latency))
            if unit.cacheable and len(unit.jobs) > 1:
                total.waits += 1
        return total

    def _schema_tokens(self, job: Job) -> int:
        if job.schema is None:
            return 0
        return self.tokens(json.dumps({"type": "json_schema", "schema": job.schema}))

    def _output_tokens(self, job: Job) -> int:
        each = self.assumptions.context_tokens
        if job.schema is None:
            return min(each, job.max_tokens)
        # The JSON the schema asks for, around contexts of `each` tokens.
        shape = json.dumps({"contexts": [{"chunk": c.index, "context": ""} for c in job.chunks]})
        return min(self.tokens(shape) + each * len(job.chunks), job.max_tokens)

    def price(self, usage: Usage) -> float:
        writes_1h = usage.cache_write_tokens if self.rule.write_1h else 0
        return price(usage, self.options.info.pricing, self.discount, writes_1h)

    def seconds(self, total: Estimate, waves: int) -> float:
        """Live: the requests' latencies spread over `concurrency` workers, plus the longest one
        (the run's first request goes alone, and so does the first of each cached document); on
        a free server measured before, its measured seconds per answer. Batches: one round per
        wave of windows, two when a cached document waits for its write to be read, each taking
        `batch_round_seconds`."""
        if not total.usage.requests:
            return 0.0
        if self.batch:
            rounds = 2 if total.waits else 1
            return max(1, waves) * rounds * self.assumptions.batch_round_seconds
        if self.measured:
            return total.usage.requests * float(self.measured["seconds_per_request"])
        return total.longest_seconds + total.busy_seconds / self.concurrency
