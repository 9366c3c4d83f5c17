"""A loopback fake of Ollama's native API (`POST /api/chat`, `POST /api/show`), for situate's
Ollama provider speaking plain HTTP.

What it keeps of Ollama is what makes a context wrong without an error: a prompt longer than
`options.num_ctx` (2,048 tokens when not given) is cut silently, keeping its end, and
`prompt_eval_count` reports the tokens evaluated (the `num_ctx`'s worth when cut); `truncated`
counts the requests it cut. `/api/show` reports each model's trained context window
(`<arch>.context_length`); an unknown model is a 404 `model "x" not found`. One token per
started group of 4 characters (`chars_per_token`). Answers as the OpenAI fake's: the context of
the fenced chunk (found in what is left of the prompt), or the JSON of the `format` schema.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackServer, send_json
from tests.fakes.openai_chat_server import CHARS_PER_TOKEN, answer_for, count_tokens

DEFAULT_NUM_CTX = 2048


class FakeOllama(LoopbackServer):
    """The fake; `base_url` is what OLLAMA_HOST or --llm-base-url should say."""

    thread_name = "fake-ollama"

    def __init__(self, *, models: dict[str, int] | None = None, output_tokens: int = 40,
                 latency: float = 0.0, chars_per_token: int = CHARS_PER_TOKEN) -> None:
        self.chars_per_token = chars_per_token  # 2: a tokenizer denser than situate's estimate
        self.models = dict(models or {"llama3.2": 131_072, "qwen2.5:0.5b": 32_768})
        self.output_tokens = output_tokens
        self.latency = latency
        self.lock = threading.Lock()
        self.reset_counters()

    def reset_counters(self) -> None:
        with self.lock:
            self.responses: Counter = Counter()
            self.truncated = 0
            self.requests: list[dict[str, Any]] = []  # num_ctx, prompt tokens, evaluated

    def clear_cache(self) -> None:
        """Ollama's KV cache is not modelled: nothing to clear."""

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model")
        if model not in self.models:
            raise _Error(404, f'model "{model}" not found, try pulling it first')
        options = body.get("options") or {}
        num_ctx = int(options.get("num_ctx") or DEFAULT_NUM_CTX)
        prompt = "".join(str(m.get("content") or "") for m in body.get("messages") or [])
        cpt = self.chars_per_token
        tokens = -(-len(prompt) // cpt)
        kept = prompt
        if tokens > num_ctx:  # Ollama's silent cut: the end of the prompt is kept
            kept = prompt[-num_ctx * cpt:]
        evaluated = -(-len(kept) // cpt)
        schema = body.get("format") if isinstance(body.get("format"), dict) else None
        text = answer_for(kept[-20_000:], schema, self.output_tokens)
        limit = int(options.get("num_predict") or -1)
        reason = "stop"
        if 0 < limit < count_tokens(text):
            text, reason = text[: limit * CHARS_PER_TOKEN], "length"
        with self.lock:
            self.truncated += tokens > num_ctx
            self.requests.append({"num_ctx": num_ctx, "tokens": tokens, "evaluated": evaluated})
        return {"model": model, "created_at": datetime.now(UTC).isoformat(),
                "message": {"role": "assistant", "content": text}, "done": True,
                "done_reason": reason, "total_duration": 1_000_000, "load_duration": 1000,
                "prompt_eval_count": evaluated, "prompt_eval_duration": 500_000,
                "eval_count": count_tokens(text), "eval_duration": 400_000}

    def show(self, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model") or body.get("name")
        if model not in self.models:
            raise _Error(404, f"model '{model}' not found")
        return {"modelfile": "", "parameters": "", "template": "{{ .Prompt }}",
                "details": {"family": "llama", "parameter_size": "3.2B"},
                "model_info": {"general.architecture": "llama",
                               "llama.context_length": self.models[str(model)]}}


class _Error(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeOllama

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
            if self.path == "/api/chat":
                answer = self.fake.chat(body)
                time.sleep(self.fake.latency)
            elif self.path == "/api/show":
                answer = self.fake.show(body)
            else:
                raise _Error(404, "404 page not found")
            self._send(200, answer)
        except _Error as e:
            self._send(e.status, {"error": e.message})
        except json.JSONDecodeError:
            self._send(400, {"error": "invalid character in JSON body"})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        with self.fake.lock:
            self.fake.responses[status] += 1
        send_json(self, status, body, "application/json; charset=utf-8")


FakeOllama.handler_class = _Handler
