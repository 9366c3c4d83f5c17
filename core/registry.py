"""One name registry per provider kind (contextualizer, embedder, reranker), all with the same
lookup and the same error for an unknown name."""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

from situate.core.errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to entries; an entry may be given as "module:attr", imported on first use, so that
    an optional SDK (anthropic, cohere) is imported only when its provider is asked for."""

    def __init__(self, kind: str, hint: str = "") -> None:
        self.kind = kind  # "context provider", "embedder", "reranker": used in messages
        self.hint = hint  # appended to the unknown-name message, e.g. " (optionally name:model)"
        self._entries: dict[str, T | str] = {}

    def register(self, name: str, entry: T | str) -> None:
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def check(self, name: str) -> str:
        """`name` if registered, else the one InputError every kind raises."""
        if name not in self._entries:
            raise InputError(f"unknown {self.kind} {name!r}: use one of {', '.join(self.names())}"
                             f"{self.hint}")
        return name

    def get(self, name: str) -> T:
        entry = self._entries[self.check(name)]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            loaded: T = getattr(importlib.import_module(module), attr)
            self._entries[name] = loaded
            return loaded
        return entry
