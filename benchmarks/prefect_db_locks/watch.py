"""Who holds the write lock of Prefect's SQLite databases (issue 36), seen from outside.

    .venv/bin/python benchmarks/prefect_db_locks/watch.py LOGDIR ['/tmp/situate-tests-prefect-*']

Every half second, for each `prefect.db` under the glob (default: the test workers' homes):
which processes have it open (logged to LOGDIR/openers.log when that set changes: a second
server or an orphan on one file shows there), and which process holds SQLite's WAL write lock
(byte 120 of `prefect.db-shm` in /proc/locks). A hold longer than 5 s is logged to
LOGDIR/holds.log; past 8 s, once per hold, `py-spy dump --locals` of the holder (if py-spy is
installed) goes to LOGDIR/dump-PID-TIME.txt. Touches no process: reads /proc only.
A fresh database's migration holds the lock for its whole length (7-18 s here under test load):
those holds are expected.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time

import proc_locks  # this folder: sys.path[0] when run as a script

WAL_WRITE_LOCK_BYTE = "120"


def command(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            text = f.read().replace("\0", " ")
    except OSError:
        return "?"
    return "prefect-server" if "prefect.server.api.server:create_app" in text else text[:120]


def openers(databases: set[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            fds = os.listdir(f"{proc}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{proc}/fd/{fd}")
            except OSError:
                continue
            if target in databases:
                found.setdefault(target, set()).add(proc[6:])
    return found


def writer(shm: str, locks: list[str]) -> str | None:
    """The process holding SQLite's WAL write lock of the database whose -shm file is `shm`."""
    for parts in proc_locks.on(shm, locks):  # "1: POSIX  ADVISORY  WRITE 1234 00:2f:5678 120 120"
        if parts[1] != "->" and parts[3] == "WRITE" and parts[6] == WAL_WRITE_LOCK_BYTE:
            return parts[4]
    return None


def main() -> None:
    folder = sys.argv[1]
    pattern = sys.argv[2] if len(sys.argv) > 2 else "/tmp/situate-tests-prefect-*"
    os.makedirs(folder, exist_ok=True)
    opened_log = open(os.path.join(folder, "openers.log"), "a", buffering=1)
    holds_log = open(os.path.join(folder, "holds.log"), "a", buffering=1)
    py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    last: dict[str, set[str]] = {}
    holder: dict[str, tuple[str, float]] = {}  # database -> (pid, since when) of its write lock
    dumped: set[tuple[str, float]] = set()
    while True:
        databases = {os.path.realpath(p) for p in glob.glob(os.path.join(pattern, "prefect.db"))}
        now_open = openers(databases)
        stamp = time.strftime("%H:%M:%S")
        for db in set(now_open) | set(last):
            pids = now_open.get(db, set())
            if pids != last.get(db, set()):
                who = " ".join(f"{p}:{command(p)}" for p in sorted(pids))
                opened_log.write(f"{stamp} {db} {len(pids)} {who}\n")
        last = now_open
        locks = proc_locks.read()
        for db in databases:
            pid = writer(db + "-shm", locks)
            if pid is None:
                holder.pop(db, None)
                continue
            if holder.get(db, ("", 0.0))[0] != pid:
                holder[db] = (pid, time.time())
            start = holder[db][1]
            held = time.time() - start
            if held > 5:
                holds_log.write(f"{stamp} {db} write lock held {held:.0f} s by {pid} {command(pid)}\n")
            if held > 8 and (db, start) not in dumped and os.path.exists(py_spy):
                dumped.add((db, start))
                dump = subprocess.run([py_spy, "dump", "--pid", pid, "--locals"],
                                      capture_output=True, text=True).stdout
                with open(os.path.join(folder, f"dump-{pid}-{int(start)}.txt"), "w") as f:
                    f.write(dump)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
