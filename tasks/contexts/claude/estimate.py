"""What Claude contexts would cost, worked out before a run (`situate ingest --dry-run`): the very
requests the contextualizer would send (the same `Planner`, the same rules for the prompt cache),
their tokens estimated from characters, their bill from the published price table.

Nothing is called and no key is needed. What stays an estimate is said where it is made: the
tokenizer (`pricing.CHARS_PER_TOKEN` characters per token unless told otherwise), the length of
each context, and the latency of a request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from situate.core.records import Chunk, Document, Usage
from situate.core.secrets import KEYS, has_key
from situate.tasks.contexts.base import ContextConfig
from situate.tasks.contexts.claude.planning import Job, Options
from situate.tasks.contexts.claude.pricing import CHARS_PER_TOKEN, expected_tokens, price
from situate.tasks.contexts.cost import Assumptions, CostModel, Estimate

log = logging.getLogger("situate.claude")

MODES = {(False, False): ("per-chunk", ""), (True, False): ("grouped", "--group-chunks"),
         (False, True): ("batch", "--batch"), (True, True): ("grouped+batch",
                                                             "--group-chunks --batch")}


class ClaudeCost(CostModel):
    """The bill of one mode (per chunk or grouped, live or Message Batches), request by request.

    Per unit of requests sharing a document prefix (see `planning.Unit`): when the unit is
    cacheable and the prefix reaches the model's minimum cacheable length, the first request
    writes the cache (the prefix at the write price) and the others read it (at a tenth); else
    every request pays the whole prompt at the input price. A group request's JSON schema is
    part of its prefix (the service makes it a system prompt), counted as its JSON text. Each
    context is expected to be `context_tokens` long, capped by the request's `max_tokens`; a
    group answer adds its JSON around them.
    """

    name = "anthropic"

    def __init__(self, options: Options, group: bool, batch: bool, concurrency: int,
                 assumptions: Assumptions) -> None:
        self.options = options
        self.planner = options.planner()
        self.group = group
        self.batch = batch
        self.concurrency = max(1, concurrency)
        self.assumptions = assumptions
        self.chars_per_token = assumptions.chars_per_token or CHARS_PER_TOKEN
        self.mode, self.flags = MODES[(group, batch)]
        self.generates = True

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
        for unit in units:
            block = self.tokens(unit.jobs[0].doc_block)  # one block per unit
            for n, job in enumerate(unit.jobs):
                prefix = block + self._schema_tokens(job)
                suffix = self.tokens(job.suffix)
                u = Usage(requests=1, output_tokens=self._output_tokens(job),
                          contexts_generated=len(job.chunks))
                if unit.cacheable and prefix >= floor:
                    u.input_tokens = suffix
                    if n == 0:
                        u.cache_creation_input_tokens = prefix
                    else:
                        u.cache_read_input_tokens = prefix
                else:
                    u.input_tokens = prefix + suffix
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
        return price(usage, self.options.info.pricing, self.batch)

    def seconds(self, total: Estimate, waves: int) -> float:
        """Live: the requests' latencies spread over `concurrency` workers, plus the longest one
        (the run's first request goes alone, and so does the first of each cached document).
        Batches: one round per wave of windows, two when a cached document waits for its write
        to be read, each taking `batch_round_seconds`."""
        if not total.usage.requests:
            return 0.0
        if self.batch:
            rounds = 2 if total.waits else 1
            return max(1, waves) * rounds * self.assumptions.batch_round_seconds
        return total.longest_seconds + total.busy_seconds / self.concurrency


def cost_models(config: ContextConfig, assumptions: Assumptions) -> list[ClaudeCost]:
    """The configured mode first, then the other three (grouped or not, live or batch)."""
    options = Options.from_config(config.model, dict(config.extra or {}))
    if not options.priced:
        log.warning("no price known for model %s: cost shown as 0", options.model)
    if not has_key("anthropic"):
        env, block = KEYS["anthropic"]
        log.warning("planned without an API key; the run itself needs one: set %s (or store it in "
                    "a Prefect Secret block named '%s')", env, block)
    chosen = (config.group_chunks, config.batch)
    order = [chosen] + [m for m in MODES if m != chosen]
    return [ClaudeCost(options, group, batch, config.concurrency, assumptions)
            for group, batch in order]

