"""API keys: the one place they are resolved (environment, else a Prefect Secret block) and the
one function that keeps them out of every message, log line, artifact and cache."""

from __future__ import annotations

import os
from collections.abc import Callable

from situate.core.errors import ProviderError

# provider -> (environment variable, Prefect Secret block name)
KEYS: dict[str, tuple[str, str]] = {
    "anthropic": ("ANTHROPIC_API_KEY", "anthropic-api-key"),
    "cohere": ("COHERE_API_KEY", "cohere-api-key"),
    "voyage": ("VOYAGE_API_KEY", "voyage-api-key"),
    "openai": ("OPENAI_API_KEY", "openai-api-key"),
}
# Other variables whose values are secrets (never printed).
SECRET_VARIABLES = ("SITUATE_MILVUS_TOKEN", "SITUATE_API_TOKEN")

# Looks up a Prefect Secret block by name; registered by the flows layer (the core imports no
# Prefect). None: environment variables only.
_secret_loader: Callable[[str], str | None] | None = None
_resolved: set[str] = set()


def set_secret_loader(loader: Callable[[str], str | None] | None) -> None:
    global _secret_loader
    _secret_loader = loader


def has_key(provider: str) -> bool:
    """Whether the provider's key is in the environment (decides defaults; never loads blocks,
    which would need the Prefect API)."""
    return bool(os.environ.get(KEYS[provider][0], "").strip())


def api_key(provider: str, *, required: bool = True, user: str = "") -> str:
    """The key for `provider`: its environment variable, else its Prefect Secret block.

    Raises a ProviderError naming both places when `required` and neither has one; `user` names
    what needs it ("reranker 'cohere'", "embedder 'voyage'") for that message.
    """
    env, block = KEYS[provider]
    value = os.environ.get(env, "").strip()
    if not value and _secret_loader is not None:
        try:
            value = (_secret_loader(block) or "").strip()
        except Exception:  # noqa: BLE001 - any failure means "no usable block"
            value = ""
    if value:
        _resolved.add(value)
        return value
    if required:
        raise ProviderError(f"{user or provider} needs an API key: set {env} (or store it in a "
                            f"Prefect Secret block named '{block}')")
    return ""


def redact(text: str, *secrets: str) -> str:
    """`text` with every known secret replaced by ***: the ones given, every key resolved so far,
    and the values of the key and token variables."""
    known = {*secrets, *_resolved,
             *(os.environ.get(env, "") for env, _ in KEYS.values()),
             *(os.environ.get(name, "") for name in SECRET_VARIABLES)}
    for secret in sorted((s.strip() for s in known if s and len(s.strip()) >= 4), key=len,
                         reverse=True):
        text = text.replace(secret, "***")
    return text
