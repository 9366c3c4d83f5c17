"""What a run would cost, before it is made (`situate ingest --dry-run`): the assumptions an
estimate rests on, the estimate of situating some chunks, and each provider's cost model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from situate.core.records import Chunk, Document, Usage
from situate.core.registry import Registry
from situate.tasks.contexts.base import (
    CONTEXTUALIZERS,
    ContextConfig,
    Contextualizer,
    get_contextualizer,
    resolved,
)


@dataclass(frozen=True)
class Assumptions:
    """What a cost estimate cannot know, assumed. The service's tokenizer: `chars_per_token` (None:
    the provider's own figure). The length of a context: `context_tokens` (the contextual-retrieval
    guide's contexts run 50-100 tokens; capped by the request's `max_tokens`). The time of one
    live request: `request_seconds` plus its output at `output_tokens_per_second`. The time of one
    round of Message Batches: `batch_round_seconds` (most end within the hour; 24 h at most)."""

    chars_per_token: float | None = None
    context_tokens: int = 100
    request_seconds: float = 0.5
    output_tokens_per_second: float = 100.0
    batch_round_seconds: float = 3600.0


@dataclass
class Estimate:
    """The expected bill of situating some chunks: `usage` as the service would report it
    (requests, tokens; `cost_usd` priced by the cost model), and what the time estimate needs."""

    usage: Usage = field(default_factory=Usage)
    busy_seconds: float = 0.0  # the requests' expected latencies, summed
    longest_seconds: float = 0.0  # the longest one
    waits: int = 0  # units whose first request must end before the others are sent

    def add(self, other: Estimate) -> None:
        self.usage.add(other.usage)
        self.busy_seconds += other.busy_seconds
        self.longest_seconds = max(self.longest_seconds, other.longest_seconds)
        self.waits += other.waits


class CostModel:
    """The cost side of a contextualizer in one mode: its name and cache identity (which stored
    rows and cached contexts a run would reuse, exactly as the contextualizer's own) and the
    bill of situating chunks, worked out without a key, a client or a request.

    This base is a free provider's: no request, no token, no time."""

    mode = "free"
    flags = ""  # the command-line flags that select this mode
    batch = False
    chars_per_token: float | None = None  # the tokenizer assumed; None: no tokens to count

    def __init__(self, contextualizer: Contextualizer) -> None:
        self.name = contextualizer.name
        self.generates = contextualizer.generates
        self._identity = contextualizer.cache_identity()

    def cache_identity(self) -> dict[str, str | int] | None:
        return self._identity

    def estimate(self, doc: Document, chunks: Sequence[Chunk]) -> Estimate:
        return Estimate(Usage(contexts_generated=len(chunks) if self.generates else 0))

    def price(self, usage: Usage) -> float:
        return 0.0

    def seconds(self, total: Estimate, waves: int) -> float:
        """Expected time of the context requests; `waves` is how many rounds of Message Batches
        windows run one after the other."""
        return 0.0


# Paid providers' cost models, imported on demand like the providers: name -> (config,
# assumptions) -> [the configured mode, then the other modes].
COST_MODELS: Registry[Callable[[ContextConfig, Assumptions], list[CostModel]]] = Registry(
    "context provider")
COST_MODELS.register("anthropic", "situate.tasks.contexts.claude:cost_models")
COST_MODELS.register("openai", "situate.tasks.contexts.openai_chat:cost_models")
COST_MODELS.register("ollama", "situate.tasks.contexts.ollama:cost_models")


def get_cost_models(config: ContextConfig, assumptions: Assumptions) -> list[CostModel]:
    """The cost models of `config`'s provider: its configured mode first, then the others it
    offers (a free provider has one). An InputError lists the known names."""
    config = resolved(config)
    CONTEXTUALIZERS.check(config.name)
    if config.name in COST_MODELS:
        return COST_MODELS.get(config.name)(config, assumptions)
    return [CostModel(get_contextualizer(config))]
