"""Claude as a context provider (`--context anthropic`): the public names of the package, so that
callers and the registry ("situate.tasks.contexts.claude:from_config") need not know its modules.

What is Claude's: `wire` (the Messages request with `cache_control`, the usage, the errors),
`pricing` (the price table), `batches` (Message Batches) and `estimate` (its cache rule and
prices for the dry run); `contextualizer` puts them on the shared engine
(`situate.tasks.contexts.engine`: prompts, planning, client, answers).
"""

from __future__ import annotations

from situate.tasks.contexts.claude.contextualizer import AnthropicContextualizer, from_config
from situate.tasks.contexts.claude.estimate import cost_models
from situate.tasks.contexts.claude.pricing import (
    BATCH_DISCOUNT,
    MODELS,
    ModelInfo,
    Pricing,
    cache_hit_ratio,
    estimate_tokens,
    model_info,
    price,
)
from situate.tasks.contexts.claude.wire import DEFAULT_MODEL
from situate.tasks.contexts.engine.prompts import (
    CHUNK_PROMPT,
    DOCUMENT_PROMPT,
    GROUP_PROMPT,
    GROUP_PROMPT_VERSION,
    PROMPT_VERSION,
    chunk_prompt,
    document_block,
    fence_of,
    group_prompt,
    group_schema,
    mark_chunks,
    parse_group_answer,
)

__all__ = [
    "BATCH_DISCOUNT", "CHUNK_PROMPT", "DEFAULT_MODEL", "DOCUMENT_PROMPT", "GROUP_PROMPT",
    "GROUP_PROMPT_VERSION", "MODELS", "PROMPT_VERSION", "AnthropicContextualizer", "ModelInfo",
    "Pricing", "cache_hit_ratio", "chunk_prompt", "cost_models", "document_block", "estimate_tokens",
    "fence_of", "from_config", "group_prompt", "group_schema", "mark_chunks", "model_info",
    "parse_group_answer", "price",
]
