"""Rerankers: one small interface (`Reranker.rerank`) and one registry of names (`RERANKERS`), so
a cross-encoder of any provider reorders a hybrid search's top candidates the same way.

A reranker reads the query and each candidate together, so it orders candidates better than
either embedding or BM25 scores can. Providers register here by "module:attr", imported on first
use, so that the cohere SDK is imported only when its reranker is asked for: `cohere[:MODEL]`
(tasks/rerankers/cohere.py) and `st:NAME_OR_PATH`, any sentence-transformers CrossEncoder run on this
machine (tasks/rerankers/st.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from situate.core.records import Hit
from situate.core.registry import Registry
from situate.core.settings import default

DEFAULT_RERANKER: str = default("reranker")  # SITUATE_RERANKER's default


class Reranker:
    """Base of all rerankers; safe to share between threads."""

    name: str = "base"
    model: str = ""

    def rerank(self, query: str, hits: Sequence[Hit], top_n: int) -> list[Hit]:
        """The `top_n` most relevant of `hits`, best first, each `score` replaced by the
        reranker's relevance. An InputError for `top_n` < 1; [] for no hits."""
        raise NotImplementedError


# name -> constructor(model, **options) -> Reranker; "" model means the provider's default.
# situate's own are registered in the `situate.rerankers` entry-point group (pyproject.toml).
RERANKERS: Registry[Callable[..., Reranker]] = Registry("reranker", hint=" (optionally name:model)",
                                                        group="situate.rerankers")


def get_reranker(spec: str = DEFAULT_RERANKER, **options: object) -> Reranker:
    """The reranker `name` or `name:model`; an InputError lists the known names, a ProviderError
    says what is missing (package, key)."""
    name, _, model = spec.strip().partition(":")
    return RERANKERS.get(name.lower())(model.strip(), **options)


def check_reranker(spec: str = DEFAULT_RERANKER) -> None:
    """Whether `spec` can rerank here (its key, or its model's directory), loading nothing."""
    get_reranker(spec)
