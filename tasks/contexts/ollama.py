"""Contexts from a model Ollama serves (`--context ollama[:MODEL]`), through its native API.

Ollama cuts a prompt longer than its `num_ctx` (2,048 tokens by default) without an error,
keeping its end, and its OpenAI-compatible route cannot raise `num_ctx` per request: a whole
document would be situated from its last few pages. So this provider speaks `/api/chat` (plain
HTTP), sets `options.num_ctx` from each prompt's length (a high estimate plus the answer's room,
within the model's context window), checks the `prompt_eval_count` Ollama reports against the room
it was given (a prompt that filled it was cut: asked again with a larger `num_ctx`, else an error,
never a silent cut), and situates a document longer than the context window in spans of it around
its chunks, as the Claude path does (the engine's planner). The model's own context window is read
once from `/api/show`: a model Ollama does not have is one line (`ollama pull MODEL`), and so is a
context window too small for the configured one.

Everything else (planning, the document's first request before the rest so Ollama's KV cache
reuses the document prefix, retries, the disk cache, fencing, grouped requests with Ollama's
`format` JSON schema) is the engine's. A local model costs $0; the plan is timed by the pace
measured on the last run against it (`engine.rates`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import replace
from typing import Any

import httpx

from situate.core.errors import ProviderError
from situate.core.records import Usage
from situate.tasks.contexts.base import ContextConfig
from situate.tasks.contexts.cost import Assumptions
from situate.tasks.contexts.engine.client import LLMClient, Reply, Wire
from situate.tasks.contexts.engine.contextualizer import LLMContextualizer
from situate.tasks.contexts.engine.estimate import CacheRule, LLMCost
from situate.tasks.contexts.engine.models import FREE, ModelInfo, estimate_tokens
from situate.tasks.contexts.engine.planning import Catalog, Job, Options

log = logging.getLogger("situate.ollama")

DEFAULT_URL = "http://127.0.0.1:11434"
DEFAULT_MODEL = "llama3.2"
SEPARATOR = "\n\n"
NUM_CTX_STEP = 256  # num_ctx rounded up to this, so that similar prompts share a runner
MIN_NUM_CTX = 2048
# A model Ollama serves: free, cached by prefix without a floor (the KV cache), the context window
# situate asks for unless told (SITUATE_LLM_CONTEXT_WINDOW), a modest output cap.
LOCAL_MODEL = ModelInfo("local", FREE, 0, context_window=8192, max_output=4096)
CATALOG = Catalog("ollama", DEFAULT_MODEL, {}, LOCAL_MODEL)


class OllamaError(Exception):
    """An error answer of Ollama's API: its status and its `error` text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message


def base_url_of(extra: dict[str, Any]) -> str:
    """`--llm-base-url`, else OLLAMA_HOST (which may omit the scheme), else Ollama's default."""
    url = str(extra.get("base_url") or os.environ.get("OLLAMA_HOST") or DEFAULT_URL).rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return url.replace("://0.0.0.0", "://127.0.0.1")


def num_ctx_for(prompt: str, max_tokens: int, context_window: int) -> int:
    """The `num_ctx` to ask for: the prompt's high token estimate and the answer's room, rounded
    up to a step, at least Ollama's default and at most the model's context window."""
    need = estimate_tokens(prompt) + max_tokens + 64
    return max(MIN_NUM_CTX, min(context_window, math.ceil(need / NUM_CTX_STEP) * NUM_CTX_STEP))


class OllamaWire(Wire):
    """Ollama's `/api/chat` and `/api/show` over httpx, the `num_ctx` of each request and its check."""

    label = "Ollama"
    reports_writes = False
    key_hint = "Ollama takes no key: check --llm-base-url"
    url_hint = "--llm-base-url (SITUATE_LLM_BASE_URL) or OLLAMA_HOST, and that `ollama serve` runs"

    def __init__(self, url: str, model: str, context_window: int, timeout: float) -> None:
        self.base_url = url
        self.model = model
        self.context_window = context_window
        self.http = httpx.Client(base_url=url, timeout=timeout)
        self._checked = False
        self._check_lock = threading.Lock()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(path, json=body)
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code != 200:
            message = data.get("error") if isinstance(data, dict) else None
            raise OllamaError(response.status_code, str(message or response.reason_phrase))
        return data if isinstance(data, dict) else {}

    def check_model(self) -> None:
        """Once per run: the model exists, and its context window holds the one situate will ask
        for (a model trained on less would answer from a cut prompt)."""
        with self._check_lock:
            if self._checked:
                return
            info = self._post("/api/show", {"model": self.model}).get("model_info") or {}
            trained = next((int(v) for k, v in info.items() if k.endswith(".context_length")
                            and isinstance(v, int | float)), None)
            if trained is not None and trained < self.context_window:
                raise ProviderError(
                    f"the context window of {self.model} at {self.base_url} is {trained} tokens, "
                    f"smaller than the {self.context_window} situate would use: set "
                    f"SITUATE_LLM_CONTEXT_WINDOW={trained} (longer documents are then situated "
                    "in spans of them)")
            self._checked = True

    def send(self, job: Job, cache: bool) -> Reply:
        self.check_model()
        prompt = job.doc_block + SEPARATOR + job.suffix
        num_ctx = num_ctx_for(prompt, job.max_tokens, self.context_window)
        start = time.monotonic()
        while True:
            body: dict[str, Any] = {
                "model": self.model, "stream": False,
                "messages": [{"role": "user", "content": prompt}],
                "options": {"num_ctx": num_ctx, "num_predict": job.max_tokens},
            }
            if job.schema is not None:
                body["format"] = job.schema
            data = self._post("/api/chat", body)
            evaluated = data.get("prompt_eval_count")
            # A prompt that left the answer less than its room filled `num_ctx`: it was cut.
            if evaluated is None or int(evaluated) + job.max_tokens <= num_ctx:
                break
            if num_ctx >= self.context_window:
                raise ProviderError(
                    f"Ollama cut the prompt of document {job.doc.id} to {evaluated} tokens (the "
                    f"{num_ctx}-token context window of {self.model} is full): set a larger "
                    "SITUATE_LLM_CONTEXT_WINDOW (the model's own) or use smaller chunks")
            log.info("document %s: Ollama filled a num_ctx of %d tokens; asking again with %d",
                     job.doc.id, num_ctx, min(self.context_window, num_ctx * 2))
            num_ctx = min(self.context_window, num_ctx * 2)
        text = str((data.get("message") or {}).get("content") or "")
        usage = Usage(requests=1, input_tokens=int(evaluated or 0),
                      output_tokens=int(data.get("eval_count") or 0))
        return Reply(text, usage, cut=data.get("done_reason") == "length",
                     seconds=time.monotonic() - start, raw=data)

    def retryable(self, e: BaseException) -> bool:
        if isinstance(e, httpx.TransportError):
            return True
        return isinstance(e, OllamaError) and (e.status in (408, 429) or e.status >= 500)

    def rate_limited(self, e: BaseException | None) -> bool:
        return isinstance(e, OllamaError) and e.status == 429

    def unreachable(self, e: BaseException) -> bool:
        return isinstance(e, httpx.TransportError)

    def status(self, e: BaseException) -> int | None:
        return e.status if isinstance(e, OllamaError) else None

    def reason(self, e: BaseException | None) -> str:
        if isinstance(e, OllamaError):
            return f"{e.status}: {e.message}"
        return type(e).__name__ if e is not None else "error"

    def explain(self, status: int, detail: str, what: str, model: str) -> str | None:
        if status == 404 or "not found" in detail.lower():
            return (f"Ollama at {self.base_url} does not have model {model!r} ({detail}): "
                    f"`ollama pull {model}`, or name one `ollama list` shows "
                    "(--context ollama:MODEL)")
        return None

    def close(self) -> None:
        self.http.close()


def make_options(config: ContextConfig, extra: dict[str, Any], url: str) -> Options:
    options = Options.from_config(CATALOG, config.model, extra, url)
    return replace(options, priced=True)  # a local model's bill is known: nothing


class OllamaContextualizer(LLMContextualizer):
    """Contexts from a model Ollama serves, on the shared engine."""

    name = "ollama"
    measures_rate = True

    def make_options(self, config: ContextConfig, extra: dict[str, Any]) -> Options:
        self.url = base_url_of(extra)
        return make_options(config, extra, self.url)

    def connect(self, config: ContextConfig, extra: dict[str, Any],
                api_key: str | None) -> LLMClient:
        wire = OllamaWire(self.url, self.model, self.info.context_window,
                          float(extra.get("timeout_seconds", 600.0)))
        return LLMClient(wire, self.model, concurrency=config.concurrency, policy=self.policy,
                         prefix="ollama")


def from_config(config: ContextConfig) -> OllamaContextualizer:
    """The registry's entry point for `--context ollama[:MODEL]`."""
    return OllamaContextualizer(config)


MODES = {False: ("per-chunk", ""), True: ("grouped", "--group-chunks")}


def cost_models(config: ContextConfig, assumptions: Assumptions) -> list[LLMCost]:
    """Per chunk and grouped (the configured first): every token paid at $0; the time from the
    pace measured on the last run against this server and model, else from assumptions."""
    extra = dict(config.extra or {})
    options = make_options(config, extra, base_url_of(extra))
    order = [config.group_chunks, not config.group_chunks]
    return [LLMCost("ollama", options, group, False, config.concurrency, assumptions,
                    mode=MODES[group][0], flags=MODES[group][1], rule=CacheRule("none"),
                    state_dir=config.state_dir, separator=SEPARATOR)
            for group in order]
