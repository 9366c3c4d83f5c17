"""An LLM provider's configuration as every command builds it (`situate ingest --context`, the
plan and dry run, `situate synth --generator`): one builder, so that a setting reaches both."""

from __future__ import annotations

from situate.core.settings import get_settings
from situate.tasks.contexts.base import ContextConfig, split_context


def provider_config(spec: str, model: str, *, concurrency: int, state_dir: str,
                    base_url: str | None, group_chunks: bool = False,
                    batch: bool = False) -> ContextConfig:
    """`spec` is `name` or `name:model`; without a model after the colon, `model` (a `--model`
    flag, which names a Claude model by default) serves Claude, and any provider it does not
    name Claude for. The server's address and the LLM settings (prices, context window, the
    batch cache's life) are the provider's extras."""
    name, named = split_context(spec)
    if not named and (name == "anthropic" or not model.startswith("claude")):
        named = model
    settings = get_settings()
    extra: dict[str, object] = {"base_url": base_url or "",
                                "batch_cache_ttl": settings.batch_cache_ttl}
    for key in ("price_input", "price_cached_input", "price_output", "context_window"):
        value = getattr(settings, f"llm_{key}")
        if value is not None and not (name == "anthropic" and key == "context_window"):
            extra[key] = value
    return ContextConfig(name=name, model=named, concurrency=concurrency,
                         group_chunks=group_chunks, batch=batch, state_dir=state_dir, extra=extra)
