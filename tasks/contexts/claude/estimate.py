"""What Claude contexts would cost, worked out before a run (`situate ingest --dry-run`): the
engine's estimate (`engine.estimate.LLMCost`: the contextualizer's own planner, request by
request) with Claude's cache rule (the first request of a cacheable unit writes, the others read)
and prices (Message Batches at half price, their 1-hour writes at 2x input).

A batch mode is priced with both cache lives: 1-hour entries (what a run uses, Anthropic's advice
for batches with shared context) and 5-minute ones, which expire before the next round when a
round takes longer than 5 minutes (`Assumptions.batch_round_seconds`), so that every request of
the second round pays its document's write again.
"""

from __future__ import annotations

import logging

from situate.core.secrets import KEYS, has_key
from situate.tasks.contexts.base import ContextConfig
from situate.tasks.contexts.claude.pricing import BATCH_DISCOUNT
from situate.tasks.contexts.claude.wire import CATALOG
from situate.tasks.contexts.cost import Assumptions
from situate.tasks.contexts.engine.estimate import CacheRule, LLMCost
from situate.tasks.contexts.engine.planning import Options

log = logging.getLogger("situate.claude")

FIVE_MINUTES = 300.0
# (group, batch, batch cache ttl) -> (mode, flags)
MODES = {(False, False, ""): ("per-chunk", ""),
         (True, False, ""): ("grouped", "--group-chunks"),
         (False, True, "1h"): ("batch", "--batch"),
         (True, True, "1h"): ("grouped+batch", "--group-chunks --batch"),
         (False, True, "5m"): ("batch-5m-cache", "--batch SITUATE_BATCH_CACHE_TTL=5m"),
         (True, True, "5m"): ("grouped+batch-5m-cache",
                              "--group-chunks --batch SITUATE_BATCH_CACHE_TTL=5m")}


class ClaudeCost(LLMCost):
    """The bill of one mode (per chunk or grouped, live or Message Batches with 1-hour or
    5-minute cache entries), request by request."""

    def __init__(self, options: Options, group: bool, batch: bool, concurrency: int,
                 assumptions: Assumptions, ttl: str = "1h") -> None:
        ttl = ttl if batch else ""
        mode, flags = MODES[(group, batch, ttl)]
        rule = CacheRule("explicit", write_1h=ttl == "1h",
                         expires=ttl == "5m" and assumptions.batch_round_seconds > FIVE_MINUTES)
        super().__init__("anthropic", options, group, batch, concurrency, assumptions,
                         mode=mode, flags=flags, rule=rule,
                         discount=BATCH_DISCOUNT if batch else 1.0)


def cost_models(config: ContextConfig, assumptions: Assumptions) -> list[ClaudeCost]:
    """The configured mode first, then the others (grouped or not, live or batch, a batch's
    cache entries of 1 hour or 5 minutes)."""
    extra = dict(config.extra or {})
    options = Options.from_config(CATALOG, config.model, extra)
    if not options.priced:
        log.warning("no price known for model %s: cost shown as 0", options.model)
    if not has_key("anthropic"):
        env, block = KEYS["anthropic"]
        log.warning("planned without an API key; the run itself needs one: set %s (or store it in "
                    "a Prefect Secret block named '%s')", env, block)
    ttl = str(extra.get("batch_cache_ttl") or "1h")
    chosen = (config.group_chunks, config.batch, ttl if config.batch else "")
    order = [chosen] + [m for m in MODES if m != chosen]
    return [ClaudeCost(options, group, batch, config.concurrency, assumptions, ttl or "1h")
            for group, batch, ttl in order]
