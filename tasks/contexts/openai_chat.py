"""Contexts from OpenAI or any OpenAI-compatible server (`--context openai[:MODEL]`): vLLM,
llama.cpp's server, LM Studio, OpenRouter, through the official `openai` SDK.

What is OpenAI's here, and nothing else (planning, scheduling, retries, the disk cache, fencing,
grouping and spans of a long document are the engine's, as for Claude):

- the wire: one user message, the instructions and the whole document first, byte-identical for
  every chunk of that document, the chunk last. OpenAI caches prompt prefixes of 1,024 tokens and
  more by itself, in 128-token steps, readable once the response that wrote them has started; the
  engine sends a document's first request alone and the rest after it, `prompt_cache_key` (a hash
  of the document) routes them to the same cache, and `usage.prompt_tokens_details.cached_tokens`
  says what was read. vLLM's automatic prefix caching and llama.cpp's prompt cache reward the
  same layout. Grouped requests ask for JSON of a schema (`response_format` json_schema, which
  vLLM and llama.cpp serve as guided output);
- the prices: a table of known models (input, cached input, output per million tokens) and the
  `SITUATE_LLM_PRICE_*` overrides; a server on this machine or a private network costs $0, and its
  plan is timed by the pace measured on the last run against it (`engine.rates`);
- the address: `--llm-base-url` (`SITUATE_LLM_BASE_URL`), else `OPENAI_BASE_URL`, else OpenAI's;
  the key through the one resolver (`OPENAI_API_KEY` or the Prefect Secret block
  'openai-api-key'), which a self-hosted server may not need.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from situate.core.records import Usage
from situate.core.secrets import KEYS, has_key
from situate.core.secrets import api_key as resolve_key
from situate.tasks.contexts.base import ContextConfig
from situate.tasks.contexts.cost import Assumptions
from situate.tasks.contexts.engine.client import LLMClient, Reply, Wire
from situate.tasks.contexts.engine.contextualizer import LLMContextualizer
from situate.tasks.contexts.engine.estimate import CacheRule, LLMCost
from situate.tasks.contexts.engine.models import FREE, ModelInfo, Pricing, price
from situate.tasks.contexts.engine.planning import Catalog, Job, Options

log = logging.getLogger("situate.openai")

OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
CACHE_STEP = 128  # OpenAI caches prefixes in steps of 128 tokens
MIN_CACHE_TOKENS = 1024
# The separator between the document block and the chunk's question, inside the one message.
SEPARATOR = "\n\n"


def _m(family: str, input: float, cached: float, output: float,  # noqa: A002
       context_window: int, max_output: int) -> ModelInfo:
    return ModelInfo(family, Pricing.automatic(input, cached, output), MIN_CACHE_TOKENS,
                     context_window=context_window, max_output=max_output)


# OpenAI's published prices (dollars per million tokens: input, cached input, output), context
# windows and output caps, prefix-matched against the model id (dated ids resolve).
MODELS: dict[str, ModelInfo] = {
    "gpt-4.1": _m("GPT-4.1", 2.00, 0.50, 8.00, 1_047_576, 32_768),
    "gpt-4.1-mini": _m("GPT-4.1 mini", 0.40, 0.10, 1.60, 1_047_576, 32_768),
    "gpt-4.1-nano": _m("GPT-4.1 nano", 0.10, 0.025, 0.40, 1_047_576, 32_768),
    "gpt-4o": _m("GPT-4o", 2.50, 1.25, 10.00, 128_000, 16_384),
    "gpt-4o-mini": _m("GPT-4o mini", 0.15, 0.075, 0.60, 128_000, 16_384),
    "gpt-5": _m("GPT-5", 1.25, 0.125, 10.00, 400_000, 128_000),
    "gpt-5-mini": _m("GPT-5 mini", 0.25, 0.025, 2.00, 400_000, 128_000),
    "gpt-5-nano": _m("GPT-5 nano", 0.05, 0.005, 0.40, 400_000, 128_000),
}
# A model the table does not know (a self-hosted one): no price, a context window most servers hold
# (SITUATE_LLM_CONTEXT_WINDOW says the server's own), a modest output cap.
UNKNOWN_MODEL = ModelInfo("unknown", FREE, MIN_CACHE_TOKENS, context_window=8192, max_output=4096)
CATALOG = Catalog("openai", DEFAULT_MODEL, MODELS, UNKNOWN_MODEL)


def base_url_of(extra: dict[str, Any]) -> str:
    """`--llm-base-url`, else OPENAI_BASE_URL, else OpenAI's, without a trailing slash."""
    url = str(extra.get("base_url") or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)
    return url.rstrip("/")


def is_openai(url: str) -> bool:
    return urlsplit(url).hostname == "api.openai.com"


def is_local(url: str) -> bool:
    """A server on this machine or a private network (what costs nothing but time): a loopback
    or private address, localhost, a `.local` or dot-less host (a container's service name)."""
    host = urlsplit(url).hostname or ""
    if host in ("localhost",) or host.endswith((".local", ".localhost", ".internal")) \
            or "." not in host and ":" not in host:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def server_of(url: str) -> str:
    """What names the server in the cache identity: its address without credentials or query
    (a self-hosted server decides what a model name means); empty for OpenAI's own."""
    if is_openai(url):
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def overridden(pricing: Pricing, extra: dict[str, Any]) -> Pricing | None:
    """The `SITUATE_LLM_PRICE_*` overrides (input, cached input, output per million tokens) over
    `pricing`; None when none is given. A cached rate not given is the input rate."""
    given = {k: extra.get(f"price_{k}") for k in ("input", "cached_input", "output")}
    if all(v is None for v in given.values()):
        return None
    input_ = float(given["input"]) if given["input"] is not None else pricing.input
    cached = (float(given["cached_input"]) if given["cached_input"] is not None
              else pricing.cache_read if given["input"] is None else input_)
    output = float(given["output"]) if given["output"] is not None else pricing.output
    return Pricing.automatic(input_, cached, output)


def make_options(catalog: Catalog, config: ContextConfig, extra: dict[str, Any], url: str,
                 free: bool) -> Options:
    """A provider's options with the price overrides applied; a free server (`free`) is priced
    at $0 and counts as priced (its bill is known: nothing)."""
    options = Options.from_config(catalog, config.model, extra, server_of(url))
    pricing = overridden(options.info.pricing, extra)
    if pricing is not None:
        return replace(options, info=replace(options.info, pricing=pricing), priced=True)
    if free and not options.priced:
        return replace(options, info=replace(options.info, pricing=FREE), priced=True)
    return options


class OpenAIWire(Wire):
    """Chat completions through the `openai` SDK: the prefix-caching layout, usage with its
    cached tokens, and the SDK's errors in words."""

    reports_writes = False  # automatic caching reports reads only

    def __init__(self, sdk: Any, model: str, pricing: Pricing, url: str) -> None:
        import openai

        self._openai = openai
        self.sdk = sdk
        self.model = model
        self.pricing = pricing
        self.base_url = url
        self.official = is_openai(url)
        self.label = "OpenAI" if self.official else "the OpenAI-compatible server"
        self.key_hint = (f"set a valid OPENAI_API_KEY or Prefect Secret block "
                         f"'{KEYS['openai'][1]}'")
        self.url_hint = "--llm-base-url (SITUATE_LLM_BASE_URL) or OPENAI_BASE_URL"

    def body(self, job: Job) -> dict[str, Any]:
        """The request of `job`: one user message, the document block first (the cached prefix,
        byte-identical for every request of the document), the rest last."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": job.doc_block + SEPARATOR + job.suffix}],
            "prompt_cache_key": job.prefix_key,
            # OpenAI's own API takes max_completion_tokens (reasoning models refuse max_tokens);
            # servers that copy the older API read max_tokens.
            ("max_completion_tokens" if self.official else "max_tokens"): job.max_tokens,
        }
        if job.schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "contexts", "schema": job.schema, "strict": True}}
        return body

    def send(self, job: Job, cache: bool) -> Reply:
        start = time.monotonic()
        completion = self.sdk.chat.completions.create(**self.body(job))
        seconds = time.monotonic() - start
        choice = completion.choices[0] if completion.choices else None
        text = (choice.message.content or "") if choice is not None else ""
        u = completion.usage
        prompt = int(getattr(u, "prompt_tokens", 0) or 0)
        details = getattr(u, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0)
        usage = Usage(requests=1, input_tokens=prompt - cached, cache_read_tokens=cached,
                      output_tokens=int(getattr(u, "completion_tokens", 0) or 0))
        usage.cost_usd = price(usage, self.pricing)
        return Reply(text, usage, cut=choice is not None and choice.finish_reason == "length",
                     cache_used=bool(cached), seconds=seconds, raw=completion)

    def retryable(self, e: BaseException) -> bool:
        if isinstance(e, self._openai.APIConnectionError):
            return True
        if isinstance(e, self._openai.APIStatusError):
            return e.status_code in (408, 409, 429) or e.status_code >= 500
        return False

    def rate_limited(self, e: BaseException | None) -> bool:
        return isinstance(e, self._openai.RateLimitError)

    def unreachable(self, e: BaseException) -> bool:
        return isinstance(e, self._openai.APIConnectionError)

    def status(self, e: BaseException) -> int | None:
        return e.status_code if isinstance(e, self._openai.APIStatusError) else None

    def reason(self, e: BaseException | None) -> str:
        if isinstance(e, self._openai.APIStatusError):
            body = e.body if isinstance(e.body, dict) else {}
            inner = body.get("error")
            error = inner if isinstance(inner, dict) else body
            kind = error.get("code") or error.get("type") or "error"
            message = str(error.get("message", "")).strip()
            return f"{e.status_code} {kind}" + (f": {message}" if message else "")
        return type(e).__name__ if e is not None else "error"

    def explain(self, status: int, detail: str, what: str, model: str) -> str | None:
        where = f"{self.label} at {self.base_url}"
        lowered = detail.lower()
        if status == 401 and not self.official and not has_key("openai"):
            return (f"{where} asks for an API key ({detail}): set OPENAI_API_KEY or Prefect "
                    f"Secret block '{KEYS['openai'][1]}'")
        if status == 404 or (status == 400 and "model" in lowered and (
                "not found" in lowered or "does not exist" in lowered)):
            return (f"{where} does not serve model {model!r} ({detail}): name one it serves, "
                    "--context openai:MODEL")
        if status == 400 and ("context length" in lowered or "context window" in lowered
                              or "maximum context" in lowered or "too long" in lowered):
            return (f"{where} refused {what}: the prompt is longer than the model's context "
                    f"window ({detail}); set SITUATE_LLM_CONTEXT_WINDOW to the server's context "
                    "window (longer documents are then situated in spans of them)")
        if status == 400 and ("response_format" in lowered or "json_schema" in lowered):
            return (f"{where} does not take JSON-schema output ({detail}): run without "
                    "--group-chunks (one request per chunk)")
        return None

    def close(self) -> None:
        self.sdk.close()


class OpenAIContextualizer(LLMContextualizer):
    """Contexts from OpenAI or a compatible server, on the shared engine."""

    name = "openai"

    def make_options(self, config: ContextConfig, extra: dict[str, Any]) -> Options:
        self.url = base_url_of(extra)
        self.free = is_local(self.url)
        self.measures_rate = self.free
        return make_options(CATALOG, config, extra, self.url, self.free)

    def connect(self, config: ContextConfig, extra: dict[str, Any],
                api_key: str | None) -> LLMClient:
        import openai

        official = is_openai(self.url)
        key = api_key or resolve_key("openai", required=official,
                                     user="context provider 'openai'")
        sdk = openai.OpenAI(api_key=key or "no-key", base_url=self.url, max_retries=0,
                            timeout=float(extra.get("timeout_seconds", 120.0)))
        return LLMClient(OpenAIWire(sdk, self.model, self.info.pricing, self.url), self.model,
                         concurrency=config.concurrency, policy=self.policy, key=key,
                         prefix="openai")


def from_config(config: ContextConfig) -> OpenAIContextualizer:
    """The registry's entry point for `--context openai[:MODEL]`."""
    return OpenAIContextualizer(config)


MODES = {False: ("per-chunk", ""), True: ("grouped", "--group-chunks")}


def cost_models(config: ContextConfig, assumptions: Assumptions) -> list[LLMCost]:
    """Per chunk and grouped (the configured first), with OpenAI's automatic cache: every
    request of a document after its first reads the document's prefix, in 128-token steps."""
    extra = dict(config.extra or {})
    url = base_url_of(extra)
    options = make_options(CATALOG, config, extra, url, is_local(url))
    if not options.priced:
        log.warning("no price known for model %s: cost shown as 0; give it with "
                    "SITUATE_LLM_PRICE_INPUT, _CACHED_INPUT and _OUTPUT", options.model)
    if is_openai(url) and not has_key("openai"):
        log.warning("planned without an API key; the run itself needs one: set OPENAI_API_KEY "
                    "(or store it in a Prefect Secret block named '%s')", KEYS["openai"][1])
    order = [config.group_chunks, not config.group_chunks]
    return [LLMCost("openai", options, group, False, config.concurrency, assumptions,
                    mode=MODES[group][0], flags=MODES[group][1],
                    rule=CacheRule("automatic", step=CACHE_STEP), state_dir=config.state_dir,
                    separator=SEPARATOR)
            for group in order]
