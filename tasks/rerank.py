"""Reranking retrieved hits with Cohere's rerank API (`--rerank cohere[:MODEL]`).

A cross-encoder reads the query and each candidate together, so it orders a hybrid search's top
candidates better than either embedding or BM25 scores can. One request carries every candidate
of a query: Cohere bills a search unit per query (per 100 documents), not per document.

tenacity is the one retry layer: the SDK's own retries are turned off on every call, so the
attempt budget, the backoff and the `retry-after` rule are ours and the request count is known.
The API key lives in the cached client only and is redacted from every message.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import cohere
import httpx
from cohere.core.api_error import ApiError
from cohere.core.parse_error import ParsingError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from tasks.errors import InputError, ProviderError
from tasks.records import Hit

log = logging.getLogger("situate.rerank")
T = TypeVar("T")

DEFAULT_MODELS = {"cohere": "rerank-v3.5"}  # the known reranker names and their default models
_RETRY_STATUS = (408, 409, 429)  # and every 5xx
_HINTS = {
    401: "set a valid COHERE_API_KEY",
    498: "set a valid COHERE_API_KEY",
    403: "the key may not use model {model}",
    404: "check the model name {model!r} and COHERE_BASE_URL",
}
_clients: dict[tuple[str, str | None], cohere.ClientV2] = {}
_clients_lock = threading.Lock()


class Reranker:
    """Cohere v2 rerank with one retry policy; safe to share between threads."""

    def __init__(self, client: cohere.ClientV2, model: str, api_key: str, *, base_url: str | None = None,
                 max_attempts: int = 6, timeout: float = 60.0, retry_base: float = 1.0,
                 retry_cap: float = 60.0) -> None:
        self.client, self.model, self._key = client, model, api_key
        self.base_url = base_url or "https://api.cohere.com"
        self.max_attempts, self.timeout = max(1, max_attempts), timeout
        self.retry_base, self.retry_cap = retry_base, retry_cap

    def __repr__(self) -> str:  # never the key
        return f"Reranker(model={self.model!r})"

    def rerank(self, query: str, hits: Sequence[Hit], top_n: int) -> list[Hit]:
        """The `top_n` most relevant hits, best first, each scored by Cohere's relevance (0..1).

        The document sent for a hit is its context and its text, as they were indexed, so the
        reranker judges what the search matched. Hits beyond `top_n` are dropped.
        """
        if top_n < 1:
            raise InputError(f"rerank top_n must be at least 1, got {top_n}")
        if not hits:
            return []
        documents = [f"{h.context}\n\n{h.text}" if h.context else h.text for h in hits]
        n = min(top_n, len(hits))
        response = self._call(lambda: self.client.rerank(
            model=self.model, query=query, documents=documents, top_n=n,
            request_options={"max_retries": 0, "timeout": self.timeout}))
        results = getattr(response, "results", None)
        if not isinstance(results, list):
            raise ProviderError(f"Cohere rerank answered without results (model {self.model}); retry later")
        ranked: list[tuple[float, int]] = []
        seen: set[int] = set()
        for r in results:
            index, score = getattr(r, "index", None), getattr(r, "relevance_score", None)
            if not (isinstance(index, int) and 0 <= index < len(hits)) or index in seen:
                raise ProviderError(f"Cohere rerank answered an invalid or repeated index {index!r} "
                                    f"for {len(hits)} documents (model {self.model}); retry later")
            if not isinstance(score, int | float) or not math.isfinite(score):
                raise ProviderError(f"Cohere rerank answered a non-numeric score {score!r} "
                                    f"(model {self.model}); retry later")
            seen.add(index)
            ranked.append((float(score), index))
        ranked.sort(key=lambda pair: -pair[0])  # stable: the service's order among equal scores
        return [replace(hits[i], score=s) for s, i in ranked[:n]]

    def _call(self, fn: Callable[[], T]) -> T:
        """`fn()` under the retry policy; every failure leaves as one redacted ProviderError."""
        retrying = Retrying(stop=stop_after_attempt(self.max_attempts), wait=self._wait,
                            retry=retry_if_exception(_retryable), reraise=True,
                            before_sleep=self._before_sleep)
        try:
            return retrying(fn)
        except ApiError as e:
            status = e.status_code or 0
            if _retryable(e):
                text = (f"Cohere rerank kept failing after {self.max_attempts} attempts "
                        f"({_describe(e)}); retry later")
            elif status < 400:
                text = f"Cohere rerank answered something unreadable ({_describe(e)}); retry later"
            else:
                hint = _HINTS.get(status, "the request was refused as invalid").format(model=self.model)
                text = f"Cohere rerank refused the request ({_describe(e)}): {hint}"
        except ParsingError as e:
            text = f"Cohere rerank answered something unreadable ({e.status_code}); retry later"
        except httpx.TransportError as e:
            attempts = f"{self.max_attempts} attempts" if _retryable(e) else "1 attempt"
            text = (f"could not reach Cohere at {self.base_url} after {attempts} ({type(e).__name__}); "
                    "check COHERE_BASE_URL and the network")
        raise ProviderError(text.replace(self._key, "***") if self._key else text) from None

    def _wait(self, state: RetryCallState) -> float:
        """The server's `retry-after` when it gives one, else exponential backoff with jitter."""
        exc = state.outcome.exception() if state.outcome else None
        after = _retry_after(exc)
        if after is not None:
            return min(after, self.retry_cap) + random.uniform(0, self.retry_base / 10)
        step = min(self.retry_cap, self.retry_base * 2 ** (state.attempt_number - 1))
        return step / 2 + random.uniform(0, step / 2)

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.info("Cohere rerank %s; attempt %d of %d, retrying in %.2fs", _describe(exc),
                 state.attempt_number, self.max_attempts, wait)


def _retryable(e: BaseException) -> bool:
    """429, 408/409, 5xx, timeouts and dropped or refused connections; never other 4xx."""
    if isinstance(e, ApiError):
        status = e.status_code or 0
        return status in _RETRY_STATUS or status >= 500
    return isinstance(e, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


def _retry_after(e: BaseException | None) -> float | None:
    headers = {k.lower(): v for k, v in ((getattr(e, "headers", None) or {}).items())}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers[name]) * scale)
        except (KeyError, ValueError):
            continue
    return None


def _describe(e: BaseException | None) -> str:
    """'<status>: <message>' from the SDK's error (Cohere bodies are {"message": ...})."""
    if isinstance(e, ApiError):
        body = e.body
        message = body.get("message", "") if isinstance(body, dict) else str(body or "")
        return f"{e.status_code}" + (f": {' '.join(str(message).split())[:300]}" if message else "")
    return type(e).__name__ if e is not None else "error"


def get_reranker(spec: str = "cohere", *, max_attempts: int = 6, timeout: float = 60.0,
                 retry_base: float = 1.0) -> Reranker:
    """The reranker named by `spec` ("cohere" or "cohere:MODEL"), on the process's shared client.

    The key comes from COHERE_API_KEY and the endpoint from COHERE_BASE_URL (a loopback fake in
    tests); clients are cached per (key, endpoint) so connections are reused across queries.
    """
    name, _, model = spec.strip().partition(":")
    if name.lower() not in DEFAULT_MODELS:
        known = ", ".join(sorted(DEFAULT_MODELS))
        raise InputError(f"unknown reranker {name!r} in {spec!r}: known rerankers are {known}")
    key = os.environ.get("COHERE_API_KEY", "").strip()
    if not key:
        raise ProviderError("reranker 'cohere' needs an API key: set COHERE_API_KEY")
    base_url = os.environ.get("COHERE_BASE_URL", "").strip() or None
    with _clients_lock:
        client = _clients.get((key, base_url))
        if client is None:
            client = _clients[(key, base_url)] = cohere.ClientV2(api_key=key, base_url=base_url,
                                                                 max_retries=0)
    return Reranker(client, model.strip() or DEFAULT_MODELS[name.lower()], key, base_url=base_url,
                    max_attempts=max_attempts, timeout=timeout, retry_base=retry_base)
