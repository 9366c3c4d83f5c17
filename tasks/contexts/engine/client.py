"""One run's connection to a context provider, whatever it is: the bounded pool every document
shares, the cache-aware sending of a unit of requests (a document's first request alone, the rest
once it has started), every call through the one retry policy, fail-fast on a refused account,
and errors a user can act on. What differs per provider (the request on the wire, its usage, its
errors) is its `Wire`.

SDK retries are off: `situate.core.retry.RetryPolicy` is the one retry layer. A 429 is about the
account, not the request, so it pauses every worker; the server's retry-after is honoured; a
stopped run (a fatal error, or `abort`) ends every back-off and pause at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from situate.core.errors import ProviderError
from situate.core.records import Usage
from situate.core.retry import RetryPolicy
from situate.core.secrets import redact
from situate.tasks.contexts.engine.planning import Job, Unit

log = logging.getLogger("situate.contexts")
T = TypeVar("T")


@dataclass
class Reply:
    """One answer, as every provider's is read: its text, its bill (`usage.cost_usd` priced by
    the wire), whether it was cut at the output cap, and whether the prompt cache took part (a
    write or a read: False on a cacheable unit's first reply means the prefix was under the
    service's floor after all)."""

    text: str
    usage: Usage
    cut: bool = False
    cache_used: bool = True
    seconds: float = 0.0
    raw: Any = field(default=None, repr=False)


class Wire:
    """What a provider does differently: the request it sends for a job, the reading of its
    answer and the meaning of its errors. The rest is the engine's."""

    label = "the provider"  # in messages: "Anthropic", "OpenAI-compatible server at URL", ...
    key_hint = ""  # where a rejected key is set, for the 401 message
    url_hint = ""  # where the address is set, for the unreachable-server message
    base_url = ""
    # The first reply of a cacheable unit says whether the cache works for its prefix (Anthropic
    # reports writes); providers that cache silently (OpenAI: reads only) keep the schedule.
    reports_writes = True

    def send(self, job: Job, cache: bool) -> Reply:
        raise NotImplementedError

    def retryable(self, e: BaseException) -> bool:
        return False

    def rate_limited(self, e: BaseException | None) -> bool:
        return False

    def unreachable(self, e: BaseException) -> bool:
        """A connection that never got an answer (after the retries)."""
        return False

    def status(self, e: BaseException) -> int | None:
        """The HTTP status of an error answer; None when it is not one."""
        return None

    def reason(self, e: BaseException | None) -> str:
        """Why a call failed, in a few words (a status and the provider's message), for the
        retry log and the final message."""
        return type(e).__name__ if e is not None else "error"

    def explain(self, status: int, detail: str, what: str, model: str) -> str | None:
        """A provider's own words for an error status (a missing model, a full context window); None:
        the engine's."""
        return None

    def close(self) -> None:
        pass


class LLMClient:
    """The wire, the pool of `concurrency` workers, and the run's fail-fast state.

    One instance serves every document of a run (the flow maps documents over threads), so the
    limiter, the fatal error and the rate-limit pause are shared.
    """

    def __init__(self, wire: Wire, model: str, *, concurrency: int, policy: RetryPolicy,
                 key: str = "", prefix: str = "situate") -> None:
        self.wire = wire
        self.model = model
        self.policy = policy
        self._key = key
        self._pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix=prefix)
        self._gate = threading.Lock()
        self._verified = threading.Event()
        self._fatal: ProviderError | None = None  # set by stop: the run is over
        self.stopping = threading.Event()  # set with it: back-off, pauses and polls end at once
        self._pause_lock = threading.Lock()
        self._pause_until = 0.0
        self.timings = Timings()

    # --- a unit of requests ----------------------------------------------------------------

    def run_unit(self, unit: Unit, take: Callable[[Job, Reply], None]) -> None:
        """Send a unit's jobs: the first alone when cacheable (its write must be readable before
        the others start), then the rest concurrently through the shared pool.

        `take(job, reply)` runs on the worker that received the answer, before that worker is
        free for another request: an answer is recorded (and kept) before the next one is paid,
        so no more than `concurrency` paid answers are ever unrecorded.
        """
        jobs = unit.jobs
        cache = unit.cacheable
        if cache:
            first = self._pool.submit(self._answer, jobs[0], True, take).result()
            if self.wire.reports_writes:
                cache = first.cache_used  # no write and no read: under the floor after all
            jobs = jobs[1:]
        _gather([self._pool.submit(self._answer, job, cache, take) for job in jobs])

    def _answer(self, job: Job, cache: bool, take: Callable[[Job, Reply], None]) -> Reply:
        reply = self.call(lambda: self.wire.send(job, cache), f"document {job.doc.id}")
        self.timings.add(reply)
        take(job, reply)
        return reply

    # --- one call: limiter, fail-fast, retries, error translation ----------------------------

    def call(self, fn: Callable[[], T], what: str) -> T:
        """Call the service once, with the run's retry policy.

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
        wire = self.wire
        retrying = self.policy.retrying(wire.retryable, log=log, what=f"{wire.label}, {what}",
                                        reason=wire.reason, on_retry=self._on_retry,
                                        stop=self.stopping)
        try:
            for attempt in retrying:
                with attempt:
                    if self._fatal is not None:
                        raise self._fatal
                    self._respect_pause()
                    return fn()
        except ProviderError:
            raise
        except Exception as e:
            status = wire.status(e)
            if status is not None:
                error = self._translate(e, status, what)
                # The account is refused, or the service failed through every attempt: stop the
                # run. A 400 is about this request only.
                if status in (401, 403, 404) or wire.retryable(e):
                    self.stop(error)
                raise error from None
            if wire.unreachable(e):
                raise self.stop(ProviderError(redact(
                    f"could not reach {wire.label} at {wire.base_url} for {what} after "
                    f"{self.policy.max_attempts} attempts ({type(e).__name__}); check "
                    f"{wire.url_hint or 'its address'}, then run again: "
                    "finished contexts are cached", self._key))) from None
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _on_retry(self, error: BaseException | None, wait: float) -> None:
        if self.wire.rate_limited(error):
            # A 429 is about the account, not this request: every worker pauses.
            with self._pause_lock:
                self._pause_until = max(self._pause_until, time.monotonic() + wait)

    def _respect_pause(self) -> None:
        delay = self._pause_until - time.monotonic()
        if delay > 0:
            self.stopping.wait(delay)

    def _translate(self, e: BaseException, status: int, what: str) -> ProviderError:
        wire = self.wire
        detail = wire.reason(e)
        text = wire.explain(status, detail, what, self.model)
        if text is None:
            if status == 401:
                text = f"{wire.label} rejected the API key ({detail}): {wire.key_hint}"
            elif status == 403:
                text = (f"{wire.label} refused access for {what} ({detail}): the key may not use "
                        f"{self.model}")
            elif status == 404:
                text = (f"{wire.label} could not find what {what} asked for ({detail}): check the "
                        f"model name {self.model!r} and {wire.url_hint or 'the address'}")
            elif wire.retryable(e):
                text = (f"{wire.label} kept failing for {what} after {self.policy.max_attempts} "
                        f"attempts ({detail}); run again later: finished contexts are cached")
            else:
                text = f"{wire.label} refused the request for {what} ({detail})"
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
        self.wire.close()


class Timings:
    """The wall time of the answers of a run, to time the next plan on a server that is free
    (a measured rate, `engine.rates`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.seconds = 0.0
        self.started = 0.0
        self.ended = 0.0

    def add(self, reply: Reply) -> None:
        now = time.monotonic()
        with self._lock:
            if not self.requests:
                self.started = now - reply.seconds
            self.requests += 1
            self.seconds += reply.seconds
            self.ended = now


def _gather(futures: Sequence[Future[T]]) -> list[T]:
    """Results in order; on a failure the unstarted futures are cancelled, then it raises."""
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise
