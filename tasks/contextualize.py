"""Contextualizers: given a document and some of its chunks, write a short context for each chunk.

One small interface (`Contextualizer.situate`), a registry by name (`CONTEXTUALIZERS`), the cache
key, and a cache-aware driver (`situate_document`) that every provider goes through, so no provider
re-implements caching. The providers live beside it: `structural.py`, `claude/`.

Every paid answer is kept the moment it arrives: the driver hands a paying provider a `Keep`
callable, which the provider calls with each context as soon as its answer is in, and which writes
it to the disk cache there and then. A run killed mid-document has paid for nothing it loses
beyond the answers still on the wire (at most the provider's concurrency).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from situate.core.protocols import ContextCache
from situate.core.records import Chunk, Document, Situated, Usage, sha256
from situate.core.registry import Registry


@dataclass(frozen=True)
class ContextConfig:
    """Everything a contextualizer may be configured with; built by the flow from settings."""

    name: str = "structural"
    model: str = ""
    concurrency: int = 8
    max_attempts: int = 8
    group_chunks: bool = False
    batch: bool = False
    # Where a provider may persist its own state (a batch id); the cache dir by default.
    state_dir: str = ""
    extra: dict = field(default_factory=dict)


Keep = Callable[[Document, Chunk, str], None]
"""Persists one generated context of (document, chunk) as its answer arrives; thread-safe."""


@dataclass
class ContextResult:
    """What situating one document returns: one Situated per chunk, in chunk order, and the bill."""

    situated: list[Situated]
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)


class Contextualizer:
    """Base of all contextualizers.

    `situate` is the one method a provider must implement. `cache_identity` names everything,
    besides the document and chunk, that changes the output (provider, model, prompt version,
    max_tokens, ...); None means the provider is free and deterministic and its output is not
    worth caching.

    A provider with an identity is given `keep` by the driver and calls `keep(doc, chunk,
    context)` for each context the moment its answer arrives (from any thread), before it
    starts the request that takes that answer's place; what it returns without having kept is
    kept by the driver when `situate` returns. A free provider (no identity) is never given one.
    """

    name: str = "base"
    generates: bool = True  # False: chunks are indexed as they are (no context to count)

    def situate(self, doc: Document, chunks: Sequence[Chunk],
                keep: Keep | None = None) -> ContextResult:
        raise NotImplementedError

    def cache_identity(self) -> dict[str, str | int] | None:
        return None

    def situate_corpus(
        self, items: Sequence[tuple[Document, Sequence[Chunk]]], keep: Keep | None = None
    ) -> list[ContextResult] | None:
        """Situate many documents in one go (a Message Batch); None when not supported.

        Providers that only work per document leave this alone and the flow fans out per document.
        `keep` as for `situate`: called per context as each result is read.
        """
        return None

    def abort(self) -> None:
        """Another document failed and the run stops: end the work still going on quickly (every
        later call may fail at once). Called by the flow before it waits for its tasks to end."""

    def close(self) -> None:
        """Release clients; called once by the flow at the end of a run."""


class NoContext(Contextualizer):
    """Index chunks as they are: the baseline of every comparison."""

    name = "none"
    generates = False

    def situate(self, doc: Document, chunks: Sequence[Chunk],
                keep: Keep | None = None) -> ContextResult:
        return ContextResult([Situated(c, "", "none") for c in chunks])


# --- registry and the cache-aware driver ---------------------------------------------------------

CONTEXTUALIZERS: Registry[Callable[[ContextConfig], Contextualizer]] = Registry("context provider")
CONTEXTUALIZERS.register("none", lambda config: NoContext())
CONTEXTUALIZERS.register("structural", "situate.tasks.structural:from_config")
# Imported on demand so that the offline default never imports the anthropic SDK.
CONTEXTUALIZERS.register("anthropic", "situate.tasks.claude:from_config")


def get_contextualizer(config: ContextConfig) -> Contextualizer:
    """The contextualizer named by `config.name`; an InputError lists the known names."""
    return CONTEXTUALIZERS.get(config.name)(config)


def context_key(identity: dict[str, str | int], doc_hash: str, chunk_hash: str) -> str:
    """The cache key of one context: a hash of the provider's identity (every input that changes
    the text: provider, model, prompt version, max_tokens, ...), the whole document and the chunk.
    Change any of them and the context is generated again; change none and a re-run pays nothing.
    Never includes credentials."""
    return sha256(json.dumps({"identity": identity, "doc": doc_hash, "chunk": chunk_hash},
                             sort_keys=True))


def situate_document(
    contextualizer: Contextualizer, doc: Document, cache: ContextCache | None
) -> ContextResult:
    """Contexts for all chunks of `doc`: cached ones read, the rest generated, each cached as its
    answer arrives (see `Keep`)."""
    identity = contextualizer.cache_identity()
    if identity is None or cache is None:
        return contextualizer.situate(doc, doc.chunks)
    found, missing = _cached(identity, doc, cache)
    result = ContextResult([], Usage())
    if missing:
        keeper = _Keeper(identity, cache)
        result = contextualizer.situate(doc, missing, keep=keeper)
        keeper.rest(doc, result.situated)
        found.update((s.chunk.index, s) for s in result.situated)
    result.usage.contexts_from_cache += sum(1 for s in found.values() if s.source == "cache")
    result.situated = [found[c.index] for c in doc.chunks if c.index in found]
    return result


class _Keeper:
    """The `Keep` the driver hands a provider: writes each context to the cache at once, and
    remembers what it wrote so that nothing is written twice."""

    def __init__(self, identity: dict[str, str | int], cache: ContextCache) -> None:
        self.identity = identity
        self.cache = cache
        self._kept: set[str] = set()

    def __call__(self, doc: Document, chunk: Chunk, context: str) -> None:
        key = _key(self.identity, doc, chunk)
        self.cache.put(key, context)
        self._kept.add(key)

    def rest(self, doc: Document, situated: Sequence[Situated]) -> None:
        """Cache the generated contexts the provider returned without keeping them itself."""
        for s in situated:
            if s.source == "generated" and _key(self.identity, doc, s.chunk) not in self._kept:
                self(doc, s.chunk, s.context)


def _cached(identity: dict[str, str | int] | None, doc: Document, cache: ContextCache | None
            ) -> tuple[dict[int, Situated], list[Chunk]]:
    """The chunks of `doc` found in the cache (by index) and the ones still missing, in order."""
    found: dict[int, Situated] = {}
    missing: list[Chunk] = []
    for chunk in doc.chunks:
        hit = (cache.get(_key(identity, doc, chunk))
               if identity is not None and cache is not None else None)
        if hit is None:
            missing.append(chunk)
        else:
            found[chunk.index] = Situated(chunk, hit, "cache")
    return found, missing


def cached_split(identity: dict[str, str | int] | None, doc: Document,
                 cache: ContextCache | None) -> tuple[int, list[Chunk]]:
    """How many chunks of `doc` the cache answers, and the ones a run would still have to
    situate, as `situate_document` splits them (a cost estimate reads nothing more)."""
    found, missing = _cached(identity, doc, cache)
    return len(found), missing


def _key(identity: dict[str, str | int], doc: Document, chunk: Chunk) -> str:
    return context_key(identity, doc.hash, chunk.hash)


def situate_corpus_cached(
    contextualizer: Contextualizer, docs: Sequence[Document], cache: ContextCache | None
) -> list[ContextResult] | None:
    """Like `situate_document` over all `docs` at once, for providers that batch a whole corpus.

    Cached chunks are read; the missing ones go to `situate_corpus` in one call, which keeps each
    context as its result is read. None when the provider does not batch: the flow then maps
    `situate_document`.
    """
    if contextualizer.situate_corpus([]) is None:  # asks "do you batch?" without any work
        return None
    identity = contextualizer.cache_identity()
    found: list[dict[int, Situated]] = []
    items: list[tuple[Document, list[Chunk]]] = []
    for doc in docs:
        hits, missing = _cached(identity, doc, cache)
        found.append(hits)
        items.append((doc, missing))
    todo = [n for n, (_, missing) in enumerate(items) if missing]
    keeper = _Keeper(identity, cache) if identity is not None and cache is not None else None
    generated = ((contextualizer.situate_corpus([items[n] for n in todo], keep=keeper) or [])
                 if todo else [])
    results = [ContextResult([], Usage()) for _ in docs]
    for n, result in zip(todo, generated, strict=True):
        if keeper is not None:
            keeper.rest(docs[n], result.situated)
        found[n].update((s.chunk.index, s) for s in result.situated)
        results[n] = result
    for doc, hits, result in zip(docs, found, results, strict=True):
        result.usage.contexts_from_cache += sum(1 for s in hits.values() if s.source == "cache")
        result.situated = [hits[c.index] for c in doc.chunks if c.index in hits]
    return results


# --- what a run would cost, before it is made (`situate ingest --dry-run`) ----------------------

@dataclass(frozen=True)
class Assumptions:
    """What a cost estimate cannot know, assumed. The service's tokenizer: `chars_per_token` (None:
    the provider's own figure). The length of a context: `context_tokens` (the contextual-retrieval
    guide's contexts run 50-100 tokens; capped by the request's `max_tokens`). The time of one
    live request: `request_seconds` plus its output at `output_tokens_per_second`. The time of one
    round of Message Batches: `batch_round_seconds` (most end within the hour; 24 h at most)."""

    chars_per_token: float | None = None
    context_tokens: int = 100
    request_seconds: float = 0.5
    output_tokens_per_second: float = 100.0
    batch_round_seconds: float = 3600.0


@dataclass
class Estimate:
    """The expected bill of situating some chunks: `usage` as the service would report it
    (requests, tokens; `cost_usd` priced by the cost model), and what the time estimate needs."""

    usage: Usage = field(default_factory=Usage)
    busy_seconds: float = 0.0  # the requests' expected latencies, summed
    longest_seconds: float = 0.0  # the longest one
    waits: int = 0  # units whose first request must end before the others are sent

    def add(self, other: Estimate) -> None:
        self.usage.add(other.usage)
        self.busy_seconds += other.busy_seconds
        self.longest_seconds = max(self.longest_seconds, other.longest_seconds)
        self.waits += other.waits


class CostModel:
    """The cost side of a contextualizer in one mode: its name and cache identity (which stored
    rows and cached contexts a run would reuse, exactly as the contextualizer's own) and the
    bill of situating chunks, worked out without a key, a client or a request.

    This base is a free provider's: no request, no token, no time."""

    mode = "free"
    flags = ""  # the command-line flags that select this mode
    batch = False
    chars_per_token: float | None = None  # the tokenizer assumed; None: no tokens to count

    def __init__(self, contextualizer: Contextualizer) -> None:
        self.name = contextualizer.name
        self.generates = contextualizer.generates
        self._identity = contextualizer.cache_identity()

    def cache_identity(self) -> dict[str, str | int] | None:
        return self._identity

    def estimate(self, doc: Document, chunks: Sequence[Chunk]) -> Estimate:
        return Estimate(Usage(contexts_generated=len(chunks) if self.generates else 0))

    def price(self, usage: Usage) -> float:
        return 0.0

    def seconds(self, total: Estimate, waves: int) -> float:
        """Expected time of the context requests; `waves` is how many rounds of Message Batches
        windows run one after the other."""
        return 0.0


# Paid providers' cost models, imported on demand like the providers: name -> (config,
# assumptions) -> [the configured mode, then the other modes].
COST_MODELS: Registry[Callable[[ContextConfig, Assumptions], list[CostModel]]] = Registry(
    "context provider")
COST_MODELS.register("anthropic", "situate.tasks.claude:cost_models")


def get_cost_models(config: ContextConfig, assumptions: Assumptions) -> list[CostModel]:
    """The cost models of `config`'s provider: its configured mode first, then the others it
    offers (a free provider has one). An InputError lists the known names."""
    CONTEXTUALIZERS.check(config.name)
    if config.name in COST_MODELS:
        return COST_MODELS.get(config.name)(config, assumptions)
    return [CostModel(get_contextualizer(config))]
