"""The cache-aware driver every contextualizer goes through, so no provider re-implements caching.

Every paid answer is kept the moment it arrives: the driver hands a paying provider a `Keep`
callable, which the provider calls with each context as soon as its answer is in, and which writes
it to the disk cache there and then. A run killed mid-document has paid for nothing it loses
beyond the answers still on the wire (at most the provider's concurrency).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from situate.core.protocols import ContextCache
from situate.core.records import Chunk, Document, Situated, Usage, sha256
from situate.tasks.contexts.base import ContextResult, Contextualizer


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


# Documents situated at once by a paid provider (its own concurrency bounds the requests).
DOCUMENTS_AT_ONCE = 16


def situate_documents(contextualizer: Contextualizer, docs: Sequence[Document],
                      cache: ContextCache | None,
                      report: Callable[[int], None] = lambda n: None) -> list[ContextResult]:
    """Contexts of every chunk of `docs`, in order; `report(n)` as documents are done.

    A provider that batches a whole corpus (Message Batches) gets them in one call; a paid one
    gets `DOCUMENTS_AT_ONCE` documents at once; a free one works through them in turn. When one
    document fails, the provider is told to stop (`abort`) and the others end quickly."""
    batched = situate_corpus_cached(contextualizer, docs, cache)
    if batched is not None:
        report(len(docs))
        return batched
    if contextualizer.cache_identity() is None or len(docs) == 1:
        results = []
        for d in docs:
            results.append(situate_document(contextualizer, d, cache))
            report(1)
        return results
    with ThreadPoolExecutor(max_workers=min(DOCUMENTS_AT_ONCE, len(docs)),
                            thread_name_prefix="situate") as pool:
        futures = [pool.submit(situate_document, contextualizer, d, cache) for d in docs]
        def reported(f: Future[ContextResult]) -> None:
            if not f.cancelled() and f.exception() is None:
                report(1)

        for f in futures:
            f.add_done_callback(reported)
        try:
            return [f.result() for f in futures]
        except BaseException:
            contextualizer.abort()
            for f in futures:
                f.cancel()
            raise
