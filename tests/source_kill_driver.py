"""`python -m tests.source_kill_driver POINT ARGV...`: `situate ARGV...` (the CLI's own `main`)
in this process, which SIGKILLs itself when its ingest of a source reaches POINT: no handler
runs, no file is closed.

POINTS: `during_fetch`, while the source is synced into its mirror (one file written, the second
not); `during_rows`, while the collection's rows are written (the first upsert sent, the second
not). Without a POINT it reached, the command ends as usual.
"""

from __future__ import annotations

from typing import Any

from tests.kill_driver import _die, run


def _arm(point: str) -> None:
    from situate.storage import milvus
    from situate.tasks.sources import mirror

    write, calls = mirror._write, {"write": 0, "upsert": 0}

    def write_then(*a: Any) -> None:
        calls["write"] += 1
        if point == "during_fetch" and calls["write"] == 2:
            _die()
        write(*a)

    mirror._write = write_then
    upsert = milvus.MilvusStore.upsert

    def upsert_then(self: Any, *a: Any, **kw: Any) -> Any:
        calls["upsert"] += 1
        if point == "during_rows" and calls["upsert"] == 2:
            _die()
        return upsert(self, *a, **kw)

    milvus.MilvusStore.upsert = upsert_then  # type: ignore[method-assign]


def main() -> None:
    run(_arm)


if __name__ == "__main__":
    main()
