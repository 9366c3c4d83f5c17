"""A loopback fake of Cohere's rerank endpoint (`POST /v2/rerank`), for tests and benchmarks.

The real `cohere` SDK is pointed at it with `base_url`, so the wire format, the bearer token, the
error bodies (`{"message": ...}`) and the SDK's own parsing and error classes are all exercised.

- Relevance is deterministic: the share of the query's distinct words found in the document
  (lowercased `\\w+` tokens), 0..1. Results are sorted by score, ties by index, cut to `top_n`.
- Billing as the service counts it: one search unit per query per started 100 documents, only for
  answered requests.
- Fault injection, scripted (a queue, one entry per request): "429" (with `retry-after`), "500",
  "503", "drop" (connection closed without a response), "slow" (answers after `slow_seconds`),
  "bad_index" and "dup_index" (a 200 whose results point outside or twice at a document).
- 401 `{"message": "invalid api token"}` for a wrong key; 400 for empty documents, an empty query
  or top_n < 1; 404 for an unknown model.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import uuid
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackServer

MODELS = ("rerank-v3.5", "rerank-english-v3.0", "rerank-multilingual-v3.0", "rerank-v4.0-pro")
FAULT_KINDS = ("ok", "429", "500", "503", "drop", "slow", "bad_index", "dup_index")
_WORD = re.compile(r"\w+")


def relevance(query: str, document: str) -> float:
    """Share of the query's distinct words present in the document."""
    words = set(_WORD.findall(query.lower()))
    return len(words & set(_WORD.findall(document.lower()))) / len(words) if words else 0.0


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class FakeCohere(LoopbackServer):
    """The fake service: counters, a request log and an HTTP server on a free loopback port."""

    def __init__(self, *, api_key: str = "co-test-key", retry_after: float = 1.0,
                 slow_seconds: float = 1.0, latency: float = 0.0) -> None:
        self.api_key = api_key
        self.retry_after = retry_after
        self.slow_seconds = slow_seconds
        self.latency = latency
        self.script: deque[str] = deque()
        self._lock = threading.Lock()
        self.in_flight = 0  # requests still being handled (a "slow" one outlives its client)
        self.reset()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no request is being handled, so that none is counted after a `reset()`."""
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)


    def reset(self) -> None:
        """Forget counters, the log and any scripted faults left over."""
        with self._lock:
            self.requests = 0  # every request that reached the server, faults included
            self.search_units = 0  # billed: answered requests only
            self.responses: Counter[int | str] = Counter()  # by status, "drop" for dropped
            self.log: list[dict[str, Any]] = []  # bodies of answered rerank requests
            self.script.clear()

    def fail(self, *kinds: str) -> None:
        """Script the next requests' faults, in order; later requests are answered normally."""
        unknown = set(kinds) - set(FAULT_KINDS)
        assert not unknown, f"unknown fault kinds {unknown}"
        with self._lock:
            self.script.extend(kinds)

    def _next_fault(self) -> str:
        with self._lock:
            return self.script.popleft() if self.script else "ok"

    def rerank(self, body: dict[str, Any], fault: str) -> dict[str, Any]:
        """Validate a request like the service does and answer it."""
        model, query, documents, top_n = (body.get(k) for k in ("model", "query", "documents", "top_n"))
        if not isinstance(model, str) or not model:
            raise _Refused(400, "invalid request: model must be a non-empty string")
        if model not in MODELS:
            raise _Refused(404, f"model '{model}' not found, make sure the correct model ID was used "
                                "and that you have access to the model.")
        if not isinstance(query, str) or not query.strip():
            raise _Refused(400, "invalid request: query cannot be empty")
        if not isinstance(documents, list) or not documents:
            raise _Refused(400, "invalid request: list of documents must not be empty")
        if not all(isinstance(d, str) for d in documents):
            raise _Refused(400, "invalid request: documents must be strings")
        if top_n is not None and (not isinstance(top_n, int) or top_n < 1):
            raise _Refused(400, "invalid request: top_n must be at least 1")
        scored = sorted(((relevance(query, d), i) for i, d in enumerate(documents)),
                        key=lambda pair: (-pair[0], pair[1]))[: top_n or len(documents)]
        results = [{"index": i, "relevance_score": round(s, 6)} for s, i in scored]
        if fault == "bad_index":
            results[0]["index"] = len(documents)
        elif fault == "dup_index" and len(results) > 1:
            results[1]["index"] = results[0]["index"]
        units = math.ceil(len(documents) / 100)
        with self._lock:
            self.search_units += units
            self.log.append(body)
        return {"id": str(uuid.uuid4()), "results": results,
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": units}}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    fake: FakeCohere

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Silence the per-request stderr line."""

    def do_POST(self) -> None:
        fake = self.fake
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        with fake._lock:
            fake.requests += 1
            fake.in_flight += 1
        try:
            self._handle(fake, raw)
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _handle(self, fake: FakeCohere, raw: bytes) -> None:
        try:
            if self.path.split("?", 1)[0] != "/v2/rerank":
                raise _Refused(404, f"POST {self.path} not found")
            if self.headers.get("authorization") != f"Bearer {fake.api_key}":
                raise _Refused(401, "invalid api token")
            fault = fake._next_fault()
            if fault == "drop":
                with fake._lock:
                    fake.responses["drop"] += 1
                self.close_connection = True
                return
            if fault == "429":
                raise _Refused(429, "You are using a Trial key, which is limited to 10 API calls / "
                                    "minute. Please try again later.",
                               {"retry-after": f"{fake.retry_after:g}"})
            if fault in ("500", "503"):
                raise _Refused(int(fault), "internal server error" if fault == "500"
                               else "service unavailable, please try again")
            time.sleep(fake.slow_seconds if fault == "slow" else fake.latency)
            self._send(200, fake.rerank(json.loads(raw or b"{}"), fault))
        except _Refused as e:
            self._send(e.status, {"id": str(uuid.uuid4()), "message": e.message}, e.headers)
        except json.JSONDecodeError:
            self._send(400, {"id": str(uuid.uuid4()), "message": "invalid request: body is not JSON"})

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        with self.fake._lock:
            self.fake.responses[status] += 1
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-api-warning", "fake cohere for tests")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


FakeCohere.handler_class = _Handler
FakeCohere.thread_name = "fake-cohere"
