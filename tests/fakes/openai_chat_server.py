"""A loopback fake of OpenAI's chat completions (`POST /v1/chat/completions`) with automatic
prompt caching as OpenAI documents it, for the real `openai` SDK pointed at it with `base_url`.

- The prompt is the JSON schema of `response_format` (services make it a system prompt) and the
  messages' contents, in order; one token per started group of 4 characters.
- Prefix caching: prompts of 1,024 tokens and more are cached in 128-token steps (1,024, 1,152,
  ...), per model and routing key (`prompt_cache_key`, else one shared route). A request reads the
  longest cached step of its prompt (`usage.prompt_tokens_details.cached_tokens`); the steps it
  did not read it writes, readable only once its response has started (`latency` holds the
  response back): requests sent together each write, and `duplicate_writes` counts the requests
  that wrote a step another request was still writing (each `Call` says from which step).
  Writing costs nothing extra, as on OpenAI. Entries live `ttl` seconds after their last use.
- Faults: a script of "429" (with `retry-after`), "500", "drop" (connection closed without an
  answer) or "ok", one per request; a wrong key is a 401 `invalid_api_key`; an unknown model a
  404 `model_not_found`; a prompt over the model's context window a 400 `context_length_exceeded`.
- Answers: a context naming the chunk it situates (`[ctx <sha256 of the chunk text>]`), exactly
  `output_tokens` tokens (cut at `max_tokens`: `finish_reason` "length"); with a JSON schema, the
  JSON it asks for (one entry per chunk id asked), some entries dropped at `group_omit_rate`.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackServer

CHARS_PER_TOKEN = 4
CACHE_MIN = 1024
CACHE_STEP = 128
_CHUNK_TAG = re.compile(r"<(chunk-[0-9a-f]+)>\n(.*?)\n</\1>", re.DOTALL)
_ASKED_IDS = re.compile(r"chunks ((?:\d+, )*\d+)")
_FILLER = ("situates this chunk within the overall document for search retrieval; it names the "
           "module, the surrounding definitions and the purpose of the code it belongs to. ")


def count_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def context_text(head: str, tokens: int) -> str:
    """A context of exactly `tokens` fake tokens starting with `head`."""
    size = tokens * CHARS_PER_TOKEN
    body = head + _FILLER * (size // len(_FILLER) + 1)
    return body[: size - 1] + "." if size > len(head) else head[:size]


def answer_for(prompt_tail: str, schema: dict[str, Any] | None, tokens: int,
               omit: Any = lambda: False) -> str:
    """What a model that follows situate's prompts answers: the context of the fenced chunk, or
    for a group the JSON of `schema` with one entry per chunk id asked (`omit()` drops one)."""
    if schema is None:
        m = _CHUNK_TAG.search(prompt_tail)
        digest = hashlib.sha256((m.group(2) if m else prompt_tail).encode()).hexdigest()[:12]
        return context_text(f"[ctx {digest}] ", tokens)
    asked = _ASKED_IDS.search(prompt_tail)
    ids = [int(x) for x in re.findall(r"\d+", asked.group(1))] if asked else []
    item = (((schema.get("properties") or {}).get("contexts") or {}).get("items") or {})
    chunk = (item.get("properties") or {}).get("chunk") or {}
    return json.dumps({"contexts": [
        {"chunk": i, "context": context_text(f"[ctx chunk {i}] ", tokens)}
        for i in chunk.get("enum", ids) if not omit()]})


@dataclass
class _Entry:
    ready: bool
    expires_at: float


@dataclass
class Call:
    """One answered request, for assertions on how a client used the cache."""

    route: str
    prompt_tokens: int
    cached_tokens: int
    wrote: bool
    duplicate: int  # the first step (in tokens) this request wrote while another was writing it
    prompt: str = field(repr=False)


class FakeOpenAIChat(LoopbackServer):
    """The fake service; `base_url + "/v1"` is the SDK's base URL."""

    thread_name = "fake-openai-chat"

    def __init__(self, *, api_key: str | None = "sk-test-openai-chat", latency: float = 0.0,
                 output_tokens: int = 50, models: dict[str, int] | None = None,
                 ttl: float = 600.0, group_omit_rate: float = 0.0, seed: int = 0,
                 retry_after: float = 0.2) -> None:
        self.api_key = api_key  # None: any key or none (a self-hosted server)
        self.latency = latency
        self.output_tokens = output_tokens
        self.models = dict(models or {"gpt-4.1-mini": 1_047_576, "gpt-4o-mini": 128_000,
                                      "local-model": 32_768})
        self.ttl = ttl
        self.group_omit_rate = group_omit_rate
        self.retry_after = retry_after
        self.script: deque[str] = deque()
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._cache: dict[str, _Entry] = {}
        self.reset_counters()

    def reset_counters(self) -> None:
        with self._lock:
            self.responses: Counter = Counter()
            self.usage: Counter = Counter()
            self.calls: list[Call] = []
            self.bodies: list[dict[str, Any]] = []
            self.max_in_flight = 0
            self._in_flight = 0

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def duplicate_writes(self, within: int | None = None) -> int:
        """Requests that wrote a step another request was still writing (money wasted on a
        service that bills writes, time on one that does not); with `within`, only steps of at
        most that many tokens (a document's prefix: two chunks that begin alike share more)."""
        return sum(1 for c in self.calls
                   if c.duplicate and (within is None or c.duplicate <= within))

    # --- one completion -------------------------------------------------------------------------

    def complete(self, body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Validate, apply the cache, answer; returns the body and the keys to publish when the
        response starts."""
        model = body.get("model")
        if model not in self.models:
            raise ApiError(404, f"The model `{model}` does not exist or you do not have access "
                                "to it.", "invalid_request_error", "model_not_found")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty array", "invalid_request_error")
        fmt = body.get("response_format") or {}
        schema = None
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema")
        prompt = (json.dumps(fmt, sort_keys=True) if schema is not None else "") + "".join(
            str(m.get("content") or "") for m in messages)
        tokens = count_tokens(prompt)
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 4096)
        if tokens + max_tokens > self.models[model]:
            raise ApiError(400, f"This model's maximum context length is {self.models[model]} "
                                f"tokens. However, your messages resulted in {tokens} tokens.",
                           "invalid_request_error", "context_length_exceeded")
        route = f"{model}\x00{body.get('prompt_cache_key') or ''}"
        keys = _step_keys(route, prompt, tokens)
        now = time.monotonic()
        cached = 0
        written: list[str] = []
        duplicate = 0
        with self._lock:
            for step, key in reversed(keys):
                entry = self._cache.get(key)
                if entry and entry.ready and entry.expires_at > now:
                    cached = step
                    break
            for step, key in keys:
                if step <= cached:
                    entry = self._cache.get(key)
                    if entry:
                        entry.expires_at = now + self.ttl
                    continue
                entry = self._cache.get(key)
                if entry and not entry.ready and entry.expires_at > now:
                    duplicate = duplicate or step
                elif not (entry and entry.ready and entry.expires_at > now):
                    self._cache[key] = _Entry(False, now + self.ttl)
                    written.append(key)
        with self._lock:
            omit = lambda: self._rng.random() < self.group_omit_rate  # noqa: E731
            text = answer_for(prompt[-20_000:], schema, self.output_tokens, omit)
        finish = "stop"
        if count_tokens(text) > max_tokens:
            text, finish = text[: max_tokens * CHARS_PER_TOKEN], "length"
        usage = {"prompt_tokens": tokens, "completion_tokens": count_tokens(text),
                 "total_tokens": tokens + count_tokens(text),
                 "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        with self._lock:
            self.usage.update({"requests": 1, "prompt_tokens": tokens, "cached_tokens": cached,
                               "completion_tokens": usage["completion_tokens"]})
            self.calls.append(Call(str(body.get("prompt_cache_key") or ""), tokens, cached,
                                   bool(written or duplicate), duplicate, prompt))
            self.bodies.append(body)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": usage,
        }, written

    def publish(self, keys: list[str]) -> None:
        now = time.monotonic()
        with self._lock:
            for key in keys:
                entry = self._cache.get(key)
                if entry is not None:
                    entry.ready = True
                    entry.expires_at = now + self.ttl


def _step_keys(route: str, prompt: str, tokens: int) -> list[tuple[int, str]]:
    """(tokens, key) of every cacheable step of `prompt`: 1,024 tokens, then every 128."""
    h = hashlib.sha256(route.encode() + b"\x00")
    out: list[tuple[int, str]] = []
    done = 0
    step = CACHE_MIN
    while step <= tokens:
        end = step * CHARS_PER_TOKEN
        h.update(prompt[done:end].encode())
        done = end
        out.append((step, h.copy().hexdigest()))
        step += CACHE_STEP
    return out


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code
        self.headers = headers or {}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    fake: FakeOpenAIChat

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        fake = self.fake
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        with fake._lock:
            fake._in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake._in_flight)
        try:
            self._serve(raw)
        finally:
            with fake._lock:
                fake._in_flight -= 1

    def _serve(self, raw: bytes) -> None:
        fake = self.fake
        try:
            if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
                raise ApiError(404, f"Invalid URL (POST {self.path})", "invalid_request_error")
            auth = self.headers.get("authorization", "")
            if fake.api_key is not None and auth != f"Bearer {fake.api_key}":
                raise ApiError(401, "Incorrect API key provided.", "invalid_request_error",
                               "invalid_api_key")
            with fake._lock:
                fault = fake.script.popleft() if fake.script else "ok"
            if fault == "drop":
                with fake._lock:
                    fake.responses["drop"] += 1
                self.close_connection = True
                return
            if fault == "429":
                raise ApiError(429, "Rate limit reached for requests", "requests",
                               "rate_limit_exceeded", {"retry-after": f"{fake.retry_after:g}"})
            if fault == "500":
                raise ApiError(500, "The server had an error while processing your request.",
                               "server_error")
            body = json.loads(raw or b"{}")
            response, written = fake.complete(body)
            time.sleep(fake.latency)
            fake.publish(written)  # the response starts now
            self._send(200, response)
        except ApiError as e:
            self._send(e.status, {"error": {"message": e.message, "type": e.kind, "param": None,
                                            "code": e.code}}, e.headers)
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "We could not parse the JSON body of your "
                                                  "request.", "type": "invalid_request_error",
                                       "param": None, "code": None}})

    def _send(self, status: int, body: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        with self.fake._lock:
            self.fake.responses[status] += 1
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:16]}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


FakeOpenAIChat.handler_class = _Handler
