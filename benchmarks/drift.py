"""A drifted copy of a pre-chunked corpus: the state a collection was first ingested from before the
corpus moved on (issue 21's scenario).

Seeded and deterministic: a third of the documents edited (in each chunk, about a fifth of the
lines dropped and a line of words from other documents added), 5 documents missing (added by the
update), and 8 stray documents (pieces of other documents under new ids, which the update prunes).
Ingesting the drifted copy, then the true corpus with `--prune`, leaves a collection whose rows
equal a fresh ingest's of the true corpus; its BM25 statistics are another matter.
"""

from __future__ import annotations

import copy
import random
from typing import Any

EDITED_SHARE = 3  # every third document
MISSING = 5
STRAY = 8


def drifted(corpus: list[dict[str, Any]], seed: int = 21) -> tuple[list[dict[str, Any]],
                                                                   dict[str, list[str]]]:
    """The drifted copy of `corpus` (its `codebase_chunks.json` form) and which ids got what."""
    rng = random.Random(seed)
    words = sorted({w for d in corpus for c in d["chunks"] for w in c["content"].split()
                    if w.isidentifier()})
    data = copy.deepcopy(corpus)
    edited = [d for i, d in enumerate(data) if i % EDITED_SHARE == 0]
    for doc in edited:
        for chunk in doc["chunks"]:
            lines = chunk["content"].splitlines(keepends=True)
            kept = [line for line in lines if rng.random() >= 0.2] or lines[:1]
            chunk["content"] = "".join(kept) + " ".join(rng.sample(words, 8)) + "\n"
        doc["content"] = "".join(c["content"] for c in doc["chunks"])
    untouched = [d["doc_id"] for i, d in enumerate(data) if i % EDITED_SHARE]
    missing = rng.sample(untouched, MISSING)
    data = [d for d in data if d["doc_id"] not in missing]
    strays = []
    for k in range(STRAY):
        sources = rng.sample(corpus, 2)
        chunks = [dict(c) for s in sources for c in s["chunks"][:2]]
        doc_id = f"stray_{k}"
        for i, c in enumerate(chunks):
            c.update(chunk_id=f"{doc_id}_chunk_{i}", original_index=i)
        strays.append({"doc_id": doc_id, "original_uuid": doc_id,
                       "content": "".join(c["content"] for c in chunks), "chunks": chunks})
    data += strays
    return data, {"edited": sorted(d["doc_id"] for d in edited), "missing": sorted(missing),
                  "stray": [s["doc_id"] for s in strays]}


def edit_text(text: str, rng: random.Random, words: list[str]) -> str:
    """A text as an editor leaves it: about a fifth of its lines dropped, a line of 8 words
    (drawn from `words`) added."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if rng.random() >= 0.2] or lines[:1]
    return "".join(kept) + " ".join(rng.sample(words, min(8, len(words)))) + "\n"


def pick_share(sizes: dict[str, int], share: float, seed: int) -> list[str]:
    """Documents (by id) whose rows (`sizes`: id -> chunks) add up to about `share` of all rows:
    taken in a seeded random order while they fit; the smallest document when none fits."""
    rng = random.Random(seed)
    order = sorted(sizes)
    rng.shuffle(order)
    budget = share * sum(sizes.values())
    picked, total = [], 0
    for doc_id in order:
        if total + sizes[doc_id] <= budget:
            picked.append(doc_id)
            total += sizes[doc_id]
    return sorted(picked) or [min(order, key=lambda d: (sizes[d], d))]


def drifted_share(corpus: list[dict[str, Any]], share: float,
                  seed: int = 21) -> tuple[list[dict[str, Any]], list[str]]:
    """A copy of a pre-chunked corpus in which documents holding about `share` of the chunks
    are edited (`edit_text` on each chunk): what the collection held before an update that
    rewrites that share of it. Returns the copy and the edited ids."""
    rng = random.Random(seed)
    words = sorted({w for d in corpus for c in d["chunks"] for w in c["content"].split()
                    if w.isidentifier()})
    edited = pick_share({d["doc_id"]: len(d["chunks"]) for d in corpus}, share, seed)
    data = copy.deepcopy(corpus)
    for doc in data:
        if doc["doc_id"] in edited:
            for chunk in doc["chunks"]:
                chunk["content"] = edit_text(chunk["content"], rng, words)
            doc["content"] = "".join(c["content"] for c in doc["chunks"])
    return data, edited
