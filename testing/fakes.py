"""A deterministic bag-of-words embedding for store and flow tests that are not about quality: a
plugin's tests use it to write and search a store without a model."""

from __future__ import annotations

import hashlib
import math
import re


class HashEmbedding:
    """A deterministic bag-of-words embedding: same words, close vectors; no model, no network.

    Good enough to check that search returns the chunk that shares a query's words, which is what
    store and flow tests need; quality tests use the real MiniLM model.
    """

    dim = 64

    def _one(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
            v[h % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    def encode_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def encode_queries(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]


class CountingEmbedding(HashEmbedding):
    """The hash embedding, counting the document texts it is asked to embed."""

    def __init__(self) -> None:
        self.texts = 0

    def encode_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return super().encode_documents(texts)
