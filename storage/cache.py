"""Disk cache of generated contexts (diskcache); the keys are made by the contextualizers' driver
(`situate.tasks.contexts.base.context_key`) over everything that changes the output."""

from __future__ import annotations

from pathlib import Path

import diskcache


class DiskContextCache:
    """The `ContextCache` (situate.core.protocols) situate uses: get/put over a diskcache.Cache,
    safe across threads and processes."""

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
    def __getstate__(self) -> dict[str, str]:
        return {"directory": str(self.directory)}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.directory = Path(state["directory"])
        self._cache = diskcache.Cache(state["directory"])
