"""The Cohere reranker (`cohere[:MODEL]` in `situate.tasks.rerankers.base.RERANKERS`): Cohere's v2 rerank
API through the cohere SDK.

A cross-encoder reads the query and each candidate together, so it orders a hybrid search's top
candidates better than either embedding or BM25 scores can. One request carries every candidate
of a query: Cohere bills a search unit per query (per 100 documents), not per document.

situate's one retry policy (`situate.core.retry`, tenacity) is the only retry layer: the SDK's own
retries are turned off on every call, so the attempt budget, the backoff and the `retry-after`
rule are ours and the request count is known. The key comes from `situate.core.secrets` and is
redacted from every message.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import cohere
import httpx
from cohere.core.api_error import ApiError
from cohere.core.parse_error import ParsingError

from situate.core.errors import InputError, ProviderError
from situate.core.records import Hit
from situate.core.retry import RetryPolicy
from situate.core.secrets import api_key, redact
from situate.tasks.rerankers.base import Reranker

log = logging.getLogger("situate.rerank")
T = TypeVar("T")

DEFAULT_MODEL = "rerank-v3.5"
_RETRY_STATUS = (408, 409, 429)  # and every 5xx
_HINTS = {
    401: "set a valid COHERE_API_KEY",
    498: "set a valid COHERE_API_KEY",
    403: "the key may not use model {model}",
    404: "check the model name {model!r} and COHERE_BASE_URL",
}


class CohereReranker(Reranker):
    """Cohere v2 rerank with situate's retry policy; safe to share between threads."""

    name = "cohere"

    def __init__(self, client: cohere.ClientV2, model: str, api_key: str, *, base_url: str | None = None,
                 max_attempts: int = 6, timeout: float = 60.0, retry_base: float = 1.0,
                 retry_cap: float = 60.0) -> None:
        self.client, self.model, self._key = client, model, api_key
        self.base_url = base_url or "https://api.cohere.com"
        self.max_attempts, self.timeout = max(1, max_attempts), timeout
        self.policy = RetryPolicy(self.max_attempts, retry_base, retry_cap)

    def __repr__(self) -> str:  # never the key
        return f"CohereReranker(model={self.model!r})"

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
        retrying = self.policy.retrying(_retryable, log=log, what="Cohere rerank",
                                        reason=_reason)
        try:
            return retrying(fn)
        except ApiError as e:
            status = e.status_code or 0
            if _retryable(e):
                text = (f"Cohere rerank kept failing after {self.max_attempts} attempts "
                        f"({_reason(e)}); retry later")
            elif status < 400:
                text = f"Cohere rerank answered something unreadable ({_reason(e)}); retry later"
            else:
                hint = _HINTS.get(status, "the request was refused as invalid").format(model=self.model)
                text = f"Cohere rerank refused the request ({_reason(e)}): {hint}"
        except ParsingError as e:
            text = f"Cohere rerank answered something unreadable ({e.status_code}); retry later"
        except httpx.TransportError as e:
            attempts = f"{self.max_attempts} attempts" if _retryable(e) else "1 attempt"
            text = (f"could not reach Cohere at {self.base_url} after {attempts} ({type(e).__name__}); "
                    "check COHERE_BASE_URL and the network")
        raise ProviderError(redact(text, self._key)) from None


def _retryable(e: BaseException) -> bool:
    """429, 408/409, 5xx, timeouts and dropped or refused connections; never other 4xx."""
    if isinstance(e, ApiError):
        status = e.status_code or 0
        return status in _RETRY_STATUS or status >= 500
    return isinstance(e, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


def _reason(e: BaseException | None) -> str:
    """'<status>: <message>' from the SDK's error (Cohere bodies are {"message": ...})."""
    if isinstance(e, ApiError):
        body = e.body
        message = body.get("message", "") if isinstance(body, dict) else str(body or "")
        return f"{e.status_code}" + (f": {' '.join(str(message).split())[:300]}" if message else "")
    return type(e).__name__ if e is not None else "error"


def from_spec(model: str = "", *, max_attempts: int = 6, timeout: float = 60.0,
              retry_base: float = 1.0) -> CohereReranker:
    """The Cohere reranker for `model` (default rerank-v3.5), with a client of its own (its
    connections are reused across the queries it reranks).

    The key comes from COHERE_API_KEY (or a Prefect Secret block) and the endpoint from
    COHERE_BASE_URL (a loopback fake in tests).
    """
    key = api_key("cohere", user="reranker 'cohere'")
    base_url = os.environ.get("COHERE_BASE_URL", "").strip() or None
    client = cohere.ClientV2(api_key=key, base_url=base_url, max_retries=0)
    return CohereReranker(client, model.strip() or DEFAULT_MODEL, key, base_url=base_url,
                          max_attempts=max_attempts, timeout=timeout, retry_base=retry_base)
