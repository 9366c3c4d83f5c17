"""situate's flows: the Prefect flows that wire tasks and storage together, their deployments, and
the CLI on top. Importing it lets API keys come from Prefect Secret blocks too."""

from __future__ import annotations

from typing import Any

from situate.core.errors import InputError
from situate.core.secrets import set_block_loader, set_secret_loader


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


def read_block(name: str, secrets: bool = True) -> dict[str, Any]:
    """The fields of Prefect block `name` (TYPE/NAME, or NAME of a Secret block), secrets in the
    clear, read as a document from the Prefect API: no block class is imported, so prefect-aws'
    `AwsCredentials` and its peers are read without their packages. A Secret block's value is
    its fields when it holds JSON (an object), else `{"secret": value}`. InputError, one line,
    when there is no such block or no Prefect API to ask."""
    import json

    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL

    kind, _, document = name.rpartition("/")
    kind = kind or "secret"
    where = PREFECT_API_URL.value() or "the temporary Prefect server (PREFECT_HOME's database)"
    try:
        with get_client(sync_client=True) as client:
            block = client.read_block_document_by_name(document, kind, include_secrets=secrets)
    except ObjectNotFound:
        raise InputError(f"--credentials-block {name}: no {kind} block named {document!r} in "
                         f"{where}: create it (`prefect block create {kind}`, or the block "
                         "class's .save) or check the name (`prefect block ls`)") from None
    except Exception as e:  # noqa: BLE001 - an API that cannot be reached, a refused request
        raise InputError(f"--credentials-block {name}: cannot be read from {where} "
                         f"({type(e).__name__}); check PREFECT_API_URL") from None
    data: dict[str, Any] = dict(block.data or {})
    if kind != "secret":
        return data
    value = data.get("value")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {"secret": value}
    return dict(value) if isinstance(value, dict) else {"secret": str(value)}


set_secret_loader(_prefect_secret)
set_block_loader(read_block)
