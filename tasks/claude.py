"""Claude contexts at the lowest cost the pricing rules allow (`--context anthropic`).

One request per chunk with the whole document in the prompt is the method of Anthropic's
contextual-retrieval guide. What makes it cheap is the prompt cache: the document block carries
`cache_control`, the first request of a document writes the cache (1.25x the input price) and
every other request of that document reads it (0.1x). A cache entry becomes readable only once
the response that wrote it has started, so the requests of one document are scheduled first alone,
then the rest concurrently; a bounded pool shared by every document keeps the global concurrency.

Documents under the model's minimum cacheable length cannot be cached; `group_chunks` then
situates all their chunks in one request (the document with its chunks marked, a JSON schema with
one context per chunk id), and retries on its own any chunk the answer misses. `batch` sends the
same requests through the Message Batches API at half price, with the batch id persisted so a
restarted run resumes instead of paying twice.

Billing uses the usage the service reports; token estimates only steer scheduling (is a document
cacheable, does it fit the context window). The API key lives in the client only: it is never in a
message, the cache, a pickle or a file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import anthropic
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from tasks.contextualize import ContextConfig, ContextResult, Contextualizer
from tasks.errors import ProviderError
from tasks.records import Chunk, Document, Situated, Usage, sha256

log = logging.getLogger("situate.claude")
T = TypeVar("T")

DEFAULT_MODEL = "claude-haiku-4-5"
SECRET_BLOCK = "anthropic-api-key"
PROMPT_VERSION = "guide-v1"
GROUP_PROMPT_VERSION = "group-v1"

# The contextual-retrieval guide's prompt: the document block (cached), then the chunk.
DOCUMENT_PROMPT = "<document>\n{doc_content}\n</document>"
CHUNK_PROMPT = (
    "Here is the chunk we want to situate within the whole document\n"
    "<chunk>\n{chunk_content}\n</chunk>\n\n"
    "Please give a short succinct context to situate this chunk within the overall document for "
    "the purposes of improving search retrieval of the chunk. Answer only with the succinct "
    "context and nothing else."
)
GROUP_PROMPT = (
    "The document above marks its chunks with [[chunk N]] ... [[/chunk N]].{extra}\n"
    "For each of the chunks {ids}, please give a short succinct context to situate this chunk "
    "within the overall document for the purposes of improving search retrieval of the chunk. "
    "Answer only with the JSON object: one entry per chunk, its id and its succinct context."
)


# --- prices and model facts ----------------------------------------------------------------------

@dataclass(frozen=True)
class Pricing:
    """Dollars per million tokens. Cache writes are 5-minute writes (the only TTL used here)."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float = 0.0


BATCH_DISCOUNT = 0.5  # Message Batches bill every token class at half price.


@dataclass(frozen=True)
class ModelInfo:
    """What scheduling and billing need to know of a model family."""

    family: str
    pricing: Pricing
    min_cache_tokens: int
    context_window: int = 200_000
    max_output: int = 64_000


# Anthropic's published prices and minimum cacheable prompt lengths (per family), prefix-matched
# against the model id so dated ids ("claude-3-haiku-20240307") resolve.
MODELS: dict[str, ModelInfo] = {
    "claude-haiku-4-5": ModelInfo("Haiku 4.5", Pricing(1.0, 5.0, 1.25, 0.10, 2.0), 4096),
    "claude-3-5-haiku": ModelInfo("Haiku 3.5", Pricing(0.80, 4.0, 1.0, 0.08, 1.6), 2048,
                                  max_output=8192),
    "claude-3-haiku": ModelInfo("Haiku 3", Pricing(0.25, 1.25, 0.30, 0.03, 0.50), 2048,
                                max_output=4096),
    "claude-sonnet-4-6": ModelInfo("Sonnet 4.6", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 2048),
    "claude-sonnet-4-5": ModelInfo("Sonnet 4.5", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 1024),
    "claude-sonnet-4": ModelInfo("Sonnet 4", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 1024),
    "claude-3-7-sonnet": ModelInfo("Sonnet 3.7", Pricing(3.0, 15.0, 3.75, 0.30, 6.0), 1024),
    "claude-opus-4-6": ModelInfo("Opus 4.6", Pricing(5.0, 25.0, 6.25, 0.50, 10.0), 4096,
                                 max_output=32_000),
    "claude-opus-4-5": ModelInfo("Opus 4.5", Pricing(5.0, 25.0, 6.25, 0.50, 10.0), 4096,
                                 max_output=32_000),
    "claude-opus-4-1": ModelInfo("Opus 4.1", Pricing(15.0, 75.0, 18.75, 1.50, 30.0), 1024,
                                 max_output=32_000),
    "claude-opus-4": ModelInfo("Opus 4", Pricing(15.0, 75.0, 18.75, 1.50, 30.0), 1024,
                               max_output=32_000),
}
# An unknown model: no price (cost 0, said in the notes), the lowest floor (marking a block that
# turns out too short costs nothing), a conservative output cap.
_UNKNOWN = ModelInfo("unknown", Pricing(0.0, 0.0, 0.0, 0.0, 0.0), 1024, max_output=4096)


def model_info(model: str) -> ModelInfo | None:
    """The facts of `model`, by the longest known prefix; None when the family is unknown."""
    for prefix in sorted(MODELS, key=len, reverse=True):
        if model.startswith(prefix):
            return MODELS[prefix]
    return None


def price(usage: Usage, pricing: Pricing, batch: bool = False) -> float:
    """Dollars for the tokens of `usage` (5-minute cache writes), at batch rates if `batch`."""
    dollars = (usage.input_tokens * pricing.input + usage.output_tokens * pricing.output
               + usage.cache_creation_input_tokens * pricing.cache_write
               + usage.cache_read_input_tokens * pricing.cache_read) / 1e6
    return dollars * (BATCH_DISCOUNT if batch else 1.0)


def cache_hit_ratio(usage: Usage) -> float:
    """Share of input tokens read from the prompt cache (0 when nothing was sent)."""
    return usage.prompt_cache_hit_ratio


def estimate_tokens(text: str) -> int:
    """A deliberately high token estimate, for decisions only (billing uses reported usage).

    ASCII at 3 characters per token (code tokenizes denser than prose's ~4), anything else at one
    token per character. Too high only costs a serialized first request on a document that turns
    out uncacheable; too low would skip the cache or overflow the context window.
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 3) + (len(text) - ascii_chars)


# --- requests ------------------------------------------------------------------------------------

@dataclass
class _Job:
    """One Messages request: the document block (the cacheable prefix) and what follows it."""

    doc: Document
    chunks: list[Chunk]
    doc_block: str
    suffix: str
    max_tokens: int
    schema: dict[str, Any] | None = None  # set for a group request (structured output)

    @property
    def custom_id(self) -> str:
        """Deterministic, so a resumed batch matches its results to the same jobs."""
        kind = "g" if self.schema is not None else "c"
        key = "\x1f".join([self.doc.id, self.doc.hash, *(str(c.index) for c in self.chunks)])
        return f"{kind}-{sha256(key)[:40]}"

    def params(self, model: str, cache: bool) -> dict[str, Any]:
        doc_block: dict[str, Any] = {"type": "text", "text": self.doc_block}
        if cache:
            doc_block["cache_control"] = {"type": "ephemeral"}
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "user",
                          "content": [doc_block, {"type": "text", "text": self.suffix}]}],
        }
        if self.schema is not None:
            params["output_config"] = {"format": {"type": "json_schema", "schema": self.schema}}
        return params


@dataclass
class _Unit:
    """Jobs that share one document prefix: cached (first alone, then the rest) or not."""

    jobs: list[_Job]
    cacheable: bool


@dataclass
class _Outcome:
    """The answers gathered for one document: contexts by chunk index, the bill, the notes."""

    contexts: dict[int, str] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)


def _group_schema(ids: Sequence[int] | None) -> dict[str, Any]:
    """One context per chunk id; the ids enumerated when given.

    The schema is part of the cached prefix (changing it invalidates the cache), so the groups of
    one document that share a cached document block share one schema without the enumeration.
    """
    chunk: dict[str, Any] = {"type": "integer"}
    if ids is not None:
        chunk["enum"] = list(ids)
    return {
        "type": "object",
        "properties": {"contexts": {"type": "array", "items": {
            "type": "object",
            "properties": {"chunk": chunk, "context": {"type": "string"}},
            "required": ["chunk", "context"],
            "additionalProperties": False,
        }}},
        "required": ["contexts"],
        "additionalProperties": False,
    }


def parse_group_answer(text: str, wanted: Sequence[int]) -> dict[int, str]:
    """Contexts by chunk index from a group answer; anything malformed or unasked is dropped.

    The schema constrains the model, but a truncated or off-schema answer must cost only a retry
    of the chunks it misses, never a wrong context on a chunk.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return {}
    items = data.get("contexts") if isinstance(data, dict) else None
    out: dict[int, str] = {}
    allowed = set(wanted)
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        index, context = item.get("chunk"), item.get("context")
        if (type(index) is int and index in allowed and index not in out
                and isinstance(context, str) and context.strip()):
            out[index] = context.strip()
    return out


def _locate(doc: Document, chunk: Chunk) -> int:
    if chunk.start >= 0 and doc.text.startswith(chunk.text, chunk.start):
        return chunk.start
    return doc.text.find(chunk.text)


def mark_chunks(text: str, spans: Sequence[tuple[int, int, int]]) -> str:
    """`text` with `[[chunk N]]` / `[[/chunk N]]` around each (index, start, end) span.

    Marking the chunks in place sends each chunk's text once, where a list of chunks after the
    document would send it twice; overlapping spans are fine, the markers are not nested tags.
    """
    events = sorted([(start, 1, index) for index, start, _ in spans]
                    + [(end, 0, index) for index, _, end in spans])
    out: list[str] = []
    cursor = 0
    for pos, is_start, index in events:
        out.append(text[cursor:pos])
        out.append(f"[[chunk {index}]]" if is_start else f"[[/chunk {index}]]")
        cursor = pos
    out.append(text[cursor:])
    return "".join(out)


# --- the contextualizer --------------------------------------------------------------------------

class AnthropicContextualizer(Contextualizer):
    """Claude contexts, cache-aware scheduling, one retry policy, usage in dollars.

    One instance is shared by every document of a run (the flow maps documents over threads), so
    the limiter (a pool of `concurrency` workers), the fail-fast state and the rate-limit pause are
    shared; the bill is returned per ContextResult.
    """

    name = "anthropic"

    def __init__(self, config: ContextConfig, api_key: str | None = None) -> None:
        self.config = config
        extra = dict(config.extra or {})
        self.model = config.model or DEFAULT_MODEL
        known = model_info(self.model)
        self.info = known or _UNKNOWN
        self.priced = known is not None
        if "context_window" in extra:
            self.info = replace(self.info, context_window=int(extra["context_window"]))
        self.group_chunks = config.group_chunks
        self.batch = config.batch
        self.max_attempts = max(1, config.max_attempts)
        self.max_tokens = int(extra.get("max_tokens", 1024))
        self.context_tokens = int(extra.get("context_max_tokens", 250))
        self.group_size = max(1, min(int(extra.get("group_size", 32)),
                                     (self.info.max_output - 100) // self.context_tokens))
        self.retry_base = float(extra.get("retry_base_seconds", 1.0))
        self.retry_cap = float(extra.get("retry_max_seconds", 60.0))
        self.poll_seconds = float(extra.get("batch_poll_seconds", 30.0))
        self.state_dir = Path(config.state_dir or extra.get("state_dir") or ".situate-state")
        self._key = api_key or resolve_api_key(str(extra.get("secret_block", SECRET_BLOCK)))
        self._client = anthropic.Anthropic(
            api_key=self._key,
            base_url=extra.get("base_url") or None,  # None: the SDK reads ANTHROPIC_BASE_URL
            max_retries=0,  # tenacity below is the one retry layer
            timeout=float(extra.get("timeout_seconds", 120.0)),
        )
        self._pool = ThreadPoolExecutor(max(1, config.concurrency),
                                        thread_name_prefix="claude")
        self._gate = threading.Lock()
        self._verified = threading.Event()
        self._fatal: ProviderError | None = None  # set by _stop: the run is over
        self._stopping = threading.Event()  # set with it: back-off and pauses end at once
        self._pause_lock = threading.Lock()
        self._pause_until = 0.0
        self._state_lock = threading.Lock()

    # Pickled into workers (Dask, Prefect payloads): ship the settings, never the key or client.
    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])

    def __repr__(self) -> str:
        return f"AnthropicContextualizer(model={self.model!r})"

    def cache_identity(self) -> tuple[str, str, str]:
        return ("anthropic", self.model,
                GROUP_PROMPT_VERSION if self.group_chunks else PROMPT_VERSION)

    def abort(self) -> None:
        if self._fatal is None:
            self._stop(ProviderError("the run stopped because another document failed"))

    def _stop(self, error: ProviderError) -> ProviderError:
        """End the run: every later call raises `error`, and calls waiting out a back-off or a
        rate-limit pause wake now to raise it."""
        self._fatal = error
        self._stopping.set()
        return error

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    # --- planning ---------------------------------------------------------------------------

    def _plan(self, doc: Document, chunks: Sequence[Chunk], group: bool
              ) -> tuple[list[_Unit], list[str]]:
        """The requests for `chunks` of `doc`, grouped by the document prefix they share."""
        units: list[_Unit] = []
        windows, notes = self._windows(doc, chunks)
        for text, offset, members, wanted in windows:
            if group:
                spans = []
                stray: list[Chunk] = []
                for c in members:
                    start = _locate(doc, c) - offset
                    if 0 <= start and start + len(c.text) <= len(text):
                        spans.append((c.index, start, start + len(c.text)))
                    elif c in wanted:
                        stray.append(c)
                doc_block = DOCUMENT_PROMPT.format(doc_content=mark_chunks(text, spans))
                groups = [wanted[i:i + self.group_size]
                          for i in range(0, len(wanted), self.group_size)]
                jobs = [self._group_job(doc, doc_block, g, stray, enumerate_ids=len(groups) == 1)
                        for g in groups]
            else:
                doc_block = DOCUMENT_PROMPT.format(doc_content=text)
                jobs = [_Job(doc, [c], doc_block, CHUNK_PROMPT.format(chunk_content=c.text),
                             self.max_tokens) for c in wanted]
            # Caching pays from the second request on; under the floor it is not even possible.
            cacheable = (len(jobs) >= 2
                         and estimate_tokens(doc_block) >= self.info.min_cache_tokens)
            units.append(_Unit(jobs, cacheable))
        return units, notes

    def _group_job(self, doc: Document, doc_block: str, chunks: Sequence[Chunk],
                   stray: Sequence[Chunk], enumerate_ids: bool) -> _Job:
        ids = [c.index for c in chunks]
        unmarked = [c for c in stray if c.index in set(ids)]
        extra = "".join(f'\nChunk {c.index} could not be marked; here is its text:\n'
                        f'<chunk id="{c.index}">\n{c.text}\n</chunk>' for c in unmarked)
        suffix = GROUP_PROMPT.format(extra=extra, ids=", ".join(map(str, ids)))
        max_tokens = min(self.info.max_output, 100 + self.context_tokens * len(chunks))
        return _Job(doc, list(chunks), doc_block, suffix, max_tokens,
                    _group_schema(ids if enumerate_ids else None))

    def _windows(self, doc: Document, chunks: Sequence[Chunk]
                 ) -> tuple[list[tuple[str, int, list[Chunk], list[Chunk]]], list[str]]:
        """The document, or windows of it when it exceeds the context window.

        Returns (text, offset, chunks located in it, requested chunks assigned to it). Windows are
        fixed and half-overlapping, so every chunk up to half a window long lies whole in one and
        the chunks of a window still share (and cache) one prefix.
        """
        wanted = list(chunks)
        longest = max((estimate_tokens(c.text) for c in wanted), default=0)
        budget = self.info.context_window - self.max_tokens - longest - 600
        total = estimate_tokens(doc.text)
        if total <= budget:
            return [(doc.text, 0, list(doc.chunks), wanted)], []
        if budget < 1000:
            raise ProviderError(
                f"document {doc.id}: a chunk of ~{longest} tokens leaves no room for context in "
                f"the {self.info.context_window}-token window of {self.model}; use smaller chunks")
        per_char = total / max(1, len(doc.text))
        size = int(budget / per_char)
        stride = max(1, size // 2)
        count = max(1, math.ceil((len(doc.text) - size) / stride) + 1)
        assigned: list[list[Chunk]] = [[] for _ in range(count)]
        for c in wanted:
            start = _locate(doc, c)
            assigned[min(max(start, 0) // stride, count - 1)].append(c)
        windows = []
        for i, members in enumerate(assigned):
            if not members:
                continue
            lo = i * stride
            text = doc.text[lo:lo + size]
            located = [c for c in doc.chunks if lo <= _locate(doc, c) < lo + size]
            windows.append((text, lo, located, members))
        note = (f"document {doc.id} (~{total} tokens) exceeds the {self.info.context_window}-token "
                f"context window of {self.model}: its chunks were situated within {len(windows)} "
                f"window(s) of ~{budget} tokens of the document around them")
        log.warning(note)
        return windows, [note]

    # --- the per-document path --------------------------------------------------------------

    def situate(self, doc: Document, chunks: Sequence[Chunk]) -> ContextResult:
        """Contexts for `chunks` of `doc`, in order, with the bill of the requests made."""
        chunks = list(chunks)
        outcome = _Outcome()
        if not chunks:
            return ContextResult([], outcome.usage)
        units, outcome.notes = self._plan(doc, chunks, self.group_chunks)
        for unit in units:
            for job, message in self._run_unit(unit):
                self._take(job, message, outcome, batch=False)
        missed = [c for c in chunks if c.index not in outcome.contexts]
        if missed and self.group_chunks:
            outcome.notes.append(f"document {doc.id}: the group answer missed chunk(s) "
                                 f"{', '.join(str(c.index) for c in missed)}; asked one by one")
            retry_units, _ = self._plan(doc, missed, group=False)
            for unit in retry_units:
                for job, message in self._run_unit(unit):
                    self._take(job, message, outcome, batch=False)
        return self._result(chunks, outcome)

    def _run_unit(self, unit: _Unit) -> list[tuple[_Job, anthropic.types.Message]]:
        """Send a unit's jobs: the first alone when cacheable (its write must be readable before
        the others start), then the rest concurrently through the shared pool."""
        jobs = unit.jobs
        done: list[tuple[_Job, anthropic.types.Message]] = []
        cache = unit.cacheable
        if cache:
            first = self._pool.submit(self._send, jobs[0], True).result()
            done.append((jobs[0], first))
            u = first.usage
            # No write and no read: the prefix is under the service's floor after all.
            cache = bool(u.cache_creation_input_tokens or u.cache_read_input_tokens)
            jobs = jobs[1:]
        futures = [self._pool.submit(self._send, job, cache) for job in jobs]
        done.extend(zip(jobs, _gather(futures), strict=True))
        return done

    def _send(self, job: _Job, cache: bool) -> anthropic.types.Message:
        params = job.params(self.model, cache)
        return self._call(lambda: self._client.messages.create(**params),
                          f"document {job.doc.id}")

    def _take(self, job: _Job, message: Any, outcome: _Outcome, batch: bool) -> None:
        """Record one answer: its bill, and the contexts it gives."""
        u = message.usage
        bill = Usage(requests=1, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                     cache_creation_input_tokens=u.cache_creation_input_tokens or 0,
                     cache_read_input_tokens=u.cache_read_input_tokens or 0)
        bill.cost_usd = price(bill, self.info.pricing, batch)
        outcome.usage.add(bill)
        text = "".join(getattr(b, "text", "") for b in message.content).strip()
        if job.schema is not None:
            outcome.contexts.update(parse_group_answer(text, [c.index for c in job.chunks]))
        elif not text:  # left without context (not cached), so a re-run asks again
            outcome.notes.append(f"document {job.doc.id}, chunk {job.chunks[0].index}: "
                                 "the model answered with no text")
        else:
            outcome.contexts[job.chunks[0].index] = text
            if message.stop_reason == "max_tokens":
                outcome.notes.append(f"document {job.doc.id}, chunk {job.chunks[0].index}: "
                                     f"context cut at {job.max_tokens} tokens")

    def _result(self, chunks: Sequence[Chunk], outcome: _Outcome) -> ContextResult:
        situated = [Situated(c, outcome.contexts[c.index], "generated")
                    if c.index in outcome.contexts else Situated(c, "", "none") for c in chunks]
        outcome.usage.contexts_generated = sum(1 for s in situated if s.source == "generated")
        if not self.priced:
            outcome.notes.append(f"no price known for model {self.model}: cost shown as 0")
        return ContextResult(situated, outcome.usage, outcome.notes)

    # --- one call: limiter, fail-fast, retries, error translation ----------------------------

    def _call(self, fn: Callable[[], T], what: str) -> T:
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
                        self._stop(e)  # refused at the first call: every other would be too
                        raise
                    self._verified.set()
                    return out
        return self._with_retries(fn, what)

    def _with_retries(self, fn: Callable[[], T], what: str) -> T:
        retrying = Retrying(stop=stop_after_attempt(self.max_attempts), wait=self._wait,
                            retry=retry_if_exception(_retryable), reraise=True,
                            before_sleep=self._before_sleep, sleep=self._stopping.wait)
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
            if e.status_code in (401, 403, 404) or _retryable(e):
                self._stop(error)
            raise error from None
        except anthropic.APIConnectionError as e:
            raise self._stop(ProviderError(self._redact(
                f"could not reach the Anthropic API at {self._client.base_url} for {what} after "
                f"{self.max_attempts} attempts ({type(e).__name__}); check ANTHROPIC_BASE_URL and "
                "the network, then run again: finished contexts are cached"))) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff with jitter; the server's retry-after when it gives one."""
        exc = state.outcome.exception() if state.outcome else None
        after = _retry_after(exc)
        jitter = random.uniform(0, self.retry_base)
        if after is not None:
            return min(after, self.retry_cap) + jitter
        step = min(self.retry_cap, self.retry_base * 2 ** (state.attempt_number - 1))
        return step / 2 + random.uniform(0, step / 2)

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        if isinstance(exc, anthropic.RateLimitError):
            # A 429 is about the account, not this request: every worker pauses.
            with self._pause_lock:
                self._pause_until = max(self._pause_until, time.monotonic() + wait)
        log.info("Anthropic %s; attempt %d of %d, retrying in %.2fs", _describe(exc),
                 state.attempt_number, self.max_attempts, wait)

    def _respect_pause(self) -> None:
        delay = self._pause_until - time.monotonic()
        if delay > 0:
            self._stopping.wait(delay)

    def _translate(self, e: anthropic.APIStatusError, what: str) -> ProviderError:
        detail = _describe(e)
        status = e.status_code
        if status == 401:
            text = (f"Anthropic rejected the API key ({detail}): set a valid ANTHROPIC_API_KEY or "
                    f"Prefect Secret block '{SECRET_BLOCK}'")
        elif status == 403:
            text = (f"Anthropic refused access for {what} ({detail}): the key's workspace may not "
                    f"use {self.model}")
        elif status == 404:
            text = (f"Anthropic could not find what {what} asked for ({detail}): check the model "
                    f"name {self.model!r} and ANTHROPIC_BASE_URL")
        elif _retryable(e):
            text = (f"Anthropic kept failing for {what} after {self.max_attempts} attempts "
                    f"({detail}); run again later: finished contexts are cached")
        else:
            text = f"Anthropic refused the request for {what} ({detail})"
        return ProviderError(self._redact(text))

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    # --- batch mode -------------------------------------------------------------------------

    def situate_corpus(self, items: Sequence[tuple[Document, Sequence[Chunk]]]
                       ) -> list[ContextResult] | None:
        """Every (document, chunks) pair through the Message Batches API, at half price.

        Requests go in one batch per round. The first round holds the first request of every
        cacheable document and all requests that do not use the cache; the other requests of
        cacheable documents wait for the second round, when the first has written their document
        to the cache (a batch is processed concurrently: sent together they would each pay a
        write). Failed requests go to the next round, up to `max_attempts` more rounds. Each
        round's batch ids are persisted before polling, so a restarted run with the same missing
        chunks resumes them instead of paying twice.
        """
        if not self.batch:
            return None
        outcomes = [_Outcome() for _ in items]
        where: dict[str, tuple[int, _Job]] = {}
        units: list[_Unit] = []
        for n, (doc, chunks) in enumerate(items):
            doc_units, outcomes[n].notes = self._plan(doc, list(chunks), self.group_chunks)
            units.extend(doc_units)
            where.update((job.custom_id, (n, job)) for unit in doc_units for job in unit.jobs)
        pending, deferred = _batch_phases(units)
        state_key = sha256(json.dumps([self.model, self.cache_identity()[2],
                                       sorted(where)]))[:32]
        for round_no in range(self.max_attempts + 1):  # + the round of deferred requests
            if not pending:
                break
            results = self._batch_round(state_key, round_no, pending)
            retry: list[tuple[_Job, bool]] = []
            for job, cache in pending:
                n, _ = where[job.custom_id]
                result = results.get(job.custom_id)
                kind = result.type if result is not None else "missing"
                if kind == "succeeded":
                    self._take(job, result.message, outcomes[n], batch=True)
                    lost = [c for c in job.chunks if c.index not in outcomes[n].contexts]
                    if lost:  # a group answer missed chunks: ask for them one by one
                        lost_units, _ = self._plan(job.doc, lost, group=False)
                        for extra_job, extra_cache in sum(_batch_phases(lost_units), []):
                            where[extra_job.custom_id] = (n, extra_job)
                            retry.append((extra_job, extra_cache))
                elif kind == "errored" and not _batch_error_retryable(result):
                    outcomes[n].notes.append(
                        f"document {job.doc.id}: batch request {job.custom_id} refused "
                        f"({_batch_error_text(result)}); chunk(s) left without context")
                else:
                    retry.append((job, cache))
            pending, deferred = deferred + retry, []
        for job, _ in pending:
            n, _ = where[job.custom_id]
            outcomes[n].notes.append(
                f"document {job.doc.id}: batch request {job.custom_id} still failing after "
                f"{self.max_attempts} rounds; chunk(s) left without context, run again to retry")
        return [self._result(list(chunks), outcome)
                for (_, chunks), outcome in zip(items, outcomes, strict=True)]

    def _batch_round(self, state_key: str, round_no: int, pending: Sequence[tuple[_Job, bool]]
                     ) -> dict[str, Any]:
        """Results by custom_id of one round: resumed from the persisted batch ids, or created."""
        rounds = self._load_state().get(state_key, [])
        if round_no < len(rounds):
            batch_ids = rounds[round_no]
            log.info("resuming message batch(es) %s", ", ".join(batch_ids))
        else:
            batch_ids = []
            for part in _split_requests(
                    [{"custom_id": job.custom_id, "params": job.params(self.model, cache)}
                     for job, cache in pending]):
                batch = self._call(lambda p=part: self._client.messages.batches.create(requests=p),
                                   "a message batch")
                batch_ids.append(batch.id)
                self._save_state(state_key, round_no, batch_ids)
                log.info("created message batch %s (%d requests)", batch.id, len(part))
        results: dict[str, Any] = {}
        for batch_id in batch_ids:
            self._wait_batch(batch_id)
            lines = self._call(lambda b=batch_id: list(self._client.messages.batches.results(b)),
                               f"batch {batch_id}")
            results.update({line.custom_id: line.result for line in lines})
        return results

    def _wait_batch(self, batch_id: str) -> None:
        while True:
            batch = self._call(lambda: self._client.messages.batches.retrieve(batch_id),
                               f"batch {batch_id}")
            if batch.processing_status == "ended":
                return
            counts = batch.request_counts
            log.info("batch %s %s: %d processing", batch_id, batch.processing_status,
                     counts.processing)
            time.sleep(self.poll_seconds)

    def _state_path(self) -> Path:
        return self.state_dir / "claude-batches.json"

    def _load_state(self) -> dict[str, list[list[str]]]:
        try:
            return json.loads(self._state_path().read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def _save_state(self, state_key: str, round_no: int, batch_ids: list[str]) -> None:
        """Persist batch ids atomically (write, then rename): a crash never leaves half a file."""
        with self._state_lock:
            state = self._load_state()
            rounds = state.setdefault(state_key, [])
            while len(rounds) <= round_no:
                rounds.append([])
            rounds[round_no] = list(batch_ids)
            path = self._state_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state, indent=1))
            tmp.replace(path)


# --- helpers -------------------------------------------------------------------------------------

def _gather(futures: Sequence[Future[T]]) -> list[T]:
    """Results in order; on a failure the unstarted futures are cancelled, then it raises."""
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def _batch_phases(units: Sequence[_Unit]
                  ) -> tuple[list[tuple[_Job, bool]], list[tuple[_Job, bool]]]:
    """(job, cache) pairs for now, and for once the first batch has ended.

    Now: the first job of every cacheable unit and every job that does not use the cache. Later:
    the other jobs of cacheable units, which then read what the first batch wrote. In one batch
    they would be processed concurrently and each pay a write.
    """
    now: list[tuple[_Job, bool]] = []
    later: list[tuple[_Job, bool]] = []
    for unit in units:
        if unit.cacheable:
            now.append((unit.jobs[0], True))
            later.extend((job, True) for job in unit.jobs[1:])
        else:
            now.extend((job, False) for job in unit.jobs)
    return now, later


_MAX_BATCH_REQUESTS = 100_000
_MAX_BATCH_BYTES = 200 * 1024 * 1024  # under the 256 MB limit, with room for JSON overhead


def _split_requests(requests: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
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


def _retryable(e: BaseException) -> bool:
    """429, 5xx (529 overloaded included), 408/409 and dropped connections; never 400/401/403."""
    if isinstance(e, anthropic.APIConnectionError):
        return True
    if isinstance(e, anthropic.APIStatusError):
        return e.status_code in (408, 409, 429) or e.status_code >= 500
    return False


def _retry_after(e: BaseException | None) -> float | None:
    response = getattr(e, "response", None)
    if response is None:
        return None
    headers = response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def _describe(e: BaseException | None) -> str:
    """'<status> <error type>: <message>' from an SDK error, or its class name."""
    if isinstance(e, anthropic.APIStatusError):
        body = e.body if isinstance(e.body, dict) else {}
        error = body.get("error") if isinstance(body.get("error"), dict) else {}
        kind = error.get("type", "error")
        message = str(error.get("message", "")).strip()
        return f"{e.status_code} {kind}" + (f": {message}" if message else "")
    return type(e).__name__ if e is not None else "error"


def _batch_error_retryable(result: Any) -> bool:
    kind = getattr(getattr(getattr(result, "error", None), "error", None), "type", "")
    return kind in ("api_error", "overloaded_error", "rate_limit_error", "timeout_error")


def _batch_error_text(result: Any) -> str:
    error = getattr(getattr(result, "error", None), "error", None)
    return f"{getattr(error, 'type', 'error')}: {getattr(error, 'message', '')}".strip(": ")


def resolve_api_key(secret_block: str = SECRET_BLOCK) -> str:
    """The key from ANTHROPIC_API_KEY, else from a Prefect Secret block; a ProviderError if neither.

    The Secret block is only looked up when the variable is unset: loading it needs the Prefect
    API (a temporary server starts if none is configured).
    """
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if key:
        return key
    try:
        from prefect.blocks.system import Secret

        value = Secret.load(secret_block).get()
    except Exception:  # noqa: BLE001 - any failure means "no usable block"
        value = None
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ProviderError(
        "no Anthropic API key: set ANTHROPIC_API_KEY, or store the key in a Prefect Secret block "
        f"named '{secret_block}' (prefect block create secret), or use --context structural")


def from_config(config: ContextConfig) -> AnthropicContextualizer:
    """The registry's entry point for `--context anthropic`."""
    return AnthropicContextualizer(config)
