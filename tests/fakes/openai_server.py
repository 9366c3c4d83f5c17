"""A loopback fake of OpenAI's embeddings endpoint (`POST /v1/embeddings`), for the real `openai`
SDK (through pymilvus-model's OpenAIEmbeddingFunction) pointed at it with `OPENAI_BASE_URL`.

It speaks the wire format the SDK expects: `input` a string or a list of up to 2,048 strings,
`encoding_format` "float" or "base64" (the SDK asks for base64 by default), `dimensions` for the
v3 models; the answer carries `data[].embedding` in input order, `usage.prompt_tokens`, and the
`x-ratelimit-*` headers; a missing key is a 401 `invalid_api_key`, a bad body a 400
`invalid_request_error`. Vectors are deterministic hashed bags of words (the same text, the same
vector; shared words, close vectors) computed at once, so a benchmark measures situate, not a model.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler

import numpy as np

from tests.fakes.loopback import LoopbackServer

DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
              "text-embedding-ada-002": 1536}
MAX_INPUTS = 2048
_WORD = re.compile(r"[a-z0-9]+")


def embed(text: str, dim: int) -> np.ndarray:
    """The fake's vector of `text`: words hashed into `dim` buckets, L2-normalized."""
    v = np.zeros(dim, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        v[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % dim] += 1
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        v[0] = 1.0
        return v
    return v / norm


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/embeddings"):
            return self._error(404, f"Invalid URL (POST {self.path})", "invalid_request_error")
        auth = self.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or auth[7:] != self.fake.api_key:
            return self._error(401, "Incorrect API key provided.", "invalid_request_error",
                               "invalid_api_key")
        try:
            body = json.loads(raw)
            texts = body["input"]
            model = body["model"]
        except (ValueError, KeyError, TypeError):
            return self._error(400, "We could not parse the JSON body of your request.",
                               "invalid_request_error")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return self._error(400, "'input' must be a non-empty string or a list of them",
                               "invalid_request_error")
        if len(texts) > MAX_INPUTS:
            return self._error(400, f"'input' has {len(texts)} items, more than {MAX_INPUTS}",
                               "invalid_request_error")
        if model not in DIMENSIONS:
            return self._error(404, f"The model `{model}` does not exist", "invalid_request_error",
                               "model_not_found")
        dim = int(body.get("dimensions") or DIMENSIONS[model])
        if self.fake.latency:
            time.sleep(self.fake.latency)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        tokens = 0
        for i, text in enumerate(texts):
            v = embed(text, dim)
            tokens += max(1, len(text) // 4)
            data.append({"object": "embedding", "index": i,
                         "embedding": base64.b64encode(v.tobytes()).decode() if as_base64
                         else v.tolist()})
        with self.fake.lock:
            self.fake.requests += 1
            self.fake.texts += len(texts)
        self._send(200, {"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
                   {"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999",
                    "x-ratelimit-limit-tokens": "10000000",
                    "x-ratelimit-remaining-tokens": str(10_000_000 - tokens),
                    "x-ratelimit-reset-requests": "6ms", "x-ratelimit-reset-tokens": "0s"})


class FakeOpenAI(LoopbackServer):
    """The fake; `base_url` + "/v1" is what OPENAI_BASE_URL should say. Counts requests and texts."""

    handler_class = _Handler
    thread_name = "fake-openai"

    def __init__(self, api_key: str = "sk-test-fake-openai", latency: float = 0.0) -> None:
        self.api_key = api_key
        self.latency = latency  # seconds each answer takes, to keep a run in its embedding phase
        self.lock = threading.Lock()
        self.requests = 0
        self.texts = 0
