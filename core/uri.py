"""Where a Milvus URI points: a Milvus Lite file (a path) or a server (`http(s)://host:port`,
Milvus Standalone, Distributed or Zilliz Cloud). The one place that tells them apart."""

from __future__ import annotations

from pathlib import Path


def is_lite(uri: str) -> bool:
    """A Milvus Lite file (any path), not a server URI."""
    return "://" not in uri


def is_missing_lite_file(uri: str) -> bool:
    """A Milvus Lite file that does not exist yet: it holds no collection, and opening it would
    create it."""
    return is_lite(uri) and not Path(uri).exists()
