"""situate's flows: the Prefect flows that wire tasks and storage together, their deployments, and
the CLI on top. Importing it lets API keys come from Prefect Secret blocks too."""

from __future__ import annotations

from typing import Any

from situate.core.secrets import set_secret_loader


def _prefect_secret(block: str) -> str | None:
    """The value of Prefect Secret block `block`, when a Prefect API is at hand (a configured
    server, or inside a flow run); never starts a server just to look."""
    from prefect.context import FlowRunContext
    from prefect.settings import PREFECT_API_URL

    if not (PREFECT_API_URL.value() or FlowRunContext.get()):
        return None
    from prefect.blocks.system import Secret

    secret: Any = Secret.load(block)  # a block, not an awaitable, in synchronous code
    value = secret.get()
    return value if isinstance(value, str) else None


set_secret_loader(_prefect_secret)
