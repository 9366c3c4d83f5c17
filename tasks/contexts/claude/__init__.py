"""Claude as a context provider (`--context anthropic`): the public names of the package, so that
callers and the registry ("situate.tasks.contexts.claude:from_config") need not know its modules.

`contextualizer` puts the pieces together; `prompts`, `pricing`, `planning`, `client`, `answers`
and `batches` each hold one responsibility (see their opening lines); `estimate` prices a run
before it is made (`situate ingest --dry-run`).
"""

from __future__ import annotations

from situate.tasks.contexts.claude.contextualizer import AnthropicContextualizer, from_config
from situate.tasks.contexts.claude.estimate import cost_models
from situate.tasks.contexts.claude.planning import DEFAULT_MODEL
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
from situate.tasks.contexts.claude.prompts import (
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
