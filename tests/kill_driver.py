"""`python -m tests.kill_driver POINT ARGV...`: `situate ARGV...` (the CLI's own `main`) in this
process, which SIGKILLs itself when its ingest reaches POINT, as a machine that loses power
does: no handler runs, no file is closed.

POINTS: before the collection's rows are written (the first upsert not sent), during them (the
first upsert sent, the second not), after them (the manifest not yet saved), with the manifest
saved but its token not recorded in the collection, with the token recorded but the lexical index
half saved (its temporary file written, not moved into place), and with the index saved (the run
not yet ended). Without a POINT it reached, the command ends as usual.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(point: str) -> None:
    from situate.storage import lexical, manifest, milvus

    store = milvus.MilvusStore
    upsert = store.upsert
    calls = [0]

    def upsert_then(self: Any, collection: str, rows: Any, *a: Any, **kw: Any) -> int:
        calls[0] += 1
        if (point, calls[0]) in {("before_rows", 1), ("during_rows", 2)}:
            _die()
        return upsert(self, collection, rows, *a, **kw)

    store.upsert = upsert_then  # type: ignore[method-assign]

    save = manifest.Manifest.save

    def save_then(self: Any, *a: Any, **kw: Any) -> str:
        if point == "after_rows":
            _die()
        return save(self, *a, **kw)

    manifest.Manifest.save = save_then  # type: ignore[method-assign]

    set_token = store.set_manifest_token

    def set_token_then(self: Any, collection: str, token: str) -> None:
        if point == "before_token":
            _die()
        set_token(self, collection, token)
        if point == "after_index":
            _die()

    store.set_manifest_token = set_token_then  # type: ignore[method-assign]

    replace = os.replace

    def replace_then(src: Any, dst: Any) -> None:
        if point == "during_index" and str(dst).endswith(".npz"):
            _die()
        replace(src, dst)

    lexical.os = _Os(replace_then)  # type: ignore[attr-defined]


class _Os:
    """`os` as the lexical index sees it, with `replace` the armed one."""

    def __init__(self, replace: Any) -> None:
        self.replace = replace

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def run(arm: Callable[[str], None]) -> None:
    """`situate ARGV...` in this process with `arm(POINT)` done first (argv: POINT ARGV...)."""
    point, argv = sys.argv[1], sys.argv[2:]
    arm(point)
    from situate.cli.main import main as situate

    sys.exit(situate(argv))


def main() -> None:
    run(_arm)



def situate_in_its_own_session(driver: str, point: str | None, args: list[str],
                               env: dict[str, str]) -> int:
    """`situate ARGS` in a process of its own (and session: what it starts, its temporary
    Prefect server, is killed with it), armed at `point` by `driver` (`tests.kill_driver` or
    `tests.source_kill_driver`), or whole without one; its exit status, which must be a SIGKILL
    where armed and 0 where not (anything else fails with what the process printed)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    command = ([sys.executable, "-m", driver, point, *args] if point
               else [str(Path(sys.executable).with_name("situate")), *args])
    proc = subprocess.Popen(command, cwd=root, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == (-signal.SIGKILL if point else 0), out[-3000:]
    return proc.returncode


if __name__ == "__main__":
    main()
