"""Disk cache of generated contexts (diskcache), keyed by everything that changes the output."""

from __future__ import annotations

import json
from pathlib import Path

import diskcache

from tasks.records import sha256


def context_key(*, provider: str, model: str, prompt_version: str, doc_hash: str, chunk_hash: str,
                extra: str = "") -> str:
    """The cache key of one context.

    Covers the provider, the model, the prompt version, the whole document and the chunk: change
    any of them and the context is generated again; change none and a re-run pays nothing. Never
    includes credentials.
    """
    parts = {
        "provider": provider,
        "model": model,
        "prompt": prompt_version,
        "doc": doc_hash,
        "chunk": chunk_hash,
        "extra": extra,
    }
    return sha256(json.dumps(parts, sort_keys=True))


class ContextCache:
    """get/put over a diskcache.Cache; safe across threads and processes."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._cache = diskcache.Cache(str(self.directory))

    def get(self, key: str) -> str | None:
        value = self._cache.get(key)
        return value if isinstance(value, str) else None

    def put(self, key: str, context: str) -> None:
        self._cache.set(key, context)

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._cache.close()

    # Pickled into Dask workers or Prefect task payloads: reopen by directory on the other side.
    def __getstate__(self) -> dict:
        return {"directory": str(self.directory)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["directory"])
