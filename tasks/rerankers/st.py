"""The local cross-encoder reranker (`st:NAME_OR_PATH` in `situate.tasks.rerankers.base.RERANKERS`): any
sentence-transformers `CrossEncoder`, by Hub name or saved directory, run on this machine's CPU.

Like Cohere's, it reads the query with each hybrid candidate and orders them by its relevance
score; unlike Cohere's, it costs nothing and needs no network. The model is found as the `st:`
embedder's are (tasks/embedders/sentence.py: a local directory never touches the network, a Hub name
comes from the local cache when it is there) and loaded by the reranker on its first query, so
that checking a run's options loads nothing. Calls to one model are serialized: torch already
uses every core for one batch of pairs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from situate.core.errors import InputError, ProviderError
from situate.core.records import Hit
from situate.tasks.embedders.sentence import load_cross_encoder, resolve_model
from situate.tasks.rerankers.base import Reranker

log = logging.getLogger("situate.rerank")

def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def _load(model: str) -> Any:
    start = time.perf_counter()
    try:
        encoder = load_cross_encoder(model)
    except Exception as e:  # OSError, ValueError...: the library's message says what is wrong
        raise ProviderError(f"reranker 'st' could not load {model}: {type(e).__name__}: "
                            f"{_one_line(str(e))}") from None
    log.info(f"cross-encoder {model} loaded in {time.perf_counter() - start:.1f} s")
    return encoder


class CrossEncoderReranker(Reranker):
    """A sentence-transformers CrossEncoder on the CPU; safe to share between threads."""

    name = "st"

    def __init__(self, model: str, *, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = max(1, batch_size)
        self._encoder: Any = None
        self._lock = threading.Lock()  # one load, and one batch of pairs at a time

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(model={self.model!r})"

    def rerank(self, query: str, hits: Sequence[Hit], top_n: int) -> list[Hit]:
        """The `top_n` most relevant hits, best first, each scored by the cross-encoder.

        The document read for a hit is its text and then its context, the order they were
        embedded in: a cross-encoder reads a few hundred word pieces of query and document
        together, and what it cuts off should be the context, not the chunk.
        """
        if top_n < 1:
            raise InputError(f"rerank top_n must be at least 1, got {top_n}")
        if not hits:
            return []
        pairs = [(query, f"{h.text}\n\n{h.context}" if h.context else h.text) for h in hits]
        with self._lock:
            if self._encoder is None:
                self._encoder = _load(self.model)
            try:
                raw = self._encoder.predict(pairs, batch_size=self.batch_size, show_progress_bar=False,
                                      convert_to_numpy=True)
            except Exception as e:
                raise ProviderError(f"reranker 'st' ({self.model}) failed: {type(e).__name__}: "
                                    f"{_one_line(str(e))}") from None
        scores = [float(s) for s in np.asarray(raw, dtype=np.float64).reshape(-1)]
        if len(scores) != len(hits) or not all(math.isfinite(s) for s in scores):
            raise ProviderError(f"reranker 'st' ({self.model}) gave {len(scores)} scores (some not "
                                f"finite?) for {len(hits)} candidates: use a model with one output "
                                "(num_labels=1)")
        order = sorted(range(len(hits)), key=lambda i: -scores[i])  # stable among equal scores
        return [replace(hits[i], score=scores[i]) for i in order[:top_n]]


def from_spec(model: str = "", *, batch_size: int = 32) -> CrossEncoderReranker:
    """The reranker `st:MODEL`, checked (a saved directory, or a Hub name that can be had) but
    not loaded: the first query loads it."""
    return CrossEncoderReranker(resolve_model(model, "reranker"), batch_size=batch_size)
