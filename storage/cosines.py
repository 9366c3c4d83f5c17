"""Cosines as Milvus Lite computes them, so that a dense score computed here from a row's stored
vector is the one Lite would give it: a hybrid search on Milvus Lite scores the other leg's
candidates, and ranks its dense hits, from their vectors (`situate.storage.milvus`), whether
those were read from the collection or kept beside it in the lexical index
(`situate.storage.lexical`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def float32(values: Any) -> np.ndarray:
    """`values` as a float32 array; a list of Python floats (a vector as pymilvus gives it) by
    way of float64, which NumPy reads on a fast path (into float32 it converts them one by one,
    a fifth slower), rounding each double to the same nearest float32."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float32, copy=False)
    converted: np.ndarray = np.asarray(values, dtype=np.float64).astype(np.float32)
    return converted


def unit(vectors: np.ndarray) -> np.ndarray:
    """Each row L2-normalized as Milvus Lite normalizes (its `faiss_hnsw._l2_normalize`): a zero
    row left as it is."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalized: np.ndarray = vectors / np.where(norms == 0, 1.0, norms)
    return normalized


def cosines(query: Sequence[float], vectors: Sequence[Sequence[float]] | np.ndarray) -> list[float]:
    """The cosine of `query` with each of `vectors` as Milvus Lite reports it: both normalized
    in float32 as Lite normalizes them, their dot product in float32, returned as the score
    `1 - (1 - dot)` in doubles, sent as a float32 (equal to Lite's within a float32's last
    bits: its HNSW kernel may sum the dot product in another order).

    Each vector's cosine is the same to the bit whatever other vectors come with it: every
    sum runs along one row (NumPy's pairwise sum of that row), where a matrix product's
    kernel may change with the number of rows."""
    if not len(vectors):
        return []
    q = unit(float32([query]))[0]
    dots = np.add.reduce(unit(float32(vectors)) * q, axis=1)
    return [float(np.float32(1.0 - (1.0 - float(d)))) for d in dots]
