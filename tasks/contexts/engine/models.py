"""What a model costs and can hold, for any provider: prices per million tokens by token class,
the minimum prefix a provider caches, the context window and output cap; the dollar bill of a
usage; and the token estimates that steer scheduling (billing always uses reported usage)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from situate.core.records import Usage


@dataclass(frozen=True)
class Pricing:
    """Dollars per million tokens. `cache_write` is a 5-minute write (Anthropic), `cache_write_1h`
    a 1-hour write; providers that cache for free (OpenAI) price writes at `input`. `cache_read`
    is the cached-input rate."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float = 0.0

    @classmethod
    def automatic(cls, input: float, cached: float, output: float) -> Pricing:  # noqa: A002
        """A provider whose cache writes cost nothing extra (OpenAI, local servers)."""
        return cls(input, output, input, cached, input)


FREE = Pricing(0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class ModelInfo:
    """What scheduling and billing need to know of a model (family)."""

    family: str
    pricing: Pricing
    min_cache_tokens: int
    context_window: int = 200_000
    max_output: int = 64_000


def lookup(models: dict[str, ModelInfo], model: str) -> ModelInfo | None:
    """The facts of `model` in `models`, by the longest known prefix (dated ids resolve); None
    when unknown."""
    for prefix in sorted(models, key=len, reverse=True):
        if model.startswith(prefix):
            return models[prefix]
    return None


def price(usage: Usage, pricing: Pricing, discount: float = 1.0,
          write_1h_tokens: int = 0) -> float:
    """Dollars for the tokens of `usage` times `discount` (Message Batches: 0.5); of its cache
    writes, `write_1h_tokens` are 1-hour writes and the rest 5-minute ones."""
    write_5m = usage.cache_write_tokens - write_1h_tokens
    dollars = (usage.input_tokens * pricing.input + usage.output_tokens * pricing.output
               + write_5m * pricing.cache_write + write_1h_tokens * pricing.cache_write_1h
               + usage.cache_read_tokens * pricing.cache_read) / 1e6
    return dollars * discount


# Characters per token of the cost estimate (`--dry-run`): Anthropic's rule of thumb for English
# ("a token approximately represents 3.5 English characters"), close to OpenAI's ~4. Code runs
# denser, about 3. No tokenizer is available offline, so a plan's tokens are this ratio's.
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
    out uncacheable, or a larger `num_ctx`; too low would skip the cache or overflow the context window.
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 3) + (len(text) - ascii_chars)
