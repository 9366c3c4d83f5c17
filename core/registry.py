"""One name registry per part kind (reader, embedder, context provider, reranker, store, source,
command), all with the same lookup and the same error for an unknown name. A registry with an
entry-point group (situate.core.plugins) holds that group's installed entries too, situate's own
and every other package's, each imported on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from situate.core.errors import InputError
from situate.core.plugins import Entry, PluginError, entries

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to entries; an entry may be given as "module:attr", imported on first use, so that
    an optional SDK (anthropic, cohere) is imported only when its provider is asked for.

    With `group`, the installed entry points of that group are entries too, read when a name is
    first looked up; one registered in code keeps its name (a test's fake). `adapt` turns what
    an entry point names into the entry (a command's function into its Command); an entry point
    that fails to load is one PluginError naming it, and the others still load."""

    def __init__(self, kind: str, hint: str = "", *, group: str = "",
                 adapt: Callable[[Any], T] | None = None) -> None:
        self.kind = kind  # "context provider", "embedder", "reranker": used in messages
        self.hint = hint  # appended to the unknown-name message, e.g. " (optionally name:model)"
        self.group = group
        self._adapt = adapt
        self._entries: dict[str, T | str | Entry] = {}
        self._read = not group

    def _all(self) -> dict[str, T | str | Entry]:
        if not self._read:
            self._read = True
            for entry in entries(self.group):
                self._entries.setdefault(entry.name, entry)
        return self._entries

    def register(self, name: str, entry: T | str) -> None:
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._all())

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self) -> Iterator[str]:
        """The names in the order they were registered (situate's own entry points first)."""
        return iter(list(self._all()))

    def origin(self, name: str) -> Entry | None:
        """The entry point `name` came from, None for one registered in code."""
        entry = self._all().get(name)
        return entry if isinstance(entry, Entry) else None

    def check(self, name: str) -> str:
        """`name` if registered, else the one InputError every kind raises."""
        if name not in self._all():
            raise InputError(f"unknown {self.kind} {name!r}: use one of {', '.join(self.names())}"
                             f"{self.hint}")
        return name

    def get(self, name: str) -> T:
        entry = self._all()[self.check(name)]
        if isinstance(entry, Entry):
            found = entry.load()
            try:
                loaded: T = self._adapt(found) if self._adapt else found
            except Exception as e:
                raise PluginError(f"plugin {entry.origin} ({entry.group}: {entry.name} = "
                                  f"{entry.value}) is not a {self.kind}: {e}") from None
            self._entries[name] = loaded
            return loaded
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            imported: T = getattr(importlib.import_module(module), attr)
            self._entries[name] = imported
            return imported
        return entry

    def loaded(self, problems: list[str] | None = None) -> dict[str, T]:
        """Every entry, imported; one that fails to load is left out, its one line added to
        `problems` (or raised, without a list to add it to)."""
        out: dict[str, T] = {}
        for name in self:
            try:
                out[name] = self.get(name)
            except PluginError as e:
                if problems is None:
                    raise
                problems.append(str(e))
        return out
