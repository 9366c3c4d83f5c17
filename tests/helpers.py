"""Shortcuts the tests share: a flow run from keyword options, as the CLI builds them, and stores
opened by a test (closed by the `state` fixture when the test ends)."""

from __future__ import annotations

from typing import Any

_opened: list[Any] = []


def ingest(**options: Any) -> Any:
    """`ingest_flow` on IngestOptions built from `options` (None: left to the settings)."""
    from situate.flows.ingest import ingest_flow
    from situate.flows.options import IngestOptions

    return ingest_flow(IngestOptions.build(**options))


def evaluate(**options: Any) -> Any:
    """`evaluate_flow` on EvaluateOptions built from `options`."""
    from situate.flows.evaluate import evaluate_flow
    from situate.flows.options import EvaluateOptions

    return evaluate_flow(EvaluateOptions.build(**options))


def open_store(uri: str) -> Any:
    """A MilvusStore on `uri`, closed when the test ends."""
    from situate.storage.milvus import MilvusStore

    opened = MilvusStore(uri)
    _opened.append(opened)
    return opened


def close_opened() -> None:
    while _opened:
        _opened.pop().close()
