"""Contextualizers: given a document and some of its chunks, write a short context for each chunk.

One small interface (`Contextualizer.situate`) and a registry by name (`CONTEXTUALIZERS`). Every
provider is driven through `situate.tasks.contexts.cache` (cached answers read, each new one kept
as it arrives) and priced before a run by `situate.tasks.contexts.cost`. The providers live
beside it: `structural.py`, `claude/`, `openai_chat.py`, `ollama.py`, the paid ones on the shared
engine (`engine/`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from situate.core.records import Chunk, Document, Situated, Usage
from situate.core.registry import Registry


@dataclass(frozen=True)
class ContextConfig:
    """Everything a contextualizer may be configured with; built by the flow from settings."""

    name: str = "structural"
    model: str = ""
    concurrency: int = 8
    max_attempts: int = 8
    group_chunks: bool = False
    batch: bool = False
    # Where a provider may persist its own state (a batch id); the cache dir by default.
    state_dir: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def contexts_of(config: ContextConfig) -> str:
    """The contexts a configuration gives, in a few words: `structural`, `none`,
    `anthropic:claude-haiku-4-5` (recorded on the collection an ingest writes)."""
    return f"{config.name}:{config.model}" if config.model else config.name


Keep = Callable[[Document, Chunk, str], None]
"""Persists one generated context of (document, chunk) as its answer arrives; thread-safe."""


@dataclass
class ContextResult:
    """What situating one document returns: one Situated per chunk, in chunk order, and the bill."""

    situated: list[Situated]
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)


class Contextualizer:
    """Base of all contextualizers.

    `situate` is the one method a provider must implement. `cache_identity` names everything,
    besides the document and chunk, that changes the output (provider, model, prompt version,
    max_tokens, ...); None means the provider is free and deterministic and its output is not
    worth caching.

    A provider with an identity is given `keep` by the driver and calls `keep(doc, chunk,
    context)` for each context the moment its answer arrives (from any thread), before it
    starts the request that takes that answer's place; what it returns without having kept is
    kept by the driver when `situate` returns. A free provider (no identity) is never given one.
    """

    name: str = "base"
    generates: bool = True  # False: chunks are indexed as they are (no context to count)

    def situate(self, doc: Document, chunks: Sequence[Chunk],
                keep: Keep | None = None) -> ContextResult:
        raise NotImplementedError

    def cache_identity(self) -> dict[str, str | int] | None:
        return None

    def situate_corpus(
        self, items: Sequence[tuple[Document, Sequence[Chunk]]], keep: Keep | None = None
    ) -> list[ContextResult] | None:
        """Situate many documents in one go (a Message Batch); None when not supported.

        Providers that only work per document leave this alone and the flow fans out per document.
        `keep` as for `situate`: called per context as each result is read.
        """
        return None

    def abort(self) -> None:
        """Another document failed and the run stops: end the work still going on quickly (every
        later call may fail at once). Called by the flow before it waits for its tasks to end."""

    def close(self) -> None:
        """Release clients; called once by the flow at the end of a run."""


class NoContext(Contextualizer):
    """Index chunks as they are: the baseline of every comparison."""

    name = "none"
    generates = False

    def situate(self, doc: Document, chunks: Sequence[Chunk],
                keep: Keep | None = None) -> ContextResult:
        return ContextResult([Situated(c, "", "none") for c in chunks])


# --- the registry ---------------------------------------------------------------------------------

# situate's own providers are registered in the `situate.contexts` entry-point group
# (pyproject.toml), each imported when asked for, so the offline default never imports the
# anthropic or openai SDK.
CONTEXTUALIZERS: Registry[Callable[[ContextConfig], Contextualizer]] = Registry(
    "context provider", group="situate.contexts")


def no_context(config: ContextConfig) -> Contextualizer:
    """`--context none`: chunks are indexed as they are."""
    return NoContext()


CONTEXTUALIZERS.hint = " (optionally name:model, e.g. openai:gpt-4.1-mini, ollama:llama3.2)"


def split_context(spec: str) -> tuple[str, str]:
    """(name, model) of `name` or `name:model` (`--context ollama:llama3.2`); the model may hold
    colons itself (Ollama's tags: `ollama:qwen2.5:7b`)."""
    name, _, model = spec.partition(":")
    return name, model


def check_context(spec: str) -> str:
    """`spec` when its name is a known provider, else the registry's InputError."""
    CONTEXTUALIZERS.check(split_context(spec)[0])
    return spec


def resolved(config: ContextConfig) -> ContextConfig:
    """`config` with a `name:model` name split into its name and model."""
    name, model = split_context(config.name)
    return replace(config, name=name, model=model or config.model) if model else config


def get_contextualizer(config: ContextConfig) -> Contextualizer:
    """The contextualizer named by `config.name` (`name` or `name:model`); an InputError lists
    the known names."""
    config = resolved(config)
    return CONTEXTUALIZERS.get(config.name)(config)
