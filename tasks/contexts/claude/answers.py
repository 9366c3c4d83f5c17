"""Reading Claude's answers for one document: the contexts they give, the bill they carry (usage
as reported by the service, priced live or at batch rates), and the notes a user should see.
Each context is handed to the driver's `keep` as its answer is read, so it is on disk before the
worker that received it sends anything else."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from situate.core.records import Chunk, Situated, Usage
from situate.tasks.contexts.base import ContextResult, Keep
from situate.tasks.contexts.claude.planning import Job
from situate.tasks.contexts.claude.pricing import Pricing, price
from situate.tasks.contexts.claude.prompts import parse_group_answer


@dataclass
class Outcome:
    """The answers gathered for one document: contexts by chunk index, the bill, the notes.

    `take` may be called from several workers at once (the requests of one document run
    concurrently); `keep`, when given, receives each context as its answer is taken.
    """

    contexts: dict[int, str] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)
    keep: Keep | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def take(self, job: Job, message: Any, pricing: Pricing, batch: bool) -> None:
        """Record one answer: its bill, and the contexts it gives, kept at once."""
        u = message.usage
        bill = Usage(requests=1, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                     cache_creation_input_tokens=u.cache_creation_input_tokens or 0,
                     cache_read_input_tokens=u.cache_read_input_tokens or 0)
        bill.cost_usd = price(bill, pricing, batch)
        text = "".join(getattr(b, "text", "") for b in message.content).strip()
        given: dict[int, str] = {}
        note = ""
        if job.schema is not None:
            given = parse_group_answer(text, [c.index for c in job.chunks])
        elif not text:  # left without context (not cached), so a re-run asks again
            note = (f"document {job.doc.id}, chunk {job.chunks[0].index}: "
                    "the model answered with no text")
        else:
            given = {job.chunks[0].index: text}
            if message.stop_reason == "max_tokens":
                note = (f"document {job.doc.id}, chunk {job.chunks[0].index}: "
                        f"context cut at {job.max_tokens} tokens")
        if self.keep is not None:
            by_index = {c.index: c for c in job.chunks}
            for index, context in given.items():
                self.keep(job.doc, by_index[index], context)
        with self._lock:
            self.usage.add(bill)
            self.contexts.update(given)
            if note:
                self.notes.append(note)

    def result(self, chunks: Sequence[Chunk], unpriced_model: str | None) -> ContextResult:
        """One Situated per chunk, in order (no context where no answer gave one); a note when
        `unpriced_model` names a model whose price is unknown."""
        situated = [Situated(c, self.contexts[c.index], "generated")
                    if c.index in self.contexts else Situated(c, "", "none") for c in chunks]
        self.usage.contexts_generated = sum(1 for s in situated if s.source == "generated")
        if unpriced_model is not None:
            self.notes.append(f"no price known for model {unpriced_model}: cost shown as 0")
        return ContextResult(situated, self.usage, self.notes)
