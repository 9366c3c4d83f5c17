"""Reading a provider's answers for one document: the contexts they give, the bill they carry
(usage as the service reported it, priced by the wire), and the notes a user should see. Each
context is handed to the driver's `keep` as its answer is read, so it is on disk before the
worker that received it sends anything else."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from situate.core.records import Chunk, Situated, Usage
from situate.tasks.contexts.base import ContextResult, Keep
from situate.tasks.contexts.engine.planning import Job
from situate.tasks.contexts.engine.prompts import parse_group_answer

if TYPE_CHECKING:
    from situate.tasks.contexts.engine.client import Reply


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

    def take(self, job: Job, reply: Reply) -> None:
        """Record one answer: its bill, and the contexts it gives, kept at once."""
        text = reply.text.strip()
        given: dict[int, str] = {}
        note = ""
        if job.schema is not None:
            given = parse_group_answer(text, [c.index for c in job.chunks])
        elif not text:  # left without context (not cached), so a re-run asks again
            note = (f"document {job.doc.id}, chunk {job.chunks[0].index}: "
                    "the model answered with no text")
        else:
            given = {job.chunks[0].index: text}
            if reply.cut:
                note = (f"document {job.doc.id}, chunk {job.chunks[0].index}: "
                        f"context cut at {job.max_tokens} tokens")
        if self.keep is not None:
            by_index = {c.index: c for c in job.chunks}
            for index, context in given.items():
                self.keep(job.doc, by_index[index], context)
        with self._lock:
            self.usage.add(reply.usage)
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
