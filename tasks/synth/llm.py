"""An evaluation set written by an LLM (`situate synth --generator anthropic|openai|ollama`): for
chunks sampled across the documents, one question a user of the corpus might ask that the chunk
answers, and the quote of the chunk that answers it. This is how the published codebase set was
made.

Everything paid goes through the contexts' engine (`situate.tasks.contexts.engine`): the same
provider wires, the same fencing of document and chunk (`fence_of`), the same spans for a long
document, the document block as the cached prefix shared by the questions of one document (its
first request alone, the rest after it), the one retry policy, and the same cost model for the
plan (`LLMCost`, with this prompt's requests). Each answer is kept in the disk cache the moment it
arrives (key: provider identity, prompt version, document and chunk hashes), so a killed run,
started again, pays only for what it never received.

An answer becomes a line of the set only when it holds: a question, and a quote found in its
chunk (`normalize_quote`, as `situate evaluate` matches it). Dropped and counted otherwise:
the model found nothing to ask (`answers_nothing`), the answer is no JSON of the schema
(`unreadable`), the quote is not in the chunk (`quote_not_in_chunk`), or the question copies the
chunk (a run of `COPY_WORDS` words of it: a query that would find its chunk by its own words).
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from situate.core.protocols import ContextCache
from situate.core.records import Chunk, Document, Usage, sha256
from situate.core.text import normalize_quote
from situate.tasks.contexts.base import ContextConfig, get_contextualizer
from situate.tasks.contexts.cost import Assumptions, Estimate, get_cost_models
from situate.tasks.contexts.engine.client import Reply
from situate.tasks.contexts.engine.estimate import LLMCost
from situate.tasks.contexts.engine.models import estimate_tokens
from situate.tasks.contexts.engine.planning import Job, Planner, Unit
from situate.tasks.contexts.engine.prompts import document_block, fence_of

# The prompt's text is part of the cache identity through its version.
SYNTH_PROMPT_VERSION = "synth-v1"
SYNTH_PROMPT = (
    "Here is a chunk of the document above, quoted the same way\n"
    "<chunk-{fence}>\n{chunk_content}\n</chunk-{fence}>\n\n"
    "Write one question that a user of this corpus might ask and that this chunk answers, and "
    "copy the shortest exact passage of the chunk (a few words to one sentence, verbatim) that "
    "answers it. Ask in your own words, as a user who has not read the chunk would: do not copy "
    "phrases of the chunk into the question. If the chunk answers nothing a user would ask "
    "(boilerplate, a license, imports only), give an empty question and an empty quote. Answer "
    "only with the JSON object."
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"question": {"type": "string"}, "quote": {"type": "string"}},
    "required": ["question", "quote"],
    "additionalProperties": False,
}
MAX_TOKENS = 400
ANSWER_TOKENS = 80  # expected length of an answer, for the plan
COPY_WORDS = 8  # a question sharing this many consecutive words with its chunk copies it
MIN_QUOTE_CHARS = 8
DROP_REASONS = ("answers_nothing", "unreadable", "quote_not_in_chunk", "copies_chunk")

_WORD = re.compile(r"\w+")


def synth_prompt(chunk_text: str, fence: str) -> str:
    return SYNTH_PROMPT.format(fence=fence, chunk_content=chunk_text)


@dataclass(frozen=True)
class SynthPlanner:
    """The engine's planner with this prompt: a document (or its span around the chunk) as
    the cached block, the question prompt after it; one unit per span, shared by the sampled
    chunks of that document. Same interface as `planning.Planner`, so `LLMCost` prices it."""

    base: Planner

    def plan(self, doc: Document, chunks: Sequence[Chunk], group: bool = False
             ) -> tuple[list[Unit], list[str]]:
        fence = fence_of(doc)
        spans, notes = self.base.spans(doc, list(chunks), False)
        units = []
        for text, _, _, wanted in spans:
            block = document_block(text, fence)
            jobs = [Job(doc, [c], block, synth_prompt(c.text, fence), MAX_TOKENS, SCHEMA)
                    for c in wanted]
            cacheable = len(jobs) >= 2 and estimate_tokens(block) >= self.base.info.min_cache_tokens
            units.append(Unit(jobs, cacheable))
        return units, notes


class SynthCost(LLMCost):
    """`LLMCost` over the synth requests: the answer is a short JSON object, `context_tokens` of
    the assumptions long (ANSWER_TOKENS by default)."""

    def _output_tokens(self, job: Job) -> int:
        return min(self.assumptions.context_tokens, job.max_tokens)


def sample_chunks(docs: Sequence[Document], n: int, seed: int) -> list[tuple[Document, Chunk]]:
    """Up to `n` chunks spread over the documents (stratified): documents in a seeded random
    order, one chunk each per round, each document's chunks in a seeded random order; returned
    in corpus order so that a document's questions share its cached block."""
    rng = random.Random(seed)
    pools = {i: rng.sample(list(d.chunks), len(d.chunks)) for i, d in enumerate(docs) if d.chunks}
    order = rng.sample(sorted(pools), len(pools))
    picked: list[tuple[int, Chunk]] = []
    while len(picked) < n and any(pools.values()):
        for i in order:
            if pools[i] and len(picked) < n:
                picked.append((i, pools[i].pop()))
    picked.sort(key=lambda p: (p[0], p[1].index))
    return [(docs[i], c) for i, c in picked]


def copies_chunk(question: str, chunk_text: str, words: int = COPY_WORDS) -> bool:
    """Whether `question` holds a run of `words` consecutive words of the chunk."""
    q = [w.lower() for w in _WORD.findall(question)]
    if len(q) < words:
        return False
    chunk = " " + " ".join(w.lower() for w in _WORD.findall(chunk_text)) + " "
    return any(" " + " ".join(q[i:i + words]) + " " in chunk for i in range(len(q) - words + 1))


def verdict(answer: str, chunk: Chunk) -> tuple[str, str, str]:
    """(reason, question, quote): reason "" when the answer makes a line of the set, else one of
    DROP_REASONS."""
    try:
        data = json.loads(answer)
    except (json.JSONDecodeError, TypeError):
        return "unreadable", "", ""
    if not isinstance(data, dict) or not isinstance(data.get("question"), str) \
            or not isinstance(data.get("quote"), str):
        return "unreadable", "", ""
    question, quote = " ".join(data["question"].split()), data["quote"].strip()
    if not question or not quote:
        return "answers_nothing", question, quote
    wanted = normalize_quote(quote)
    text = normalize_quote(chunk.text)
    if len(wanted) < MIN_QUOTE_CHARS or (wanted not in text
                                         and wanted.replace("-", "") not in text.replace("-", "")):
        return "quote_not_in_chunk", question, quote
    if copies_chunk(question, chunk.text):
        return "copies_chunk", question, quote
    return "", question, quote


@dataclass
class Generated:
    """What an LLM synth run did: lines written, answers dropped by reason, the bill."""

    requested: int = 0
    from_cache: int = 0
    queries: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    usage: Usage = field(default_factory=Usage)
    lines: list[dict[str, Any]] = field(default_factory=list)


def base_cost(config: ContextConfig, assumptions: Assumptions) -> LLMCost:
    """The provider's per-chunk cost model: its identity is the contextualizer's own, made
    without a key or a client (a plan needs neither)."""
    [model, *_] = get_cost_models(_per_chunk(config), assumptions)
    if not isinstance(model, LLMCost):
        raise TypeError(f"{config.name} is not an LLM provider")
    return model


def config_identity(config: ContextConfig, base: LLMCost | None = None) -> dict[str, str | int]:
    """Every input that changes an answer: the provider's own identity (provider, model, server,
    output cap, context window) with this prompt's version in place of the contexts' prompt."""
    model = base or base_cost(config, Assumptions())
    identity = dict(model.cache_identity() or {})
    identity.update(prompt=SYNTH_PROMPT_VERSION, max_tokens=MAX_TOKENS)
    return identity


def _per_chunk(config: ContextConfig) -> ContextConfig:
    from dataclasses import replace

    return replace(config, group_chunks=False, batch=False)


def answer_key(identity: dict[str, str | int], doc: Document, chunk: Chunk) -> str:
    return "synth:" + sha256(json.dumps({"identity": identity, "doc": doc.hash,
                                         "chunk": chunk.hash}, sort_keys=True))


def plan_cost(config: ContextConfig, sampled: Sequence[tuple[Document, Chunk]],
              cached: set[tuple[str, int]], assumptions: Assumptions,
              base: LLMCost | None = None) -> tuple[Estimate, SynthCost]:
    """The requests and the bill of asking for the sampled chunks not answered yet (`cached`:
    (doc id, chunk index) already in the cache), planned as the run would send them."""
    base = base or base_cost(config, assumptions)
    cost = SynthCost(base.name, base.options, False, False, base.concurrency, assumptions,
                     mode="per-chunk", flags="", rule=base.rule, discount=base.discount,
                     separator=base.separator)
    cost.planner = SynthPlanner(base.options.planner())  # type: ignore[assignment]
    total = Estimate()
    for doc, chunks in _by_document(sampled):
        wanted = [c for c in chunks if (doc.id, c.index) not in cached]
        if wanted:
            total.add(cost.estimate(doc, wanted))
    total.usage.cost_usd = cost.price(total.usage)
    return total, cost


def _by_document(sampled: Sequence[tuple[Document, Chunk]]) -> list[tuple[Document, list[Chunk]]]:
    out: dict[str, tuple[Document, list[Chunk]]] = {}
    for doc, chunk in sampled:
        out.setdefault(doc.id, (doc, []))[1].append(chunk)
    return list(out.values())


def generate(config: ContextConfig, sampled: Sequence[tuple[Document, Chunk]],
             cache: ContextCache) -> Generated:
    """Ask for the sampled chunks' questions (cached answers read, the rest asked, each kept as it
    arrives) and keep the ones that hold."""
    identity = config_identity(config)
    result = Generated(requested=len(sampled))
    answers: dict[tuple[str, int], str] = {}
    lock = threading.Lock()
    contextualizer = get_contextualizer(_per_chunk(config))
    try:
        client = contextualizer._api  # type: ignore[attr-defined]  # the engine's client
        planner = SynthPlanner(contextualizer.options.planner())  # type: ignore[attr-defined]

        def take(job: Job, reply: Reply) -> None:
            chunk = job.chunks[0]
            text = reply.text.strip()
            cache.put(answer_key(identity, job.doc, chunk), text)  # kept before the next is paid
            with lock:
                result.usage.add(reply.usage)
                answers[(job.doc.id, chunk.index)] = text

        for doc, chunks in _by_document(sampled):
            missing = []
            for c in chunks:
                hit = cache.get(answer_key(identity, doc, c))
                if hit is not None:
                    answers[(doc.id, c.index)] = hit
                    result.from_cache += 1
                else:
                    missing.append(c)
            if missing:
                units, _ = planner.plan(doc, missing)
                for unit in units:
                    client.run_unit(unit, take)
    finally:
        contextualizer.close()
    for doc, chunk in sampled:
        reason, question, quote = verdict(answers.get((doc.id, chunk.index), ""), chunk)
        if reason:
            result.dropped[reason] += 1
            continue
        result.lines.append({"query": question, "golden_quotes": [{"doc_id": doc.id,
                                                                   "quote": quote}],
                             "chunk": chunk.index})
    result.queries = len(result.lines)
    return result
