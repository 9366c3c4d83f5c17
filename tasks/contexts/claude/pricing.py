"""What a Claude model costs and can hold: published prices, minimum cacheable prompt lengths,
context windows and output caps per model family, the dollar bill of a usage, and the token
estimate that steers scheduling (billing always uses the usage the service reports)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from situate.core.records import Usage


@dataclass(frozen=True)
class Pricing:
    """Dollars per million tokens. Cache writes are 5-minute writes (the only TTL used here)."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float = 0.0


BATCH_DISCOUNT = 0.5  # Message Batches bill every token class at half price.


@dataclass(frozen=True)
class ModelInfo:
    """What scheduling and billing need to know of a model family."""

    family: str
    pricing: Pricing
    min_cache_tokens: int
    context_window: int = 200_000
    max_output: int = 64_000


# Anthropic's published prices and minimum cacheable prompt lengths (per family), prefix-matched
# against the model id so dated ids ("claude-3-haiku-20240307") resolve.
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
    for prefix in sorted(MODELS, key=len, reverse=True):
        if model.startswith(prefix):
            return MODELS[prefix]
    return None


def price(usage: Usage, pricing: Pricing, batch: bool = False) -> float:
    """Dollars for the tokens of `usage` (5-minute cache writes), at batch rates if `batch`."""
    dollars = (usage.input_tokens * pricing.input + usage.output_tokens * pricing.output
               + usage.cache_creation_input_tokens * pricing.cache_write
               + usage.cache_read_input_tokens * pricing.cache_read) / 1e6
    return dollars * (BATCH_DISCOUNT if batch else 1.0)


def cache_hit_ratio(usage: Usage) -> float:
    """Share of input tokens read from the prompt cache (0 when nothing was sent)."""
    return usage.prompt_cache_hit_ratio


# Characters per token of the cost estimate (`--dry-run`): Anthropic's rule of thumb for English
# ("a token approximately represents 3.5 English characters"). Code runs denser, about 3. Claude's
# tokenizer is not available offline, so a plan's tokens are this ratio's, not the bill's.
CHARS_PER_TOKEN = 3.5


def expected_tokens(text: str, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """The tokens `text` is expected to bill, for pricing a run before it is made: ASCII at
    `chars_per_token` characters per token, anything else at one token per character (as in
    `estimate_tokens`). Unlike `estimate_tokens` a central estimate, not a high one."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / chars_per_token) + (len(text) - ascii_chars)


def estimate_tokens(text: str) -> int:
    """A deliberately high token estimate, for decisions only (billing uses reported usage).

    ASCII at 3 characters per token (code tokenizes denser than prose's ~4), anything else at one
    token per character. Too high only costs a serialized first request on a document that turns
    out uncacheable; too low would skip the cache or overflow the context window.
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 3) + (len(text) - ascii_chars)
