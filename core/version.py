"""situate's version, as the installed distribution says it (the CLI, the HTTP and MCP servers)."""

from __future__ import annotations


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("situate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"
