"""What a Claude model costs and can hold: published prices (5-minute and 1-hour cache writes),
minimum cacheable prompt lengths, context windows and output caps per model family. The shapes,
the bill of a usage and the token estimates are the engine's (`engine.models`)."""

from __future__ import annotations

from situate.core.records import Usage
from situate.tasks.contexts.engine.models import (
    CHARS_PER_TOKEN,
    ModelInfo,
    Pricing,
    estimate_tokens,
    expected_tokens,
    lookup,
)
from situate.tasks.contexts.engine.models import price as _price

__all__ = ["BATCH_DISCOUNT", "CHARS_PER_TOKEN", "MODELS", "UNKNOWN_MODEL", "ModelInfo", "Pricing",
           "cache_hit_ratio", "estimate_tokens", "expected_tokens", "model_info", "price"]

BATCH_DISCOUNT = 0.5  # Message Batches bill every token class at half price.

# Anthropic's published prices (input, output, 5-minute write at 1.25x input, read at 0.1x,
# 1-hour write at 2x) and minimum cacheable prompt lengths (per family), prefix-matched against
# the model id so dated ids ("claude-3-haiku-20240307") resolve.
MODELS: dict[str, ModelInfo] = {
    "claude-haiku-4-5": ModelInfo("Haiku 4.5", Pricing(1.0, 5.0, 1.25, 0.10, 2.0), 4096),
    "claude-3-5-haiku": ModelInfo("Haiku 3.5", Pricing(0.80, 4.0, 1.0, 0.08, 1.6), 2048,
                                  max_output=8192),
    "claude-3-haiku": ModelInfo("Haiku 3", Pricing(0.25, 1.25, 0.30, 0.03, 0.50), 2048,
                                max_output=4096),
    "claude-sonnet-4-6": ModelInfo("Sonnet 4.6", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 2048),
    "claude-sonnet-4-5": ModelInfo("Sonnet 4.5", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 1024),
    "claude-sonnet-4": ModelInfo("Sonnet 4", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 1024),
    "claude-3-7-sonnet": ModelInfo("Sonnet 3.7", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 1024),
    "claude-opus-4-6": ModelInfo("Opus 4.6", Pricing(5.0, 25.0, 6.25, 0.50, 10.0), 4096,
                                 max_output=32_000),
    "claude-opus-4-5": ModelInfo("Opus 4.5", Pricing(5.0, 25.0, 6.25, 0.50, 10.0), 4096,
                                 max_output=32_000),
    "claude-opus-4-1": ModelInfo("Opus 4.1", Pricing(15.0, 75.0, 18.75, 1.50, 30.0), 1024,
                                 max_output=32_000),
    "claude-opus-4": ModelInfo("Opus 4", Pricing(15.0, 75.0, 18.75, 1.50, 30.0), 1024,
                               max_output=32_000),
}
# An unknown model: no price (cost 0, said in the notes), the lowest floor (marking a block that
# turns out too short costs nothing), a conservative output cap.
UNKNOWN_MODEL = ModelInfo("unknown", Pricing(0.0, 0.0, 0.0, 0.0, 0.0), 1024, max_output=4096)


def model_info(model: str) -> ModelInfo | None:
    """The facts of `model`, by the longest known prefix; None when the family is unknown."""
    return lookup(MODELS, model)


def price(usage: Usage, pricing: Pricing, batch: bool = False, write_1h_tokens: int = 0) -> float:
    """Dollars for the tokens of `usage` at batch rates if `batch`; `write_1h_tokens` of its
    cache writes are 1-hour writes (2x input), the rest 5-minute ones (1.25x)."""
    return _price(usage, pricing, BATCH_DISCOUNT if batch else 1.0, write_1h_tokens)


def cache_hit_ratio(usage: Usage) -> float:
    """Share of input tokens read from the prompt cache (0 when nothing was sent)."""
    return usage.prompt_cache_hit_ratio
