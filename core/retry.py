"""The one retry policy for every call across the wire (Claude, Cohere, Milvus): tenacity with
exponential backoff and jitter, the server's retry-after when it gives one, and a stop event that
ends every wait at once when a run is stopped."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry: `max_attempts` in all, waits doubling from `base`
    seconds up to `cap` (or the server's retry-after, capped), with jitter."""

    max_attempts: int = 6
    base: float = 1.0
    cap: float = 60.0

    def wait(self, attempt: int, error: BaseException | None) -> float:
        after = retry_after(error)
        if after is not None:
            return min(after, self.cap) + random.uniform(0, self.base / 10)
        step = min(self.cap, self.base * 2.0 ** (attempt - 1))
        return float(step / 2 + random.uniform(0, step / 2))

    def retrying(self, retryable: Callable[[BaseException], bool], *,
                 log: logging.Logger | None = None, what: str = "call",
                 reason: Callable[[BaseException | None], str] | None = None,
                 on_retry: Callable[[BaseException | None, float], None] | None = None,
                 stop: threading.Event | None = None) -> Retrying:
        """A tenacity `Retrying` for this policy.

        `retryable` says which errors are worth another attempt (others raise at once); `on_retry`
        hears of each retry before its wait (to pause other workers on a 429); waits end early
        when `stop` is set. The last error is re-raised as it was.
        """
        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            if on_retry is not None:
                on_retry(error, wait)
            if log is not None:
                text = reason(error) if reason else type(error).__name__
                log.info("%s: %s; attempt %d of %d, retrying in %.2fs", what, text,
                         state.attempt_number, self.max_attempts, wait)

        return Retrying(
            stop=stop_after_attempt(max(1, self.max_attempts)),
            wait=lambda state: self.wait(state.attempt_number,
                                         state.outcome.exception() if state.outcome else None),
            retry=retry_if_exception(retryable), reraise=True, before_sleep=before_sleep,
            sleep=_waiting_on(stop) if stop is not None else _sleep)


def _sleep(seconds: float) -> None:
    threading.Event().wait(seconds)


def _waiting_on(stop: threading.Event) -> Callable[[float], None]:
    """A sleep that ends at once when `stop` is set."""
    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    return sleep


def retry_after(error: BaseException | None) -> float | None:
    """Seconds the server asked to wait (`retry-after-ms` or `retry-after`), from an SDK error's
    response headers (anthropic) or its own headers (cohere); None when it gave none."""
    if error is None:
        return None
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or getattr(error, "headers", None) or {}
    try:
        lowered = {str(k).lower(): v for k, v in headers.items()}
    except AttributeError:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = lowered.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None
