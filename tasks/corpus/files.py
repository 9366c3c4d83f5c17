"""The corpus boundary: which files of a folder are the corpus's own, and opening one so that what
is read is what was checked.

A folder a user ingests is often not theirs (a cloned repository, an unpacked archive, a shared
drive). A link in it may point anywhere (`notes.md -> ~/.aws/credentials`, `x -> /proc/self/mem`),
and a file may be swapped for another between the look and the read. So: a link is resolved and
read only when its target is inside the corpus's root (or when the user opts in with
`--follow-links`); files on kernel filesystems (/proc, /sys, /dev, cgroups...) are never opened,
since their sizes lie (a /proc file says 0 bytes) and some reads never end or fail midway; only
regular files are opened, without following a link at the last step and without blocking, and
the file opened must be the very one checked (same device and inode). Reads are bounded by the
bytes actually read, not by the size the file claims.
"""

from __future__ import annotations

import errno
import os
import stat
from functools import lru_cache

from situate.tasks.corpus.readers.base import Unreadable

# Filesystems whose files are the kernel's views, not documents.
PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs", "cgroup", "cgroup2",
    "pstore", "bpf", "configfs", "fusectl", "efivarfs", "hugetlbfs", "mqueue", "binfmt_misc",
    "autofs", "rpc_pipefs", "nsfs", "selinuxfs", "fuse.gvfsd-fuse",
})
# Where they live where the mount table cannot be read (other systems).
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")

_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
_READ_BLOCK = 1 << 20


@lru_cache(maxsize=1)
def pseudo_devices() -> frozenset[int]:
    """The device numbers of this system's kernel filesystems (from /proc/self/mountinfo;
    empty where there is none)."""
    found = set()
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                head, sep, tail = line.partition(" - ")
                fields = head.split()
                if not sep or len(fields) < 3 or not tail.split():
                    continue
                if tail.split()[0] in PSEUDO_FILESYSTEMS:
                    major, _, minor = fields[2].partition(":")
                    found.add(os.makedev(int(major), int(minor)))
    except (OSError, ValueError):
        return frozenset()
    return frozenset(found)


def is_system_file(st: os.stat_result, real: str) -> bool:
    """Whether a file (its stat, its resolved path) is on a kernel filesystem: /proc, /sys,
    /dev and the like (told by the mount table; by the path where there is none)."""
    devices = pseudo_devices()
    if devices:
        return st.st_dev in devices
    return any(inside(real, root) for root in PSEUDO_ROOTS)


def inside(real: str, root: str) -> bool:
    """Whether resolved path `real` is `root` (resolved) or under it."""
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def open_checked(real: str, expected: tuple[int, int]) -> int:
    """A read-only descriptor on `real` (a resolved path), checked to be the regular file the
    walk looked at (`expected`: its device and inode): its last step no link, no blocking on a
    pipe swapped in, the same device and inode. `Unreadable` otherwise, and for a file that cannot be
    opened ("cannot be read (Permission denied)"); the caller closes the descriptor."""
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Unreadable("changed while read", "it became a link after it was checked") from None
        raise cannot_read(e) from None
    try:
        got = os.fstat(fd)
        if not stat.S_ISREG(got.st_mode):
            raise Unreadable("changed while read", "it is no longer a regular file")
        if (got.st_dev, got.st_ino) != expected:
            raise Unreadable("changed while read", "another file took its place after it was checked")
        if got.st_dev in pseudo_devices():
            raise Unreadable("system file", "a file of /proc, /sys or /dev is never read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def cannot_read(e: OSError) -> Unreadable:
    """What a failed open or read of a file is counted as: its reason, e.g.
    "cannot be read (Permission denied)"."""
    reason = e.strerror or errno.errorcode.get(e.errno or 0, "") or type(e).__name__
    return Unreadable(f"cannot be read ({reason})", "")


def read_bounded(fd: int, limit: int) -> bytes | None:
    """At most `limit` bytes from `fd`, counted as they are read; None when the file holds more
    (whatever size it claimed). `Unreadable` when a read fails (EIO, EINVAL...)."""
    parts: list[bytes] = []
    total = 0
    try:
        while total <= limit:
            block = os.read(fd, min(_READ_BLOCK, limit + 1 - total))
            if not block:
                break
            parts.append(block)
            total += len(block)
    except BlockingIOError:
        raise Unreadable("changed while read", "it behaves as a pipe, not a file") from None
    except OSError as e:
        raise cannot_read(e) from None
    return None if total > limit else b"".join(parts)


def fd_path(fd: int, real: str) -> str:
    """A path that opens the very file behind `fd`, for libraries that open files by name
    (PDFium, openpyxl, zipfile): /proc/self/fd/N on Linux (a new open of the same inode, so a
    file swapped in after the check is not what they read), else the checked path itself."""
    proc = f"/proc/self/fd/{fd}"
    return proc if os.path.exists(proc) else real
