"""Errors in the words of the `situate` command: the store says what to do in plain words
(`situate.core.errors`); here the same advice becomes the command and flag that do it."""

from __future__ import annotations

from situate.core.errors import CollectionNotFound, EmbedderMismatch, StoreUnreachable


def user_message(error: Exception) -> str:
    """The one line the CLI prints for `error`."""
    if isinstance(error, CollectionNotFound):
        return (f"collection {error.collection!r} not found at {error.uri}{error.detail}: run "
                f"`situate ingest CORPUS --collection {error.collection}` first")
    if isinstance(error, EmbedderMismatch):
        if error.wanted_dim is not None:
            return f"{error.holds()}: use another --collection or the same --embedder"
        return f"{error.holds()}: use another --collection or --embedder {error.stored}"
    if isinstance(error, StoreUnreachable):
        return error.says("start it (or check --milvus-uri)")
    return str(error)
