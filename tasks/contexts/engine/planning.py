"""Which requests situate a document's chunks, for any provider: one per chunk or one per group,
the document whole or in spans when it exceeds the model's context window, grouped into units
that share (and may cache) one document prefix. What a request looks like on the wire is the
provider's (`Wire.send`); what it asks is decided here once, so the run and its dry run agree."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from situate.core.errors import ProviderError
from situate.core.records import Chunk, Document, sha256
from situate.tasks.contexts.engine.models import ModelInfo, estimate_tokens, lookup
from situate.tasks.contexts.engine.prompts import (
    GROUP_PROMPT_VERSION,
    PROMPT_VERSION,
    chunk_prompt,
    document_block,
    fence_of,
    group_prompt,
    group_schema,
    mark_chunks,
)

log = logging.getLogger("situate.contexts")

# (text, offset in the document, chunks located in it, requested chunks assigned to it)
Span = tuple[str, int, list[Chunk], list[Chunk]]


@dataclass
class Job:
    """One request: the document block (the cacheable prefix) and what follows it."""

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

    @property
    def prefix_key(self) -> str:
        """Names the document prefix this request shares with the others of its document (OpenAI's
        `prompt_cache_key`): a hash of the document, never its id or text."""
        return f"situate-{sha256(self.doc.hash)[:32]}"


@dataclass
class Unit:
    """Jobs that share one document prefix: cached (first alone, then the rest) or not."""

    jobs: list[Job]
    cacheable: bool


@dataclass(frozen=True)
class Catalog:
    """What a provider knows of its models: its name (in the cache identity), its default model,
    the facts of the models it knows (by prefix) and what to assume of one it does not."""

    provider: str
    default_model: str
    models: dict[str, ModelInfo]
    unknown: ModelInfo

    def info(self, model: str) -> ModelInfo | None:
        return lookup(self.models, model)


@dataclass(frozen=True)
class Options:
    """What a `ContextConfig` asks of a provider, worked out once: the contextualizer sends with
    it and the cost estimate plans with it, so both see the same requests and the same cache
    identity. Needs no key and makes no client."""

    provider: str
    model: str
    info: ModelInfo
    priced: bool  # False: the model is unknown and no price was given, its price taken as 0
    max_tokens: int  # output cap of a per-chunk request
    context_tokens: int  # output budget per chunk of a group request
    group_size: int
    server: str = ""  # the server's address when it decides which model answers (not Anthropic)

    @classmethod
    def from_config(cls, catalog: Catalog, model: str, extra: dict[str, Any],
                    server: str = "") -> Options:
        model = model or catalog.default_model
        known = catalog.info(model)
        info = known or catalog.unknown
        if extra.get("context_window"):
            info = replace(info, context_window=int(extra["context_window"]))
        context_tokens = int(extra.get("context_max_tokens", 250))
        return cls(catalog.provider, model, info, known is not None,
                   int(extra.get("max_tokens", 1024)), context_tokens,
                   max(1, min(int(extra.get("group_size", 32)),
                              (info.max_output - 100) // context_tokens)), server)

    def planner(self) -> Planner:
        return Planner(self.model, self.info, self.max_tokens, self.context_tokens,
                       self.group_size)

    def identity(self, group: bool) -> dict[str, str | int]:
        """Every input that changes the generated text: the provider, the model (and the server
        that decides what the name means, for a self-hosted one), the prompt (its version), the
        output limits, the context window (it decides how a long document is cut in spans) and, when
        grouping, how chunks are grouped. Not concurrency, batch or live, nor the key."""
        identity: dict[str, str | int] = {
            "provider": self.provider, "model": self.model,
            "prompt": GROUP_PROMPT_VERSION if group else PROMPT_VERSION,
            "max_tokens": self.max_tokens, "context_window": self.info.context_window,
        }
        if self.server:
            identity["server"] = self.server
        if group:
            identity.update(group_size=self.group_size, context_max_tokens=self.context_tokens)
        return identity


@dataclass(frozen=True)
class Planner:
    """Plans the requests of one model and one set of output limits; shared by every document."""

    model: str
    info: ModelInfo
    max_tokens: int
    context_tokens: int
    group_size: int

    def plan(self, doc: Document, chunks: Sequence[Chunk], group: bool
             ) -> tuple[list[Unit], list[str]]:
        """The requests for `chunks` of `doc`, grouped by the document prefix they share."""
        units: list[Unit] = []
        fence = fence_of(doc)
        spans, notes = self.spans(doc, chunks, group)
        for text, offset, members, wanted in spans:
            if group:
                marks = []
                stray: list[Chunk] = []
                for c in members:
                    start = locate(doc, c) - offset
                    if 0 <= start and start + len(c.text) <= len(text):
                        marks.append((c.index, start, start + len(c.text)))
                    elif c in wanted:
                        stray.append(c)
                doc_block = document_block(mark_chunks(text, marks, fence), fence)
                groups = [wanted[i:i + self.group_size]
                          for i in range(0, len(wanted), self.group_size)]
                jobs = [self._group_job(doc, doc_block, fence, g, stray,
                                        enumerate_ids=len(groups) == 1) for g in groups]
            else:
                doc_block = document_block(text, fence)
                jobs = [Job(doc, [c], doc_block, chunk_prompt(c.text, fence), self.max_tokens)
                        for c in wanted]
            # Caching pays from the second request on; under the floor it is not even possible.
            cacheable = (len(jobs) >= 2
                         and estimate_tokens(doc_block) >= self.info.min_cache_tokens)
            units.append(Unit(jobs, cacheable))
        return units, notes

    def _group_job(self, doc: Document, doc_block: str, fence: str, chunks: Sequence[Chunk],
                   stray: Sequence[Chunk], enumerate_ids: bool) -> Job:
        ids = [c.index for c in chunks]
        unmarked = [(c.index, c.text) for c in stray if c.index in set(ids)]
        suffix = group_prompt(ids, fence, unmarked)
        max_tokens = min(self.info.max_output, 100 + self.context_tokens * len(chunks))
        return Job(doc, list(chunks), doc_block, suffix, max_tokens,
                   group_schema(ids if enumerate_ids else None))

    def spans(self, doc: Document, chunks: Sequence[Chunk], group: bool = False
              ) -> tuple[list[Span], list[str]]:
        """The document, or spans of it when it exceeds the context window.

        Returns (text, offset, chunks located in it, requested chunks assigned to it). Spans are
        fixed and half-overlapping, so every chunk up to half a span long lies whole in one and
        the chunks of a span still share (and cache) one prefix.
        """
        wanted = list(chunks)
        longest = max((estimate_tokens(c.text) for c in wanted), default=0)
        # The answer's room: a group's answer holds a context per chunk of the group.
        answer = (min(self.info.max_output, 100 + self.context_tokens * self.group_size)
                  if group else self.max_tokens)
        budget = self.info.context_window - answer - longest - 600
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
            start = locate(doc, c)
            assigned[min(max(start, 0) // stride, count - 1)].append(c)
        spans = []
        for i, members in enumerate(assigned):
            if not members:
                continue
            lo = i * stride
            text = doc.text[lo:lo + size]
            located = [c for c in doc.chunks if lo <= locate(doc, c) < lo + size]
            spans.append((text, lo, located, members))
        note = (f"document {doc.id} (~{total} tokens) exceeds the {self.info.context_window}-token "
                f"context window of {self.model}: its chunks were situated within {len(spans)} "
                f"span(s) of ~{budget} tokens of the document around them")
        log.warning(note)
        return spans, [note]


def locate(doc: Document, chunk: Chunk) -> int:
    """Where `chunk` starts in `doc`: its recorded start when it holds, else the first match."""
    if chunk.start >= 0 and doc.text.startswith(chunk.text, chunk.start):
        return chunk.start
    return doc.text.find(chunk.text)
