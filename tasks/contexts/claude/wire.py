"""Claude on the wire: the Messages request of a job (the document block marked with
`cache_control`, 5-minute or 1-hour), the reading of a Message (usage with its cache writes and
reads, priced live or at batch rates), the SDK's errors in words a user can act on, and the
client that carries the SDK (the batches use it too)."""

from __future__ import annotations

import time
from typing import Any

import anthropic

from situate.core.records import Usage
from situate.core.retry import RetryPolicy
from situate.core.secrets import KEYS
from situate.tasks.contexts.claude.pricing import MODELS, UNKNOWN_MODEL, price
from situate.tasks.contexts.engine.client import LLMClient, Reply, Wire
from situate.tasks.contexts.engine.models import Pricing
from situate.tasks.contexts.engine.planning import Catalog, Job

DEFAULT_MODEL = "claude-haiku-4-5"
CATALOG = Catalog("anthropic", DEFAULT_MODEL, MODELS, UNKNOWN_MODEL)


def params(job: Job, model: str, cache: bool, ttl: str = "5m") -> dict[str, Any]:
    """The Messages request of `job`: the document block first (with `cache_control` when the
    unit caches: a 1-hour entry when `ttl` is "1h", for Message Batches that outlive 5 minutes),
    then the rest; a JSON schema as structured output for a group."""
    doc_block: dict[str, Any] = {"type": "text", "text": job.doc_block}
    if cache:
        doc_block["cache_control"] = ({"type": "ephemeral", "ttl": "1h"} if ttl == "1h"
                                      else {"type": "ephemeral"})
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": job.max_tokens,
        "messages": [{"role": "user", "content": [doc_block, {"type": "text", "text": job.suffix}]}],
    }
    if job.schema is not None:
        body["output_config"] = {"format": {"type": "json_schema", "schema": job.schema}}
    return body


def reply_of(message: Any, pricing: Pricing, batch: bool, seconds: float = 0.0) -> Reply:
    """A Message read: its text, its usage priced (1-hour writes at their own rate)."""
    u = message.usage
    usage = Usage(requests=1, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                  cache_write_tokens=u.cache_creation_input_tokens or 0,
                  cache_read_tokens=u.cache_read_input_tokens or 0)
    creation = getattr(u, "cache_creation", None)
    write_1h = int(getattr(creation, "ephemeral_1h_input_tokens", 0) or 0)
    usage.cost_usd = price(usage, pricing, batch, write_1h)
    text = "".join(getattr(b, "text", "") or "" for b in message.content)
    return Reply(text, usage, cut=message.stop_reason == "max_tokens",
                 cache_used=bool(usage.cache_write_tokens
                                 or usage.cache_read_tokens),
                 seconds=seconds, raw=message)


class ClaudeWire(Wire):
    """The anthropic SDK's Messages API, its errors and its usage."""

    label = "Anthropic"
    key_hint = (f"set a valid ANTHROPIC_API_KEY or Prefect Secret block "
                f"'{KEYS['anthropic'][1]}'")
    url_hint = "ANTHROPIC_BASE_URL and the network"

    def __init__(self, sdk: anthropic.Anthropic, model: str, pricing: Pricing) -> None:
        self.sdk = sdk
        self.model = model
        self.pricing = pricing
        self.base_url = str(sdk.base_url)

    def send(self, job: Job, cache: bool) -> Reply:
        body = params(job, self.model, cache)
        start = time.monotonic()
        message = self.sdk.messages.create(**body)
        return reply_of(message, self.pricing, batch=False, seconds=time.monotonic() - start)

    def retryable(self, e: BaseException) -> bool:
        return retryable(e)

    def rate_limited(self, e: BaseException | None) -> bool:
        return isinstance(e, anthropic.RateLimitError)

    def unreachable(self, e: BaseException) -> bool:
        return isinstance(e, anthropic.APIConnectionError)

    def status(self, e: BaseException) -> int | None:
        return e.status_code if isinstance(e, anthropic.APIStatusError) else None

    def reason(self, e: BaseException | None) -> str:
        return reason(e)

    def explain(self, status: int, detail: str, what: str, model: str) -> str | None:
        if status == 401:
            return f"Anthropic rejected the API key ({detail}): {self.key_hint}"
        if status == 403:
            return (f"Anthropic refused access for {what} ({detail}): the key's workspace may not "
                    f"use {model}")
        if status == 404:
            return (f"Anthropic could not find what {what} asked for ({detail}): check the model "
                    f"name {model!r} and ANTHROPIC_BASE_URL")
        return None

    def close(self) -> None:
        self.sdk.close()


class ClaudeClient(LLMClient):
    """The engine's client with the anthropic SDK at hand (`sdk`), for Message Batches."""

    def __init__(self, key: str, model: str, *, base_url: str | None, timeout: float,
                 concurrency: int, policy: RetryPolicy, pricing: Pricing) -> None:
        self.sdk = anthropic.Anthropic(
            api_key=key,
            base_url=base_url,  # None: the SDK reads ANTHROPIC_BASE_URL
            max_retries=0,  # the retry policy is the one retry layer
            timeout=timeout,
        )
        super().__init__(ClaudeWire(self.sdk, model, pricing), model, concurrency=concurrency,
                         policy=policy, key=key, prefix="claude")


def retryable(e: BaseException) -> bool:
    """429, 5xx (529 overloaded included), 408/409 and dropped connections; never 400/401/403."""
    if isinstance(e, anthropic.APIConnectionError):
        return True
    if isinstance(e, anthropic.APIStatusError):
        return e.status_code in (408, 409, 429) or e.status_code >= 500
    return False


def reason(e: BaseException | None) -> str:
    """'<status> <error type>: <message>' from an SDK error, or its class name."""
    if isinstance(e, anthropic.APIStatusError):
        body = e.body if isinstance(e.body, dict) else {}
        found = body.get("error")
        error = found if isinstance(found, dict) else {}
        kind = error.get("type", "error")
        message = str(error.get("message", "")).strip()
        return f"{e.status_code} {kind}" + (f": {message}" if message else "")
    return type(e).__name__ if e is not None else "error"
