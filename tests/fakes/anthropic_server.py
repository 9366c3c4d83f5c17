"""A loopback fake of the Anthropic Messages and Message Batches API, for tests and benchmarks.

The real `anthropic` SDK is pointed at it with `base_url`, so the wire format, headers, error
bodies and the SDK's own parsing are all exercised. It implements what makes contextualization
cheap or expensive on the real service:

- prompt caching by exact prefix (model + every block up to a `cache_control` breakpoint), with the
  model's minimum cacheable length, a TTL refreshed on read, and the rule that an entry becomes
  readable only once the response that wrote it has started: concurrent requests for one prefix
  each pay a write; entries expire after their TTL (`ttl_5m`, `ttl_1h` seconds: set them short
  to emulate a Message Batches round that outlives the 5-minute cache), and 1-hour writes are
  counted apart (`cache_creation_1h_input_tokens`, billed at 2x input);
- token counting (a deterministic ~4 characters per token, `count_tokens`), usage fields as the
  service reports them, the context window (400 "prompt is too long");
- fault injection: 429 with `retry-after`, 529 overloaded, 500, dropped connections and slow
  responses, scripted (a queue) or at random rates with a seed; 401 for a wrong key;
- Message Batches: create, retrieve (in_progress, then ended after a delay), results as JSONL at an
  absolute `results_url` (shuffled, so callers must match by custom_id), cancel, per-request
  errors; batch usage is tagged with the batch service tier (billed at 50%).

It has no notion of price: it counts tokens per service tier, like the usage console; turning
tokens into dollars is the caller's business.
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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackServer

CHARS_PER_TOKEN = 4
FAULT_KINDS = ("429", "529", "500", "drop", "slow")
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ASKED_IDS = re.compile(r"chunks ((?:\d+, )*\d+)")
# The per-chunk prompt's fenced chunk block (`<chunk-F>` ... `</chunk-F>`); the fence is found in
# no chunk text, so the first closing tag with the same fence ends the chunk.
_CHUNK_TAG = re.compile(r"<(chunk-[0-9a-f]+)>\n(.*?)\n</\1>", re.DOTALL)
_FILLER = ("situates this chunk within the overall document for search retrieval; it names the "
           "module, the surrounding definitions and the purpose of the code it belongs to. ")


def count_tokens(text: str) -> int:
    """The fake tokenizer: one token per started group of four characters."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class ModelSpec:
    """What the fake knows of a model: its cache floor, context window and output cap."""

    min_cache_tokens: int
    context_window: int = 200_000
    max_output: int = 64_000


# Prefix-matched against the requested model id, so dated ids ("...-20251001") resolve too.
DEFAULT_MODELS: dict[str, ModelSpec] = {
    "claude-haiku-4-5": ModelSpec(4096),
    "claude-3-5-haiku": ModelSpec(2048, max_output=8192),
    "claude-3-haiku": ModelSpec(2048, max_output=4096),
    "claude-sonnet-4-6": ModelSpec(2048),
    "claude-sonnet-4-5": ModelSpec(1024),
    "claude-sonnet-4": ModelSpec(1024),
    "claude-3-7-sonnet": ModelSpec(1024),
    "claude-opus-4-6": ModelSpec(4096, max_output=32_000),
    "claude-opus-4-5": ModelSpec(4096, max_output=32_000),
    "claude-opus-4": ModelSpec(1024, max_output=32_000),
}


@dataclass
class Faults:
    """Which requests fail and how.

    `script` is consumed first, one entry per request ("ok" or a kind of FAULT_KINDS); then each
    kind fires at its rate. Faults are decided on arrival, before any cache or billing effect, as a
    request the service never processed.
    """

    rate_429: float = 0.0
    rate_529: float = 0.0
    rate_500: float = 0.0
    rate_drop: float = 0.0
    rate_slow: float = 0.0
    slow_seconds: float = 1.0
    retry_after: float = 1.0
    script: deque[str] = field(default_factory=deque)
    # Only requests whose path starts with one of these get random faults (scripts apply to all).
    paths: tuple[str, ...] = ("/v1/messages",)

    @classmethod
    def mixed(cls, total_rate: float, **kwargs: Any) -> Faults:
        """Failures at `total_rate`, split evenly over 429, 529, 500 and dropped connections."""
        each = total_rate / 4
        return cls(rate_429=each, rate_529=each, rate_500=each, rate_drop=each, **kwargs)


@dataclass
class _Entry:
    ready: bool
    expires_at: float
    ttl: float


@dataclass
class CacheEvent:
    """One cache write or read, for assertions on how a client used the cache."""

    kind: str  # "write" | "read"
    key: str
    tokens: int
    model: str
    batch: bool
    at: float


@dataclass
class _Block:
    text: str
    cache_ttl: float | None  # seconds when the block carries a cache_control breakpoint
    one_hour: bool = False  # the breakpoint asks for the 1-hour cache


class ApiError(Exception):
    """An error the fake answers with its real JSON body."""

    def __init__(self, status: int, kind: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.headers = headers or {}


class FakeAnthropic(LoopbackServer):
    """The fake service: state, counters and an HTTP server on a free loopback port."""

    def __init__(self, *, api_key: str = "sk-ant-test-key", latency: float = 0.0,
                 output_tokens: int = 100, models: dict[str, ModelSpec] | None = None,
                 faults: Faults | None = None, seed: int = 0, cache_ttl_cap: float | None = None,
                 batch_delay: float = 0.2, batch_lanes: int = 4, batch_latency: float = 0.0,
                 batch_error_rate: float = 0.0, group_omit_rate: float = 0.0,
                 ttl_5m: float = 300.0, ttl_1h: float = 3600.0) -> None:
        self.api_key = api_key
        self.latency = latency
        self.output_tokens = output_tokens
        self.models = dict(DEFAULT_MODELS if models is None else models)
        self.faults = faults or Faults()
        self.cache_ttl_cap = cache_ttl_cap
        self.batch_delay = batch_delay
        self.batch_lanes = batch_lanes
        self.batch_latency = batch_latency
        self.batch_error_rate = batch_error_rate
        self.group_omit_rate = group_omit_rate
        self.ttl_5m = ttl_5m  # seconds a 5-minute entry lives (emulated expiry)
        self.ttl_1h = ttl_1h
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._arrived = threading.Condition(self._lock)
        # With `gather` set, each request waits (up to `gather_timeout` s) until that many are in
        # flight at once: concurrency shown by the requests themselves, not by a race with a delay.
        self.gather = 0
        self.gather_timeout = 10.0
        self._cache: dict[str, _Entry] = {}
        self._batches: dict[str, dict[str, Any]] = {}
        self.reset_counters()

    # --- lifecycle ---------------------------------------------------------------------------


    # --- counters ----------------------------------------------------------------------------

    def reset_counters(self) -> None:
        """Forget counters and logs (not the prompt cache nor batches): one run's view."""
        with self._lock:
            self.http_requests = Counter()  # by path kind
            self.responses = Counter()  # by status code, "drop" for dropped connections
            self.messages_ok = 0
            self.messages_log: list[dict[str, Any]] = []
            self.cache_log: list[CacheEvent] = []
            self.usage: dict[str, Counter] = {"standard": Counter(), "batch": Counter()}
            self.batches_created = 0
            self.max_in_flight = 0
            self._in_flight = 0

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def writes(self) -> list[CacheEvent]:
        return [e for e in self.cache_log if e.kind == "write"]

    def reads(self) -> list[CacheEvent]:
        return [e for e in self.cache_log if e.kind == "read"]

    def duplicate_writes(self) -> int:
        """Writes of a prefix that had already been written (in this log): money wasted."""
        seen = Counter(e.key for e in self.writes())
        return sum(n - 1 for n in seen.values())

    # --- the model ---------------------------------------------------------------------------

    def spec(self, model: str) -> ModelSpec:
        for prefix in sorted(self.models, key=len, reverse=True):
            if model.startswith(prefix):
                return self.models[prefix]
        raise ApiError(404, "not_found_error", f"model: {model}")

    def _pick_fault(self, path: str) -> str:
        f = self.faults
        with self._lock:
            if f.script:
                return f.script.popleft()
            if not path.startswith(f.paths):
                return "ok"
            r = self._rng.random()
        for kind, rate in (("429", f.rate_429), ("529", f.rate_529), ("500", f.rate_500),
                           ("drop", f.rate_drop), ("slow", f.rate_slow)):
            if r < rate:
                return kind
            r -= rate
        return "ok"

    def process_message(self, params: dict[str, Any], *, batch: bool
                        ) -> tuple[dict[str, Any], list[str]]:
        """Run one Messages request: validate, apply the cache, generate; no sleeping.

        Returns the response body and the cache keys this request wrote, which become readable
        only when the caller calls `publish(keys)`, i.e. when the response starts.
        """
        model = params.get("model")
        if not isinstance(model, str) or not model:
            raise ApiError(400, "invalid_request_error", "model: Field required")
        spec = self.spec(model)
        max_tokens = params.get("max_tokens")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ApiError(400, "invalid_request_error", "max_tokens: must be a positive integer")
        if max_tokens > spec.max_output:
            raise ApiError(400, "invalid_request_error",
                           f"max_tokens: {max_tokens} > {spec.max_output}, which is the maximum "
                           f"allowed number of output tokens for {model}")
        blocks = _flatten(params, self.ttl_5m, self.ttl_1h)
        breakpoints = [i for i, b in enumerate(blocks) if b.cache_ttl is not None]
        if len(breakpoints) > 4:
            raise ApiError(400, "invalid_request_error",
                           "A maximum of 4 blocks with cache_control may be provided.")
        tokens = [count_tokens(b.text) for b in blocks]
        total = sum(tokens)
        if total > spec.context_window:
            raise ApiError(400, "invalid_request_error",
                           f"prompt is too long: {total} tokens > {spec.context_window} maximum")
        prefix_tokens = [sum(tokens[: i + 1]) for i in range(len(blocks))]
        keys = {i: _prefix_key(model, blocks[: i + 1]) for i in breakpoints}
        now = time.monotonic()
        read_at: int | None = None
        written: list[str] = []
        with self._lock:
            for i in reversed(breakpoints):
                entry = self._cache.get(keys[i])
                if entry and entry.ready and entry.expires_at > now:
                    entry.expires_at = now + entry.ttl
                    read_at = i
                    break
            read_tokens = prefix_tokens[read_at] if read_at is not None else 0
            last_write: int | None = None
            for i in breakpoints:
                if read_at is not None and i <= read_at:
                    continue
                if prefix_tokens[i] < spec.min_cache_tokens:
                    continue
                ttl = blocks[i].cache_ttl or self.ttl_5m
                if self.cache_ttl_cap is not None:
                    ttl = min(ttl, self.cache_ttl_cap)
                entry = self._cache.get(keys[i])
                if not (entry and entry.ready and entry.expires_at > now):
                    self._cache[keys[i]] = _Entry(ready=False, expires_at=now + ttl, ttl=ttl)
                written.append(keys[i])
                last_write = i
            creation = prefix_tokens[last_write] - read_tokens if last_write is not None else 0
            if read_at is not None:
                self.cache_log.append(
                    CacheEvent("read", keys[read_at], read_tokens, model, batch, now))
            if last_write is not None:
                self.cache_log.append(
                    CacheEvent("write", keys[last_write], creation, model, batch, now))
        text = self._generate(params, blocks)
        stop_reason = "end_turn"
        if count_tokens(text) > max_tokens:
            text, stop_reason = text[: max_tokens * CHARS_PER_TOKEN], "max_tokens"
        one_hour = last_write is not None and blocks[last_write].one_hour
        usage = {
            "input_tokens": total - read_tokens - creation,
            "output_tokens": count_tokens(text),
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": 0 if one_hour else creation,
                               "ephemeral_1h_input_tokens": creation if one_hour else 0},
            "service_tier": "batch" if batch else "standard",
        }
        counted = {k: v for k, v in usage.items() if isinstance(v, int)}
        counted["cache_creation_1h_input_tokens"] = creation if one_hour else 0
        with self._lock:
            self.messages_ok += 1
            self.usage["batch" if batch else "standard"].update(
                counted | {"requests": 1})
            self.messages_log.append({"model": model, "batch": batch, "usage": usage,
                                      "blocks": [b.text for b in blocks]})
        body = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        return body, written

    def publish(self, keys: Iterable[str]) -> None:
        """The writing response has started: its cache entries become readable."""
        now = time.monotonic()
        with self._lock:
            for key in keys:
                entry = self._cache.get(key)
                if entry is not None and not entry.ready:
                    entry.ready = True
                    entry.expires_at = now + entry.ttl

    def _generate(self, params: dict[str, Any], blocks: list[_Block]) -> str:
        """A deterministic context of `output_tokens` tokens that names what it situates."""
        fmt = (params.get("output_config") or {}).get("format") or {}
        last = blocks[-1].text if blocks else ""
        if fmt.get("type") == "json_schema":
            asked = _ASKED_IDS.search(last)
            ids = [int(x) for x in re.findall(r"\d+", asked.group(1))] if asked else []
            return json.dumps(self._from_schema(fmt.get("schema") or {}, None, ids))
        m = _CHUNK_TAG.search(last)
        digest = hashlib.sha256((m.group(2) if m else last).encode()).hexdigest()[:12]
        return self._context(f"[ctx {digest}] ")

    def _context(self, head: str) -> str:
        size = self.output_tokens * CHARS_PER_TOKEN
        body = head + _FILLER * (size // len(_FILLER) + 1)
        # Exactly `output_tokens` tokens, so both modes of a benchmark produce equal lengths.
        return body[: size - 1] + "." if size > len(head) else head[:size]

    def _from_schema(self, schema: dict[str, Any], label: Any, asked: list[int]) -> Any:
        """A value of `schema`, as a model that follows it and its prompt would write.

        An array of objects keyed by an integer property gets one item per key: the property's
        enum when it has one, else the ids the prompt asks for ("For each of the chunks 3, 4").
        """
        kind = schema.get("type")
        if "enum" in schema:
            return schema["enum"][0]
        if kind == "object":
            return {name: self._from_schema(sub, label, asked)
                    for name, sub in (schema.get("properties") or {}).items()}
        if kind == "array":
            items = schema.get("items") or {}
            props = items.get("properties") or {}
            key = next((n for n, s in props.items() if s.get("type") == "integer"), None)
            if key is None:
                return [self._from_schema(items, label, asked)]
            out = []
            for value in props[key].get("enum", asked):
                with self._lock:
                    omitted = self._rng.random() < self.group_omit_rate
                if omitted:
                    continue
                out.append({n: (value if n == key else self._from_schema(s, value, asked))
                            for n, s in props.items()})
            return out
        if kind == "string":
            return self._context(f"[ctx chunk {label}] ")
        if kind == "integer":
            return 0
        if kind == "boolean":
            return True
        return None

    # --- batches -----------------------------------------------------------------------------

    def create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            raise ApiError(400, "invalid_request_error", "requests: must be a non-empty list")
        ids = [r.get("custom_id") for r in requests]
        bad = next((i for i in ids if not isinstance(i, str) or not _CUSTOM_ID.match(i)), None)
        if bad is not None or len(set(ids)) != len(ids):
            raise ApiError(400, "invalid_request_error",
                           f"requests: custom_id must be unique and match {_CUSTOM_ID.pattern}")
        now = datetime.now(UTC)
        batch = {
            "id": f"msgbatch_{uuid.uuid4().hex[:24]}",
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0,
                               "canceled": 0, "expired": 0},
            "created_at": now.isoformat(),
            "expires_at": (now + timedelta(hours=24)).isoformat(),
            "ended_at": None,
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": None,
        }
        with self._lock:
            self._batches[batch["id"]] = {"object": batch, "requests": requests, "results": {},
                                          "cancel": False}
            self.batches_created += 1
        threading.Thread(target=self._run_batch, args=(batch["id"],), daemon=True).start()
        return dict(batch)

    def _run_batch(self, batch_id: str) -> None:
        time.sleep(self.batch_delay)
        state = self._batches[batch_id]

        def one(request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            if state["cancel"]:
                return request["custom_id"], {"type": "canceled"}
            with self._lock:
                failed = self._rng.random() < self.batch_error_rate
            if failed:
                return request["custom_id"], _errored("overloaded_error", "Overloaded")
            try:
                body, written = self.process_message(request.get("params") or {}, batch=True)
            except ApiError as e:
                return request["custom_id"], _errored(e.kind, e.message)
            time.sleep(self.batch_latency)
            self.publish(written)
            return request["custom_id"], {"type": "succeeded", "message": body}

        # In submission order, `batch_lanes` at a time: the service's cache is best effort.
        with ThreadPoolExecutor(self.batch_lanes) as pool:
            results = dict(pool.map(one, state["requests"]))
        counts = Counter(r["type"] for r in results.values())
        with self._lock:
            state["results"] = results
            obj = state["object"]
            obj["request_counts"] = {"processing": 0, "succeeded": counts["succeeded"],
                                     "errored": counts["errored"], "canceled": counts["canceled"],
                                     "expired": counts["expired"]}
            obj["processing_status"] = "ended"
            obj["ended_at"] = datetime.now(UTC).isoformat()
            obj["results_url"] = f"{self.base_url}/v1/messages/batches/{batch_id}/results"

    def batch(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            state = self._batches.get(batch_id)
            if state is None:
                raise ApiError(404, "not_found_error", f"message batch {batch_id} not found")
            return dict(state["object"])

    def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            state = self._batches.get(batch_id)
            if state is None:
                raise ApiError(404, "not_found_error", f"message batch {batch_id} not found")
            if state["object"]["processing_status"] == "in_progress":
                state["cancel"] = True
                state["object"]["processing_status"] = "canceling"
                state["object"]["cancel_initiated_at"] = datetime.now(UTC).isoformat()
            return dict(state["object"])

    def batch_results(self, batch_id: str) -> bytes:
        with self._lock:
            state = self._batches.get(batch_id)
            if state is None:
                raise ApiError(404, "not_found_error", f"message batch {batch_id} not found")
            if state["object"]["processing_status"] != "ended":
                raise ApiError(400, "invalid_request_error", "batch is still processing")
            lines = [json.dumps({"custom_id": cid, "result": result})
                     for cid, result in state["results"].items()]
            self._rng.shuffle(lines)
        return ("\n".join(lines) + "\n").encode()


def _errored(kind: str, message: str) -> dict[str, Any]:
    return {"type": "errored",
            "error": {"type": "error", "error": {"type": kind, "message": message}}}


def _flatten(params: dict[str, Any], ttl_5m: float = 300.0, ttl_1h: float = 3600.0
             ) -> list[_Block]:
    """The request as an ordered list of text blocks: schema, system, then messages."""
    blocks: list[_Block] = []
    fmt = (params.get("output_config") or {}).get("format")
    if fmt:
        # The service turns a JSON schema into a system prompt: part of the prefix, billed.
        blocks.append(_Block(json.dumps(fmt, sort_keys=True), None))
    system = params.get("system")
    for content in ([system] if system else []) + [m.get("content") for m in
                                                   params.get("messages") or []]:
        if isinstance(content, str):
            blocks.append(_Block(content, None))
            continue
        for block in content or []:
            if block.get("type") != "text":
                raise ApiError(400, "invalid_request_error", "only text blocks are supported here")
            cc = block.get("cache_control")
            ttl = None
            if cc:
                ttl = ttl_1h if cc.get("ttl") == "1h" else ttl_5m
            blocks.append(_Block(block.get("text", ""), ttl, bool(cc) and cc.get("ttl") == "1h"))
    if not params.get("messages"):
        raise ApiError(400, "invalid_request_error", "messages: at least one message is required")
    top = params.get("cache_control")
    if top and blocks and blocks[-1].cache_ttl is None:
        blocks[-1].cache_ttl = ttl_1h if top.get("ttl") == "1h" else ttl_5m
        blocks[-1].one_hour = top.get("ttl") == "1h"
    return blocks


def _prefix_key(model: str, blocks: list[_Block]) -> str:
    h = hashlib.sha256(model.encode())
    for b in blocks:
        h.update(b"\x00" + b.text.encode())
    return h.hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms delayed ACK
    fake: FakeAnthropic

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Silence the per-request stderr line."""

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")

    def _serve(self, method: str) -> None:
        fake = self.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        with fake._lock:
            fake.http_requests[f"{method} {_route(path)}"] += 1
            fake._in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake._in_flight)
            fake._arrived.notify_all()
            if fake.gather:
                fake._arrived.wait_for(lambda: fake._in_flight >= fake.gather, fake.gather_timeout)
        try:
            self._dispatch(method, path, raw)
        finally:
            with fake._lock:
                fake._in_flight -= 1

    def _dispatch(self, method: str, path: str, raw: bytes) -> None:
        fake = self.fake
        try:
            if not self._authorized():
                raise ApiError(401, "authentication_error", "invalid x-api-key")
            fault = fake._pick_fault(path)
            if fault == "drop":
                with fake._lock:
                    fake.responses["drop"] += 1
                self.close_connection = True
                return
            if fault == "slow":
                time.sleep(fake.faults.slow_seconds)
            elif fault != "ok":
                raise _fault_error(fault, fake.faults.retry_after)
            body = json.loads(raw or b"{}") if method == "POST" else {}
            if method == "POST" and path == "/v1/messages":
                response, written = fake.process_message(body, batch=False)
                time.sleep(fake.latency)
                fake.publish(written)  # the response starts now
                self._send(200, response)
            elif method == "POST" and path == "/v1/messages/batches":
                time.sleep(fake.latency)
                self._send(200, fake.create_batch(body))
            elif method == "GET" and (m := re.fullmatch(r"/v1/messages/batches/([\w-]+)", path)):
                self._send(200, fake.batch(m.group(1)))
            elif method == "GET" and (
                    m := re.fullmatch(r"/v1/messages/batches/([\w-]+)/results", path)):
                self._send_bytes(200, fake.batch_results(m.group(1)), "application/x-jsonl")
            elif method == "POST" and (
                    m := re.fullmatch(r"/v1/messages/batches/([\w-]+)/cancel", path)):
                self._send(200, fake.cancel_batch(m.group(1)))
            else:
                raise ApiError(404, "not_found_error", f"{method} {path} not found")
        except ApiError as e:
            self._send(e.status, {"type": "error", "error": {"type": e.kind, "message": e.message},
                                  "request_id": _request_id()}, e.headers)
        except json.JSONDecodeError:
            self._send(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": "body is not valid JSON"}})

    def _authorized(self) -> bool:
        auth = self.headers.get("authorization") or ""
        key = auth[7:] if auth.lower().startswith("bearer ") else self.headers.get("x-api-key")
        return key == self.fake.api_key

    def _send(self, status: int, body: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(body).encode(), "application/json", headers)

    def _send_bytes(self, status: int, data: bytes, content_type: str,
                    headers: dict[str, str] | None = None) -> None:
        with self.fake._lock:
            self.fake.responses[status] += 1
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", _request_id())
        self.send_header("anthropic-ratelimit-requests-limit", "4000")
        self.send_header("anthropic-ratelimit-requests-remaining", "3999")
        self.send_header("anthropic-ratelimit-input-tokens-limit", "4000000")
        self.send_header("anthropic-ratelimit-input-tokens-remaining", "3990000")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _route(path: str) -> str:
    """Collapse ids so counters group by endpoint."""
    return re.sub(r"msgbatch_[\w]+", "{id}", path)


def _request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


def _fault_error(kind: str, retry_after: float) -> ApiError:
    if kind == "429":
        return ApiError(429, "rate_limit_error",
                        "Number of request tokens has exceeded your per-minute rate limit",
                        {"retry-after": f"{retry_after:g}",
                         "anthropic-ratelimit-requests-remaining": "0"})
    if kind == "529":
        return ApiError(529, "overloaded_error", "Overloaded")
    return ApiError(500, "api_error", "Internal server error")


FakeAnthropic.handler_class = _Handler
FakeAnthropic.thread_name = "fake-anthropic"
