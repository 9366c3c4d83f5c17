"""One run's connection to the Anthropic API: the SDK client, the bounded pool every document
shares, the cache-aware sending of a unit of requests, and every call through the shared retry
policy, with fail-fast on a refused account and errors a user can act on.

The SDK's own retries are off: `situate.core.retry.RetryPolicy` is the one retry layer. A 429 is
about the account, not the request, so it pauses every worker; the server's retry-after is
honoured; a stopped run (a fatal error, or `abort`) ends every back-off and pause at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import anthropic

from situate.core.errors import ProviderError
from situate.core.retry import RetryPolicy
from situate.core.secrets import KEYS, redact
from situate.tasks.contexts.claude.planning import Job, Unit

log = logging.getLogger("situate.claude")
T = TypeVar("T")


class ClaudeClient:
    """The SDK client, the pool of `concurrency` workers, and the run's fail-fast state.

    One instance serves every document of a run (the flow maps documents over threads), so the
    limiter, the fatal error and the rate-limit pause are shared.
    """

    def __init__(self, key: str, model: str, *, base_url: str | None, timeout: float,
                 concurrency: int, policy: RetryPolicy) -> None:
        self.model = model
        self.policy = policy
        self._key = key
        self.sdk = anthropic.Anthropic(
            api_key=key,
            base_url=base_url,  # None: the SDK reads ANTHROPIC_BASE_URL
            max_retries=0,  # the retry policy is the one retry layer
            timeout=timeout,
        )
        self._pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="claude")
        self._gate = threading.Lock()
        self._verified = threading.Event()
        self._fatal: ProviderError | None = None  # set by stop: the run is over
        self.stopping = threading.Event()  # set with it: back-off, pauses and polls end at once
        self._pause_lock = threading.Lock()
        self._pause_until = 0.0

    # --- a unit of requests ----------------------------------------------------------------

    def run_unit(self, unit: Unit,
                 take: Callable[[Job, anthropic.types.Message], None]) -> None:
        """Send a unit's jobs: the first alone when cacheable (its write must be readable before
        the others start), then the rest concurrently through the shared pool.

        `take(job, answer)` runs on the worker that received the answer, before that worker is
        free for another request: an answer is recorded (and kept) before the next one is paid,
        so no more than `concurrency` paid answers are ever unrecorded.
        """
        jobs = unit.jobs
        cache = unit.cacheable
        if cache:
            first = self._pool.submit(self._answer, jobs[0], True, take).result()
            u = first.usage
            # No write and no read: the prefix is under the service's floor after all.
            cache = bool(u.cache_creation_input_tokens or u.cache_read_input_tokens)
            jobs = jobs[1:]
        _gather([self._pool.submit(self._answer, job, cache, take) for job in jobs])

    def _answer(self, job: Job, cache: bool,
                take: Callable[[Job, anthropic.types.Message], None]) -> anthropic.types.Message:
        message = self.send(job, cache)
        take(job, message)
        return message

    def send(self, job: Job, cache: bool) -> anthropic.types.Message:
        params = job.params(self.model, cache)
        message: anthropic.types.Message = self.call(
            lambda: self.sdk.messages.create(**params), f"document {job.doc.id}")
        return message

    # --- one call: limiter, fail-fast, retries, error translation ----------------------------

    def call(self, fn: Callable[[], T], what: str) -> T:
        """Call the API once, with the run's retry policy.

        The run's very first call goes alone: a bad key or model then stops the run after one
        request, not after one per worker. After a fatal error every later call fails at once.
        """
        if self._fatal is not None:
            raise self._fatal
        if not self._verified.is_set():
            with self._gate:
                if self._fatal is not None:
                    raise self._fatal
                if not self._verified.is_set():
                    try:
                        out = self._with_retries(fn, what)
                    except ProviderError as e:
                        self.stop(e)  # refused at the first call: every other would be too
                        raise
                    self._verified.set()
                    return out
        return self._with_retries(fn, what)

    def _with_retries(self, fn: Callable[[], T], what: str) -> T:
        retrying = self.policy.retrying(retryable, log=log, what=f"Anthropic, {what}",
                                        describe=describe, on_retry=self._on_retry,
                                        stop=self.stopping)
        try:
            for attempt in retrying:
                with attempt:
                    if self._fatal is not None:
                        raise self._fatal
                    self._respect_pause()
                    return fn()
        except anthropic.APIStatusError as e:
            error = self._translate(e, what)
            # The account is refused, or the service failed through every attempt: stop the run.
            # A 400 is about this request only.
            if e.status_code in (401, 403, 404) or retryable(e):
                self.stop(error)
            raise error from None
        except anthropic.APIConnectionError as e:
            raise self.stop(ProviderError(redact(
                f"could not reach the Anthropic API at {self.sdk.base_url} for {what} after "
                f"{self.policy.max_attempts} attempts ({type(e).__name__}); check "
                "ANTHROPIC_BASE_URL and the network, then run again: finished contexts are cached",
                self._key))) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _on_retry(self, error: BaseException | None, wait: float) -> None:
        if isinstance(error, anthropic.RateLimitError):
            # A 429 is about the account, not this request: every worker pauses.
            with self._pause_lock:
                self._pause_until = max(self._pause_until, time.monotonic() + wait)

    def _respect_pause(self) -> None:
        delay = self._pause_until - time.monotonic()
        if delay > 0:
            self.stopping.wait(delay)

    def _translate(self, e: anthropic.APIStatusError, what: str) -> ProviderError:
        detail = describe(e)
        status = e.status_code
        if status == 401:
            text = (f"Anthropic rejected the API key ({detail}): set a valid ANTHROPIC_API_KEY or "
                    f"Prefect Secret block '{KEYS['anthropic'][1]}'")
        elif status == 403:
            text = (f"Anthropic refused access for {what} ({detail}): the key's workspace may not "
                    f"use {self.model}")
        elif status == 404:
            text = (f"Anthropic could not find what {what} asked for ({detail}): check the model "
                    f"name {self.model!r} and ANTHROPIC_BASE_URL")
        elif retryable(e):
            text = (f"Anthropic kept failing for {what} after {self.policy.max_attempts} attempts "
                    f"({detail}); run again later: finished contexts are cached")
        else:
            text = f"Anthropic refused the request for {what} ({detail})"
        return ProviderError(redact(text, self._key))

    # --- the end of a run ------------------------------------------------------------------

    def stop(self, error: ProviderError) -> ProviderError:
        """End the run: every later call raises `error`, and calls waiting out a back-off or a
        rate-limit pause wake now to raise it."""
        self._fatal = error
        self.stopping.set()
        return error

    def abort(self) -> None:
        if self._fatal is None:
            self.stop(ProviderError("the run stopped because another document failed"))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.sdk.close()


def _gather(futures: Sequence[Future[T]]) -> list[T]:
    """Results in order; on a failure the unstarted futures are cancelled, then it raises."""
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def retryable(e: BaseException) -> bool:
    """429, 5xx (529 overloaded included), 408/409 and dropped connections; never 400/401/403."""
    if isinstance(e, anthropic.APIConnectionError):
        return True
    if isinstance(e, anthropic.APIStatusError):
        return e.status_code in (408, 409, 429) or e.status_code >= 500
    return False


def describe(e: BaseException | None) -> str:
    """'<status> <error type>: <message>' from an SDK error, or its class name."""
    if isinstance(e, anthropic.APIStatusError):
        body = e.body if isinstance(e.body, dict) else {}
        found = body.get("error")
        error = found if isinstance(found, dict) else {}
        kind = error.get("type", "error")
        message = str(error.get("message", "")).strip()
        return f"{e.status_code} {kind}" + (f": {message}" if message else "")
    return type(e).__name__ if e is not None else "error"
