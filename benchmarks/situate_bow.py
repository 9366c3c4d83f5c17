"""`situate`, with one more embedder registered: `bow384`, a deterministic hashed bag of words of
384 dimensions (MiniLM's size) computed in the process, no model, no network. The search
benchmark's 100k-chunk collection is ingested and searched with it, so that its figures measure
the store and situate's search path at that size, not a model.

    .venv/bin/python benchmarks/situate_bow.py ingest CORPUS --collection scale --embedder bow384
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.hash_embedding import HashEmbedding  # noqa: E402

EMBEDDER = "bow384"


class Bow384(HashEmbedding):
    dim = 384


def register() -> None:
    from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec

    if EMBEDDER not in EMBEDDERS.names():
        EMBEDDERS.register(EMBEDDER, EmbedderSpec("bow-384", "math", "", "",
                                                  lambda model, key: Bow384()))


if __name__ == "__main__":
    register()
    from situate.cli.main import main

    sys.exit(main(sys.argv[1:]))
