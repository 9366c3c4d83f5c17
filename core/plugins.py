"""Where situate's parts come from: entry points. Readers, embedders, context providers,
rerankers, stores (by URI scheme), sources (by URL scheme) and commands are each one entry-point
group, and situate's own are registered in those groups (pyproject.toml's
`[project.entry-points]`) exactly as another package's are, so an installed `situate-confluence`
or `situate-qdrant` adds itself without a line of situate changed.

Nothing is imported until it is used: the groups are read once (package metadata only), and an
entry is imported when it is asked for by name. An entry that fails to import is one
`PluginError` naming it (its distribution and version, its group and entry point, the error),
and every other entry still works.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

from situate.core.errors import InputError

# The groups, and what an entry of each names.
GROUPS: dict[str, str] = {
    "situate.readers": "a tuple of document readers (situate.tasks.corpus.readers.base.Reader)",
    "situate.embedders": "an EmbedderSpec (situate.tasks.embedders.base), by embedder name",
    "situate.contexts": "a function of a ContextConfig giving a Contextualizer, by provider name",
    "situate.rerankers": "a function of a model name giving a Reranker, by reranker name",
    "situate.stores": "a StoreKind (situate.core.protocols), by URI scheme",
    "situate.sources": "a document source, by URL scheme",
    "situate.commands": "a `situate` command: a function declared with situate.cli.commands.command",
}
OWN = "situate"  # the distribution whose entries are situate's own: they win a name claimed twice


class PluginError(InputError):
    """A plugin that could not be loaded: one line naming it and why."""


@dataclass(frozen=True)
class Entry:
    """One installed entry point: its group and name, what it names ("module:attr"), and the
    distribution that declares it."""

    group: str
    name: str
    value: str
    dist: str
    version: str

    @property
    def origin(self) -> str:
        """"situate-org 0.1.0": where the entry comes from."""
        return f"{self.dist} {self.version}".strip()

    def load(self) -> Any:
        """What the entry names, imported now; a PluginError of one line if importing fails."""
        try:
            return metadata.EntryPoint(self.name, self.value, self.group).load()
        except Exception as e:  # any error a plugin's import raises is its own, said in one line
            detail = " ".join(str(e).split()) or type(e).__name__
            raise PluginError(f"plugin {self.origin} ({self.group}: {self.name} = {self.value}) "
                              f"failed to load: {type(e).__name__}: {detail}") from None


@cache
def _all() -> dict[str, tuple[Entry, ...]]:
    found: dict[str, list[Entry]] = {group: [] for group in GROUPS}
    for dist in metadata.distributions():
        # Only a distribution declaring a situate group has its metadata parsed: that is most
        # of the cost, and most installed distributions declare none.
        if "[situate." not in (dist.read_text("entry_points.txt") or ""):
            continue
        about = dist.metadata  # parsed once a distribution (`dist.version` parses it again)
        name, version = about["Name"] or "?", about["Version"] or ""
        for ep in dist.entry_points:
            entry = Entry(ep.group, ep.name, ep.value, name, version)
            if ep.group.startswith("situate.") and entry not in found.setdefault(ep.group, []):
                found[ep.group].append(entry)  # a distribution seen twice on the path: once
    # situate's own first (they keep a name another package claims too), then by distribution.
    return {group: tuple(sorted(entries, key=lambda e: (e.dist != OWN, e.dist)))
            for group, entries in found.items()}


def entries(group: str) -> tuple[Entry, ...]:
    """The installed entries of `group`, situate's own first, each in its distribution's order.
    A PluginError when situate's own are missing: its installed metadata is older than its
    entry points, and nothing would be found."""
    found = _all()
    if not any(e.dist == OWN for group_entries in found.values() for e in group_entries):
        raise PluginError("situate's own readers, stores and commands are not registered: its "
                          "installed metadata predates its entry points; reinstall it "
                          "(`pip install -e .`, or `make setup`)")
    return found.get(group, ())


def refresh() -> None:
    """Read the installed entry points again (after a package is installed in this process)."""
    _all.cache_clear()


def groups() -> dict[str, tuple[Entry, ...]]:
    """Every situate group with its installed entries (`situate plugins`)."""
    return dict(_all())


__all__ = ["GROUPS", "Entry", "PluginError", "entries", "groups", "refresh"]
