"""Reading documents where a runaway parser costs one document, not the ingest.

A PDF, Office file, EPUB, HTML page, Markdown file or notebook is read, cleaned and cut into
chunks in a reader process: a PDF of 2 KB can keep the reader busy for minutes or ask PDFium for
4 GB (and PDFium aborts the whole process when an allocation fails), an XML parser can be made to
expand a few kilobytes into gigabytes, and a layout step can be quadratic in what a page draws.
In the reader process each document gets a CPU-time budget (RLIMIT_CPU set, before each document,
to what the process has used plus `SITUATE_READ_SECONDS`), the process an address-space limit
(RLIMIT_AS, `SITUATE_READ_MEMORY`), and the parent waits for it a bounded wall-clock time. A
document past any of them, or that crashes its reader, is an `Unreadable` ("read past 60 s",
"read past 1 GiB", "reader crashed"), counted and said once like any unreadable file, and the
next document gets a new process.

One process serves every document of a run (Python's start-up and the readers' imports are paid
once, not per document) and leaves by itself: when its parent is gone, and after a minute with
nothing to read. It runs in a session of its own, so a Ctrl-C at the terminal reaches only the
command, which ends it with everything else it started (situate.flows.signals). Its replies are
plain data (strings, numbers, lists, dicts), unpickled with every class refused.
"""

from __future__ import annotations

import atexit
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from situate.core.processes import watch_parent
from situate.tasks.corpus.readers.base import Unreadable

# The parent waits this long for one document (a reader blocked on a slow disk, not computing).
WALL_FACTOR, WALL_EXTRA = 3.0, 10.0
# A reader process left with nothing to read for this long leaves by itself.
IDLE_SECONDS = 60.0
# A death with the address space this close to the limit is a document past its memory.
NEAR_LIMIT = 0.85
_POLL = 0.05
_BOOT = "from situate.tasks.corpus.sandbox import serve; serve()"


def size_text(n: int) -> str:
    """2 GiB, 512 MiB, 1000 bytes: a limit as it was most likely given."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n} bytes"


def past_seconds(seconds: float, detail: str) -> Unreadable:
    return Unreadable(f"read past {seconds:g} s", f"{detail}; a slow or hostile file: "
                      "SITUATE_READ_SECONDS gives documents longer")


def past_memory(memory: int) -> Unreadable:
    return Unreadable(f"read past {size_text(memory)}", "memory; a huge or hostile file: "
                      "SITUATE_READ_MEMORY gives the reader more")


# --- the parent's side ------------------------------------------------------------------------------


class ReaderProcess:
    """The reader process as the loader sees it: `read(request)` gives the document or raises
    `Unreadable`; the process is started on first use and again after a document killed it."""

    def __init__(self, memory: int) -> None:
        self.memory = memory
        self.proc: subprocess.Popen[bytes] | None = None
        self.requests: Connection | None = None
        self.replies: Connection | None = None
        self.lock = threading.Lock()
        self.owner = os.getpid()

    def _start(self) -> subprocess.Popen[bytes]:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        # -P: the working directory (maybe the corpus, maybe someone's clone) is never on the
        # reader's import path. defusedxml for openpyxl, whatever the environment says.
        env = {**os.environ, "OPENPYXL_DEFUSEDXML": "True"}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOT, str(request_r), str(reply_w), str(self.memory),
                 str(os.getpid()), str(IDLE_SECONDS)],
                pass_fds=(request_r, reply_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        except OSError as e:
            for fd in (request_w, reply_r):
                os.close(fd)
            raise Unreadable("reader not started", f"{e.strerror or e}") from None
        finally:
            os.close(request_r)  # the child's ends are the child's alone now
            os.close(reply_w)
        self.proc = proc
        self.requests = Connection(request_w, readable=False)
        self.replies = Connection(reply_r, writable=False)
        _LIVE.add(self)
        return proc

    def read(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one document's `request` (see `read_request`) and wait for its reading. A file
        that ran past a limit or crashed the reader is not tried again in this process while it
        is unchanged (the plan's pass and the run's pass read a corpus twice)."""
        key = (request["dev"], request["ino"], request["bytes"], request["mtime"], request["seconds"],
               request["max_bytes"], request["max_pages"], self.memory)
        known = _VERDICTS.get(key)
        if known is not None:
            raise Unreadable(*known)
        try:
            return self._read(request)
        except _Killed as e:
            if len(_VERDICTS) >= 10_000:
                _VERDICTS.clear()
            _VERDICTS[key] = (e.verdict.kind, e.verdict.detail)
            raise e.verdict from None

    def _read(self, request: dict[str, Any]) -> dict[str, Any]:
        seconds = float(request["seconds"])
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        with self.lock:
            if self.owner != os.getpid():  # a forked copy never shares its parent's pipes
                self.proc, self.requests, self.replies, self.owner = None, None, None, os.getpid()
            for attempt in (1, 2):
                proc = self.proc
                if proc is None or proc.poll() is not None:
                    self._reap()
                    proc = self._start()
                assert self.requests is not None and self.replies is not None
                try:
                    self.requests.send_bytes(data)
                except OSError:  # it has just left (idle): a new one
                    self._reap()
                    continue
                got, peak = self._wait(proc, seconds)
                if isinstance(got, dict):
                    return got
                code = got
                if code == 0 and attempt == 1:
                    continue  # it left idle as the request came: a new one takes it
                if code == -signal.SIGXCPU:
                    raise _Killed(past_seconds(seconds, "CPU time"))
                if peak >= NEAR_LIMIT * self.memory or code == -signal.SIGKILL:
                    raise _Killed(past_memory(self.memory))
                what = signal.Signals(-code).name if code < 0 else f"exit status {code}"
                raise _Killed(Unreadable("reader crashed", f"{what}: a damaged or hostile file"))
            raise _Killed(Unreadable("reader crashed", "it left before reading the file"))

    def _wait(self, proc: subprocess.Popen[bytes], seconds: float) -> tuple[dict[str, Any] | int, int]:
        """The reading (a dict), or the reader's exit code once it has died; and the most address
        space it was seen to use meanwhile. Raises what a reply says, and past the wall clock."""
        assert self.replies is not None
        deadline = time.monotonic() + WALL_FACTOR * seconds + WALL_EXTRA
        peak = 0
        while True:
            if self.replies.poll(_POLL):
                try:
                    reply = _plain_loads(self.replies.recv_bytes())
                except (EOFError, OSError):
                    break  # it died
                except pickle.UnpicklingError as e:
                    self._reap(kill=True)
                    raise _Killed(Unreadable("reader crashed", str(e))) from None
                if reply[0] == "ok":
                    return dict(reply[1]), peak
                if reply[0] == "memory":
                    self._reap(kill=True)
                    raise _Killed(past_memory(self.memory))
                raise Unreadable(str(reply[1]), str(reply[2]))
            peak = max(peak, _address_space(proc.pid))
            if time.monotonic() > deadline:
                self._reap(kill=True)
                raise _Killed(past_seconds(seconds, f"not done after "
                                                    f"{WALL_FACTOR * seconds + WALL_EXTRA:g} s of "
                                                    "wall-clock time"))
        code = proc.wait()
        self._reap()
        return code, peak

    def _reap(self, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        for conn in (self.requests, self.replies):
            if conn is not None:
                conn.close()
        self.requests = self.replies = None
        _LIVE.discard(self)
        if proc is None:
            return
        if kill and proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Let it go: asked to leave (its request pipe closed), killed if it does not at once, or
        at once if a thread is still waiting on it (that thread then sees it gone)."""
        if not self.lock.acquire(timeout=2.0):
            proc = self.proc
            if proc is not None and self.owner == os.getpid():
                proc.kill()
            return
        try:
            proc = self.proc
            if proc is None or self.owner != os.getpid():
                return
            if self.requests is not None:
                self.requests.close()
                self.requests = None
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
            self._reap()
        finally:
            self.lock.release()


class _Killed(Exception):
    """The reader process died on a document (or was stopped): `verdict` is what it counts as."""

    def __init__(self, verdict: Unreadable) -> None:
        super().__init__(str(verdict))
        self.verdict = verdict


_LIVE: set[ReaderProcess] = set()
_VERDICTS: dict[tuple[Any, ...], tuple[str, str]] = {}
_SHARED: dict[int, ReaderProcess] = {}
_SHARED_LOCK = threading.Lock()


def reader_process(memory: int) -> ReaderProcess:
    """The process's reader for this memory limit (one at a time: another limit replaces it)."""
    with _SHARED_LOCK:
        found = _SHARED.get(memory)
        if found is None:
            for other in _SHARED.values():
                other.close()
            _SHARED.clear()
            found = _SHARED[memory] = ReaderProcess(memory)
        return found


@atexit.register
def _close_all() -> None:
    for reader in list(_LIVE):
        try:
            reader.close()
        except Exception:  # noqa: BLE001 - at exit, the next one still gets closed
            pass


def _address_space(pid: int) -> int:
    """A process's address space in bytes (0 where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Plain(pickle.Unpickler):
    """Strings, numbers, lists, tuples and dicts only: a reply never makes the parent import or
    call anything."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the reader sent {module}.{name}, not plain data")


def _plain_loads(raw: bytes) -> Any:
    import io

    return _Plain(io.BytesIO(raw)).load()


def read_request(real: str, name: str, st: os.stat_result, *, max_bytes: int, max_pages: int,
                 seconds: float, size: int, overlap: int) -> dict[str, Any]:
    """What the reader is asked: the file (its resolved path, the name it is known by, the
    device and inode it must be), the limits, the chunking."""
    return {"real": real, "name": name, "dev": st.st_dev, "ino": st.st_ino, "bytes": st.st_size,
            "mtime": st.st_mtime_ns, "max_bytes": max_bytes, "max_pages": max_pages,
            "seconds": seconds, "size": size, "overlap": overlap}


# --- the reader's side ------------------------------------------------------------------------------


def serve() -> None:
    """The reader process: limits set, then one request at a time until its parent closes the
    pipe, is gone, or leaves it idle (argv: request fd, reply fd, memory bytes, parent pid, idle
    seconds)."""
    requests_fd, replies_fd, memory, parent = (int(a) for a in sys.argv[1:5])
    idle = float(sys.argv[5])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory(memory)
    threading.stack_size(1 << 18)
    watch_parent(parent, lambda: os._exit(0))
    requests = Connection(requests_fd, writable=False)
    replies = Connection(replies_fd, readable=False)
    while True:
        if not requests.poll(idle):
            return
        try:
            request = pickle.loads(requests.recv_bytes())
        except (EOFError, OSError):
            return
        _limit_cpu(float(request["seconds"]))
        try:
            reply: tuple[Any, ...] = ("ok", read_and_chunk(request))
        except Unreadable as e:
            reply = ("unreadable", e.kind, e.detail)
        except MemoryError:
            reply = ("memory",)
        except RecursionError:
            reply = ("unreadable", "too deeply nested", "its structure nests deeper than a reader follows")
        except Exception as e:  # noqa: BLE001 - whatever a library raises: this document only
            said = " ".join(str(e).split())[:300]
            reply = ("unreadable", "unreadable document", f"{type(e).__name__}: {said}")
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:
            data = pickle.dumps(("memory",))
        del reply
        try:
            replies.send_bytes(data)
        except OSError:
            return
        if data == _MEMORY:
            return  # a heap that ran out is not kept for the next document


_MEMORY = pickle.dumps(("memory",))


def _limit_memory(memory: int) -> None:
    try:
        import resource
    except ImportError:  # not a POSIX system: the wall-clock bound still holds
        return
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash writes no core file
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    except (ValueError, OSError):  # a system that does not enforce it (macOS): the others hold
        pass


def _limit_cpu(seconds: float) -> None:
    """SIGXCPU (which ends the process) once this document has had `seconds` of CPU."""
    try:
        import resource
    except ImportError:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(used.ru_utime + used.ru_stime + seconds)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):  # the wall-clock bound still holds
        pass


def document_title(reading: Any, opening: str) -> str:
    """The title a reader sees: the level-1 heading the document opens with, in every format
    (a web page's <title>, a PDF's Title entry and a book's metadata are what a tool wrote: a
    file's name, a site's name after the page's); a book of several chapters keeps its own title
    (its first heading is its first chapter's). Else the format's metadata title."""
    if opening and not (reading.unit == "chapters" and reading.units > 1):
        return opening
    return str(reading.title)


def read_and_chunk(request: dict[str, Any]) -> dict[str, Any]:
    """One document read, cleaned and cut along its structure: what `_read_document` in the
    loader makes a Document of. Its text is counted as it is read, against the document limit
    (an XML entity or a repeated drawing can make a small file's text huge)."""
    from situate.tasks.corpus.clean import clean_text
    from situate.tasks.corpus.files import fd_path, open_checked
    from situate.tasks.corpus.readers import read_document
    from situate.tasks.corpus.readers.base import Section
    from situate.tasks.corpus.sections import chunk_sections

    real, name = str(request["real"]), str(request["name"])
    max_bytes = int(request["max_bytes"])
    fd = open_checked(real, (int(request["dev"]), int(request["ino"])))
    where = fd_path(fd, real)
    cleaned = 0
    chars = 0
    opening: list[str] = []  # the document's first section's text when it is a level-1 heading

    def clean(sections: Iterable[Section]) -> Iterator[Section]:
        nonlocal cleaned, chars
        for s in sections:
            if not opening and s.text.strip():
                opening.append(" ".join(s.text.split()) if s.kind == "heading" and s.level == 1 else "")
            chars += len(s.text)
            if chars > max_bytes:
                raise Unreadable("too large", f"its text runs past {max_bytes} characters, the limit "
                                              "for one document (SITUATE_MAX_DOCUMENT_BYTES)")
            text, n = clean_text(s.text)
            cleaned += n
            yield Section(text, s.place, s.kind, s.level) if n else s

    try:
        reading = read_document(Path(where), max_bytes=max_bytes, max_pages=int(request["max_pages"]),
                                suffix=Path(name).suffix)
        try:
            text, pieces = chunk_sections(clean(reading.sections), int(request["size"]),
                                          int(request["overlap"]))
        except Unreadable:
            raise
        except (MemoryError, RecursionError):
            raise
        except Exception as e:  # noqa: BLE001 - a reader's library failing midway
            raise Unreadable(f"unreadable {reading.format.upper()}",
                             f"{type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
        finally:
            close = getattr(reading.sections, "close", None)
            if close is not None:
                close()
    except Unreadable as e:
        if where != real:
            raise Unreadable(e.kind, e.detail.replace(where, name)) from None
        raise
    finally:
        os.close(fd)
    return {"format": reading.format, "title": document_title(reading, opening[0] if opening else ""),
            "metadata": dict(reading.metadata),
            "unit": reading.unit, "units": reading.units, "text": text, "cleaned": cleaned,
            "pieces": [(p.start, len(p.text), p.where) for p in pieces]}
