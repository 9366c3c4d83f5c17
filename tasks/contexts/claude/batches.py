"""Claude contexts through the Message Batches API at half price: requests in rounds that let the
prompt cache work (1-hour entries by default: a round can outlive the 5-minute cache, and then
every request of the next round would pay its document's write again), failed requests retried
in later rounds, each result kept as it is read, and every batch not yet read in full persisted,
so that a restarted run reads it instead of paying for its requests twice."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

import anthropic

from situate.core.records import Chunk, Document
from situate.tasks.contexts.base import ContextResult, Keep
from situate.tasks.contexts.claude.wire import ClaudeClient, params, reply_of
from situate.tasks.contexts.engine.answers import Outcome
from situate.tasks.contexts.engine.models import Pricing
from situate.tasks.contexts.engine.planning import Job, Planner, Unit

log = logging.getLogger("situate.claude")

_MAX_BATCH_REQUESTS = 100_000
_MAX_BATCH_BYTES = 200 * 1024 * 1024  # under the 256 MB limit, with room for JSON overhead

# (job, whether it uses the prompt cache): one request of a batch.
Request = tuple[Job, bool]


class BatchState:
    """The batches created and not yet read in full, in one JSON file (`claude-batches.json` in
    the state directory): per batch id, the identity of the run that created it (model, prompt,
    output limits) and the custom ids of its requests. Holds ids only: never a key or a text."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "claude-batches.json"
        self._lock = threading.Lock()

    def load(self) -> dict[str, dict[str, Any]]:
        """{batch id: {"identity": ..., "ids": [custom ids]}}; files of older versions (which
        kept rounds of batch ids) hold nothing this version can resume."""
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        batches = data.get("batches") if isinstance(data, dict) else None
        return batches if isinstance(batches, dict) else {}

    def add(self, batch_id: str, identity: str, custom_ids: Sequence[str]) -> None:
        """Record a batch the moment it is created, before anything waits for it."""
        with self._lock:
            state = self.load()
            state[batch_id] = {"identity": identity, "ids": list(custom_ids)}
            self._write(state)

    def done(self, batch_id: str) -> None:
        """Forget a batch whose results have all been read (and kept)."""
        with self._lock:
            state = self.load()
            if state.pop(batch_id, None) is not None:
                self._write(state)

    def _write(self, state: dict[str, dict[str, Any]]) -> None:
        """Atomically (write, then rename): a crash never leaves half a file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"batches": state}, indent=1))
        tmp.replace(self.path)


class Batches:
    """Situates whole corpora through Message Batches, with the run's client and planner.

    `identity` names what makes two requests with one custom id ask the same thing (the
    contextualizer's cache identity): a batch of another identity is never resumed. `ttl` is the
    life of the cache entries a batch writes ("1h", or "5m" for the 5-minute cache).
    """

    def __init__(self, client: ClaudeClient, planner: Planner, state: BatchState, *,
                 pricing: Pricing, group: bool, identity: str, unpriced_model: str | None,
                 poll_seconds: float, ttl: str = "1h") -> None:
        self.client = client
        self.planner = planner
        self.state = state
        self.pricing = pricing
        self.group = group
        self.identity = identity
        self.unpriced_model = unpriced_model
        self.poll_seconds = poll_seconds
        self.ttl = ttl

    def situate_corpus(self, items: Sequence[tuple[Document, Sequence[Chunk]]],
                       keep: Keep | None = None) -> list[ContextResult]:
        """Every (document, chunks) pair through the Message Batches API, at half price.

        Requests go in one batch per round. The first round holds the first request of every
        cacheable document and all requests that do not use the cache; the other requests of
        cacheable documents wait for the second round, when the first has written their document
        to the cache (a batch is processed concurrently: sent together they would each pay a
        write). Failed requests go to the next round, up to `max_attempts` more rounds.

        Each batch is recorded the moment it is created and forgotten once its results have all
        been read; each result goes to `keep` as its line is read. A restarted run first reads the
        recorded batches that hold any of its requests (waiting for them if need be) and sends
        only what they do not answer: a kill at any point pays for no request twice.
        """
        max_attempts = self.client.policy.max_attempts
        outcomes = [Outcome(keep=keep) for _ in items]
        where: dict[str, int] = {}  # custom id -> item
        units: list[Unit] = []
        for n, (doc, chunks) in enumerate(items):
            doc_units, outcomes[n].notes = self.planner.plan(doc, list(chunks), self.group)
            units.extend(doc_units)
            where.update((job.custom_id, n) for unit in doc_units for job in unit.jobs)
        reader = _Reader(self, outcomes, where)
        pending, deferred = batch_phases(units)
        resumable = self._resumable({job.custom_id for job, _ in pending + deferred})
        if resumable:
            read = reader.for_round({job.custom_id: (job, cache)
                                     for job, cache in pending + deferred})
            for batch_id in resumable:
                log.info("resuming message batch %s", batch_id)
                self._read_batch(batch_id, read)
            pending, deferred = reader.unanswered(pending), reader.unanswered(deferred)
        for _ in range(max_attempts + 1):  # + the round of deferred requests
            if not pending:
                break
            read = reader.for_round({job.custom_id: (job, cache) for job, cache in pending})
            for batch_id in self._create(pending):
                self._read_batch(batch_id, read)
            pending, deferred = deferred + reader.unanswered(pending), []
        for job, _ in pending:
            outcomes[where[job.custom_id]].notes.append(
                f"document {job.doc.id}: batch request {job.custom_id} still failing after "
                f"{max_attempts} rounds; chunk(s) left without context, run again to retry")
        return [outcome.result(list(chunks), self.unpriced_model)
                for (_, chunks), outcome in zip(items, outcomes, strict=True)]

    def _create(self, requests: Sequence[Request]) -> list[str]:
        """Send `requests` as one batch (more if over the API's limits), each recorded at once."""
        batches = self.client.sdk.messages.batches
        batch_ids = []
        for part in split_requests(
                [{"custom_id": job.custom_id,
                  "params": params(job, self.client.model, cache, self.ttl)}
                 for job, cache in requests]):
            batch = self.client.call(partial(batches.create, requests=cast(Any, part)),
                                     "a message batch")  # the SDK's TypedDicts, as dicts
            self.state.add(batch.id, self.identity, [r["custom_id"] for r in part])
            log.info("created message batch %s (%d requests)", batch.id, len(part))
            batch_ids.append(batch.id)
        return batch_ids

    def _resumable(self, custom_ids: set[str]) -> list[str]:
        """Recorded batches of this identity that hold any of `custom_ids`."""
        return [batch_id for batch_id, entry in self.state.load().items()
                if entry.get("identity") == self.identity
                and not custom_ids.isdisjoint(entry.get("ids") or ())]

    def _read_batch(self, batch_id: str, read: Callable[[str, Any], None]) -> None:
        """Wait for the batch to end, then `read(custom_id, result)` each result line as it is
        parsed; forget the batch once every line has been read. A batch the service no longer
        has (expired, or of another account) is forgotten and its requests go unanswered."""
        batches = self.client.sdk.messages.batches

        def stream() -> bool:
            # A stream dropped half-way is read again from the start (the retry policy);
            # `read` ignores the lines it has had.
            try:
                for line in batches.results(batch_id):
                    read(line.custom_id, line.result)
            except anthropic.NotFoundError:
                log.warning("message batch %s is gone; its requests are sent again", batch_id)
                return False
            return True

        if self._wait_batch(batch_id):
            self.client.call(stream, f"batch {batch_id}")
        self.state.done(batch_id)

    def _wait_batch(self, batch_id: str) -> bool:
        """Poll until the batch has ended (False if the service no longer has it); a stopped run
        wakes the wait, and the next poll raises the run's error. Polls come after 1, 2, 4, ...
        seconds up to `poll_seconds`: a small batch that ends in seconds is read in seconds, a
        long one costs a poll every `poll_seconds`."""
        batches = self.client.sdk.messages.batches
        wait = min(1.0, self.poll_seconds)

        def retrieve() -> Any:
            try:
                return batches.retrieve(batch_id)
            except anthropic.NotFoundError:
                return None

        while True:
            batch = self.client.call(retrieve, f"batch {batch_id}")
            if batch is None:
                log.warning("message batch %s is gone; its requests are sent again", batch_id)
                return False
            if batch.processing_status == "ended":
                return True
            counts = batch.request_counts
            log.info("batch %s %s: %d processing", batch_id, batch.processing_status,
                     counts.processing)
            self.client.stopping.wait(wait)
            wait = min(wait * 2, self.poll_seconds)


class _Reader:
    """What the result lines of one `situate_corpus` call mean: each succeeded line is taken (and
    kept) at once; the requests still to send are worked out per round, in request order."""

    def __init__(self, batches: Batches, outcomes: list[Outcome], where: dict[str, int]) -> None:
        self.batches = batches
        self.outcomes = outcomes
        self.where = where
        # By custom id, once its line is read: the requests to send again for it (none when it
        # is answered or refused for good).
        self.verdicts: dict[str, list[Request]] = {}

    def for_round(self, asked: dict[str, Request]) -> Callable[[str, Any], None]:
        """A reader of result lines that heeds only the requests in `asked`, each once."""
        self.verdicts = {}
        return lambda custom_id, result: self._line(asked, custom_id, result)

    def unanswered(self, requests: Sequence[Request]) -> list[Request]:
        """`requests` after the lines read: the ones with no line, and those to send again."""
        out: list[Request] = []
        for job, cache in requests:
            out.extend(self.verdicts.get(job.custom_id, [(job, cache)]))
        return out

    def _line(self, asked: dict[str, Request], custom_id: str, result: Any) -> None:
        if custom_id not in asked or custom_id in self.verdicts:
            return  # not asked for here, or read again after a dropped stream
        job, cache = asked[custom_id]
        n = self.where[custom_id]
        outcome = self.outcomes[n]
        if result.type == "succeeded":
            outcome.take(job, reply_of(result.message, self.batches.pricing, batch=True))
            lost = [c for c in job.chunks if c.index not in outcome.contexts]
            again: list[Request] = []
            if lost:  # a group answer missed chunks (or an empty answer): ask one by one
                lost_units, _ = self.batches.planner.plan(job.doc, lost, group=False)
                again = sum(batch_phases(lost_units), [])
                self.where.update((extra.custom_id, n) for extra, _ in again)
            self.verdicts[custom_id] = again
        elif result.type == "errored" and not _error_retryable(result):
            outcome.notes.append(
                f"document {job.doc.id}: batch request {custom_id} refused "
                f"({_error_text(result)}); chunk(s) left without context")
            self.verdicts[custom_id] = []
        else:
            self.verdicts[custom_id] = [(job, cache)]


def batch_phases(units: Sequence[Unit]) -> tuple[list[tuple[Job, bool]], list[tuple[Job, bool]]]:
    """(job, cache) pairs for now, and for once the first batch has ended.

    Now: the first job of every cacheable unit and every job that does not use the cache. Later:
    the other jobs of cacheable units, which then read what the first batch wrote. In one batch
    they would be processed concurrently and each pay a write.
    """
    now: list[tuple[Job, bool]] = []
    later: list[tuple[Job, bool]] = []
    for unit in units:
        if unit.cacheable:
            now.append((unit.jobs[0], True))
            later.extend((job, True) for job in unit.jobs[1:])
        else:
            now.extend((job, False) for job in unit.jobs)
    return now, later


def split_requests(requests: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Requests cut into batches within the API's count and size limits, order kept."""
    parts: list[list[dict[str, Any]]] = [[]]
    size = 0
    for request in requests:
        n = len(json.dumps(request))
        if parts[-1] and (len(parts[-1]) >= _MAX_BATCH_REQUESTS or size + n > _MAX_BATCH_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(request)
        size += n
    return parts


def _error_retryable(result: Any) -> bool:
    kind = getattr(getattr(getattr(result, "error", None), "error", None), "type", "")
    return kind in ("api_error", "overloaded_error", "rate_limit_error", "timeout_error")


def _error_text(result: Any) -> str:
    error = getattr(getattr(result, "error", None), "error", None)
    return f"{getattr(error, 'type', 'error')}: {getattr(error, 'message', '')}".strip(": ")
