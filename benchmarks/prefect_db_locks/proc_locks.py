"""The lines of /proc/locks on one file, for both lock tools (`watch.py` from outside, the
recorder in `sitecustomize.py` from inside); stdlib only, as the recorder loads before anything."""

from __future__ import annotations

import os


def read() -> list[str]:
    """/proc/locks, a line per lock ("1: POSIX  ADVISORY  WRITE 1234 00:2f:5678 120 120"; a
    process waiting for a lock has "->" after the number)."""
    try:
        with open("/proc/locks") as f:
            return f.read().splitlines()
    except OSError:
        return []


def on(path: str, locks: list[str]) -> list[list[str]]:
    """The locks (and waits) on `path`, each split in its fields, matched by the file's inode."""
    try:
        inode = os.stat(path).st_ino
    except OSError:
        return []
    suffix = f":{inode}"
    return [parts for parts in map(str.split, locks) if any(p.endswith(suffix) for p in parts)]
