"""A corpus is its own files, read in bounded time and memory: links out of the folder,
/proc files, pipes, devices and unreadable files; PDFs and a workbook that cost minutes or
gigabytes to read; a launcher planted at a predictable name. Through the loading functions here
(one reader process per limit, shared); one real `situate ingest` over a folder of them all."""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from situate.core.errors import InputError
from situate.core.settings import get_settings
from situate.tasks.corpus.load import load_corpus
from tests.conftest import ROOT
from tests.hostile_files import (
    ORDINARY,
    SECRET_MARK,
    entity_xlsx,
    hostile_folder,
    overlapping_runs_pdf,
    page_tree_bomb_pdf,
    plant_links,
    xobject_bomb_pdf,
)

GIB = 1 << 30
SITUATE = Path(sys.executable).parent / "situate"


@pytest.fixture
def limits(monkeypatch):
    """Set reading limits (SITUATE_* names without the prefix) for the loads of one test."""

    def apply(**values: object) -> None:
        for name, value in values.items():
            monkeypatch.setenv(f"SITUATE_{name.upper()}", str(value))
        get_settings.cache_clear()

    yield apply
    get_settings.cache_clear()


def _texts(corpus) -> str:
    return "\n".join(t for d in corpus.documents
                     for t in (d.id, d.text, json.dumps(d.metadata), *(c.text for c in d.chunks)))


def _ordinary(corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    for name, text in ORDINARY.items():
        (corpus / name).write_text(text)


class TreeMemory:
    """The peak RSS of this process and all its descendants, sampled every 50 ms."""

    def __init__(self, root: int | None = None) -> None:
        self.root = psutil.Process(root or os.getpid())
        self.peak = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            total = 0
            try:
                for p in [self.root, *self.root.children(recursive=True)]:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            self.peak = max(self.peak, total)
            self.done.wait(0.05)

    def __enter__(self) -> TreeMemory:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


# --- the corpus boundary -------------------------------------------------------------------------


def _linked_corpus(tmp_path: Path) -> tuple[Path, Path]:
    """Ordinary files beside every kind of link out (`plant_links`) to a secret outside."""
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    secret = tmp_path / "outside" / "secret.md"
    secret.parent.mkdir()
    secret.write_text(f"aws_secret_access_key = {SECRET_MARK}\n")
    plant_links(corpus, secret)
    return corpus, secret


def test_links_out_of_the_corpus_are_skipped_counted_and_never_read(tmp_path, caplog):
    corpus, secret = _linked_corpus(tmp_path)
    (corpus / "docs" / "inside.md").symlink_to("../worker.md")  # a link within the corpus: read
    (corpus / "loop").symlink_to(".", target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        loaded = load_corpus(corpus)
    assert sorted(d.id for d in loaded.documents) == ["docs/inside.md", *sorted(ORDINARY)]
    assert SECRET_MARK not in _texts(loaded)
    assert dict(loaded.skipped)["link out of the corpus"] == 5  # 2 to the secret, 2 to /proc, 1 dir
    log = caplog.text
    assert f"skipped {corpus / 'notes.md'}: a link out of the corpus, to {secret}" in log
    assert "skipped 5 links out of the corpus" in log and "Traceback" not in log


def test_follow_links_reads_them_but_never_proc_and_enters_each_directory_once(tmp_path):
    corpus, _ = _linked_corpus(tmp_path)
    (corpus / "loop").symlink_to("..", target_is_directory=True)  # an ancestor: must not loop
    loaded = load_corpus(corpus, follow_links=True)
    ids = {d.id for d in loaded.documents}
    assert {"notes.md", "docs/x.txt", "elsewhere/secret.md"} <= ids
    assert SECRET_MARK in _texts(loaded)
    assert not {"status.txt", "pagemap.txt"} & ids
    assert dict(loaded.skipped)["system file"] == 2 and "link out of the corpus" not in dict(loaded.skipped)
    assert sum(1 for i in ids if i.endswith("worker.md")) == 1  # the loop leads to no second copy


def test_a_held_out_set_neither_reads_nor_copies_links_out(tmp_path):
    """`situate synth --generator held-out` writes a copy of the corpus to ingest: a link out of
    it must not become a regular file there, holding what it pointed to."""
    from situate.tasks.synth.heldout import build_heldout

    corpus, _ = _linked_corpus(tmp_path)
    stats = build_heldout(corpus, tmp_path / "out", n=5, seed=0)
    copied = tmp_path / "out" / "corpus"
    assert sorted(p.name for p in copied.rglob("*") if p.is_file()) == sorted(ORDINARY)
    assert not any(SECRET_MARK in p.read_text() for p in copied.rglob("*") if p.is_file())
    assert stats.documents == len(ORDINARY)

def test_pipes_devices_and_sockets_are_never_opened(tmp_path):
    import socket

    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    os.mkfifo(corpus / "pipe.md")  # reading would block forever
    if os.geteuid() == 0:  # making a device node needs root
        os.mknod(corpus / "zero.txt", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: no end
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(corpus / "sock.txt"))
        # Opening the pipe or the device would never end: the load must return at all. It runs in
        # a thread given 20 times what loading the same ordinary files alone took here.
        _ordinary(tmp_path / "plain")
        start = time.monotonic()
        load_corpus(tmp_path / "plain")
        reference = time.monotonic() - start
        found: list[Any] = []
        worker = threading.Thread(target=lambda: found.append(load_corpus(corpus)), daemon=True)
        worker.start()
        worker.join(timeout=20 * max(reference, 1.0))
    assert not worker.is_alive(), "reading a pipe, device or socket did not return"
    loaded = found[0]
    assert sorted(d.id for d in loaded.documents) == sorted(ORDINARY)
    assert loaded.skipped_files == (3 if os.geteuid() == 0 else 2)


def test_a_file_given_alone_must_be_a_regular_file(tmp_path):
    link = tmp_path / "status.txt"
    link.symlink_to("/proc/self/status")
    with pytest.raises(InputError, match="not a regular file"):
        load_corpus(link)


def test_reads_are_bounded_by_bytes_read_not_by_the_size_claimed(tmp_path):
    from situate.tasks.corpus.files import read_bounded

    fd = os.open("/proc/self/status", os.O_RDONLY)  # says 0 bytes, holds about 1.5 kB
    try:
        assert os.fstat(fd).st_size == 0
        assert read_bounded(fd, 100) is None
    finally:
        os.close(fd)
    f = tmp_path / "a.txt"
    f.write_bytes(b"x" * 5000)
    fd = os.open(f, os.O_RDONLY)
    try:
        assert read_bounded(fd, 5000) == b"x" * 5000
    finally:
        os.close(fd)


def test_a_file_swapped_after_the_walk_is_not_read(tmp_path):
    from situate.tasks.corpus.files import open_checked
    from situate.tasks.corpus.readers.base import Unreadable

    f = tmp_path / "a.md"
    f.write_text("checked")
    st = os.stat(f)
    keep = os.open(f, os.O_RDONLY)  # its inode is not reused while open
    f.unlink()
    f.symlink_to("/etc/hostname")  # a link in its place: not followed
    with pytest.raises(Unreadable, match="changed while read"):
        open_checked(str(f), (st.st_dev, st.st_ino))
    f.unlink()
    other = tmp_path / "b.md"
    other.write_text("another file")  # another inode (made while the first is still open)
    os.replace(other, f)
    with pytest.raises(Unreadable, match="changed while read"):
        open_checked(str(f), (st.st_dev, st.st_ino))
    os.close(keep)


def test_a_file_whose_read_fails_is_a_counted_skip_with_its_reason(tmp_path, monkeypatch, caplog):
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    (corpus / "bad.txt").write_text("the disk under this file fails")
    opened: dict[int, str] = {}
    real_open, real_read = os.open, os.read

    def tracking_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        opened[fd] = str(path)
        return fd

    def failing_read(fd, n):
        if opened.get(fd, "").endswith("bad.txt"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_read(fd, n)

    monkeypatch.setattr(os, "open", tracking_open)
    monkeypatch.setattr(os, "read", failing_read)
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        loaded = load_corpus(corpus)
    assert sorted(d.id for d in loaded.documents) == sorted(ORDINARY)
    assert dict(loaded.skipped) == {"cannot be read (Input/output error)": 1}
    assert f"skipped {corpus / 'bad.txt'}: cannot be read (Input/output error)" in caplog.text


def _without_file_privileges() -> None:
    """In a child before exec: root without the capabilities that let it read any file
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), dropped from the bounding set so that neither it nor
    its children (the reader process) get them back; file modes then bind it as any user."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@functools.cache
def modes_bind() -> bool:
    """Whether a child here can be kept from reading a file of mode 000: any user but root, or
    root allowed to drop its file capabilities."""
    if os.geteuid() != 0:
        return True
    try:
        subprocess.run(["true"], preexec_fn=_without_file_privileges, check=True)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def run_unprivileged(args: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    """`args` run so that a file of mode 000 cannot be read: as root, without its file
    capabilities; as another user, as is."""
    if os.geteuid() == 0:
        kwargs["preexec_fn"] = _without_file_privileges
    return subprocess.run(args, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def test_a_file_the_user_may_not_read_is_a_counted_skip(tmp_path):
    """One text file and one Markdown document (read in the reader process) closed to the
    user (mode 000): each a counted skip with its reason, the rest of the corpus read."""
    if not modes_bind():
        pytest.skip("root here may not drop CAP_DAC_OVERRIDE: every file is readable to it")
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    for name in ("locked.txt", "locked.md"):
        (corpus / name).write_text(f"{SECRET_MARK}\n")
        (corpus / name).chmod(0)
    code = ("import json, sys\nfrom situate.tasks.corpus.load import load_corpus\n"
            "c = load_corpus(sys.argv[1])\n"
            "print(json.dumps({'ids': sorted(d.id for d in c.documents), "
            "'skipped': dict(c.skipped), 'text': ' '.join(d.text for d in c.documents)}))")
    r = run_unprivileged([sys.executable, "-c", code, str(corpus)], cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    got = json.loads(r.stdout)
    assert got["ids"] == sorted(ORDINARY) and SECRET_MARK not in got["text"]
    assert got["skipped"] == {"cannot be read (Permission denied)": 2}
    assert f"skipped {corpus / 'locked.md'}: cannot be read (Permission denied)" in r.stderr


# --- documents read in bounded time and memory ---------------------------------------------------


def test_a_document_past_its_cpu_budget_is_skipped_and_not_read_again(tmp_path, limits, caplog,
                                                                     monkeypatch):
    from situate.tasks.corpus import sandbox

    sent: list[str] = []
    real_read = sandbox.ReaderProcess._read

    def counted(self, request):
        sent.append(Path(request["real"]).name)
        return real_read(self, request)

    monkeypatch.setattr(sandbox.ReaderProcess, "_read", counted)
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    slow = xobject_bomb_pdf(corpus / "slow.pdf", draws=100_000)  # minutes of layout
    overlapping_runs_pdf(corpus / "z-after.pdf")  # read by the reader process started after it
    limits(read_seconds=2)
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        first = load_corpus(corpus)
    assert sorted(d.id for d in first.documents) == sorted([*ORDINARY, "z-after.pdf"])
    assert dict(first.skipped) == {"read past 2 s": 1}
    assert f"skipped {slow}: read past 2 s (CPU time;" in caplog.text
    assert sent.count("slow.pdf") == 1
    sent.clear()
    again = load_corpus(corpus)  # as the run's streaming pass after the plan's: not read again
    assert dict(again.skipped) == {"read past 2 s": 1}
    assert "slow.pdf" not in sent and "z-after.pdf" in sent  # the others are read again


def test_the_wall_clock_bound_stops_a_reader_that_is_not_done(tmp_path, monkeypatch, limits):
    from situate.tasks.corpus import sandbox

    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    xobject_bomb_pdf(corpus / "slow.pdf", draws=100_000)
    limits(read_seconds=40)
    monkeypatch.setattr(sandbox, "WALL_FACTOR", 0.0)
    monkeypatch.setattr(sandbox, "WALL_EXTRA", 1.5)
    start = time.monotonic()
    loaded = load_corpus(corpus)
    # The same skip would come from the 40 s CPU limit: the wall-clock bound (1.5 s here) is the
    # one that stopped it when the load took under half of that limit.
    assert dict(loaded.skipped) == {"read past 40 s": 1} and time.monotonic() - start < 40 / 2
    assert sorted(d.id for d in loaded.documents) == sorted(ORDINARY)


def test_hostile_pdfs_are_read_within_budget_or_refused(tmp_path, limits, caplog):
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    overlapping_runs_pdf(corpus / "overlapping.pdf")
    xobject_bomb_pdf(corpus / "drawn.pdf", draws=10_000)
    page_tree_bomb_pdf(corpus / "tree.pdf")
    limits(read_seconds=20)
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        loaded = load_corpus(corpus)
    ids = {d.id for d in loaded.documents}
    assert set(ORDINARY) <= ids
    assert {"overlapping.pdf", "drawn.pdf"} <= ids  # 6,000 overlapping runs; 10,000 draws: read
    assert dict(loaded.skipped) == {"too many pages": 1}
    assert "tree.pdf: too many pages (1000000 pages, over the limit of 10000 (SITUATE_MAX_PDF_PAGES))" \
        in caplog.text


def test_entity_declarations_in_a_workbook_are_refused(tmp_path, caplog):
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    entity_xlsx(corpus / "figures.xlsx")
    with caplog.at_level(logging.WARNING, logger="situate.load"):
        loaded = load_corpus(corpus)
    assert sorted(d.id for d in loaded.documents) == sorted(ORDINARY)
    assert dict(loaded.skipped) == {"XML entities in XLSX": 1}
    assert loaded.chunk_count == len(ORDINARY)


def test_extracted_text_counts_against_the_document_limit(tmp_path, limits):
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    overlapping_runs_pdf(corpus / "runs.pdf")  # 19 kB that give ~60,000 characters
    limits(max_document_bytes=40_000)
    loaded = load_corpus(corpus)
    assert dict(loaded.skipped) == {"too large": 1}
    assert sorted(d.id for d in loaded.documents) == sorted(ORDINARY)


def test_the_reader_process_ends_with_its_parent(tmp_path):
    """A command killed outright (SIGKILL: no handler runs) leaves no reader process behind."""
    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    overlapping_runs_pdf(corpus / "runs.pdf")
    code = ("import sys, time\nfrom situate.tasks.corpus.load import load_corpus\n"
            "from situate.tasks.corpus import sandbox\nload_corpus(sys.argv[1])\n"
            "print(*(r.proc.pid for r in sandbox._LIVE if r.proc), flush=True)\ntime.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code, str(corpus)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        [reader] = [int(x) for x in line.split()]
        assert psutil.pid_exists(reader)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(reader) and psutil.Process(reader).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the reader process outlived its parent"
        time.sleep(0.1)


def test_a_reader_process_that_left_idle_is_started_again(tmp_path, monkeypatch):
    from situate.tasks.corpus import sandbox

    corpus = tmp_path / "corpus"
    _ordinary(corpus)
    monkeypatch.setattr(sandbox, "IDLE_SECONDS", 0.3)
    sandbox._close_all()  # a reader started now leaves after 0.3 s with nothing to read
    first = load_corpus(corpus)
    [reader] = [r.proc for r in sandbox._LIVE if r.proc]
    reader.wait(timeout=10)  # it left by itself
    assert load_corpus(corpus).documents == first.documents
    sandbox._close_all()


# --- nothing executable in a shared directory ----------------------------------------------------


def _plant_old_launcher(shared: Path, interpreter: str, marker: Path) -> Path:
    """A file at the launcher's old predictable path in `shared` (`situate-python-UID-HASH`, the
    hash of the script the old code wrote for `interpreter`) that leaves `marker` when run."""
    import hashlib

    script = f"#!/bin/sh\ntrap '' INT\nexec {shlex.quote(interpreter)} \"$@\"\n"
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    planted = shared / f"situate-python-{os.getuid()}-{digest}"
    planted.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\n" + script.split("\n", 1)[1])
    planted.chmod(0o777)
    return planted


def test_a_launcher_planted_at_the_old_predictable_path_is_never_run(tmp_path, monkeypatch):
    """The local model's interpreter launcher was `<tmp>/situate-python-UID-HASH`, run if it
    existed. Planted there (and a directory others can write planted where the new one goes),
    it is never run: the launcher lives in a private directory and is checked before use."""
    from situate.tasks.embedders import local

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(local, "_PRIVATE", [])
    marker = tmp_path / "planted-ran"
    _plant_old_launcher(shared, sys.executable, marker)
    squatted = shared / f"situate-{os.geteuid()}"  # the new place, taken by someone first
    squatted.mkdir()
    squatted.chmod(0o777)
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import spawn

    monkeypatch.setattr(spawn, "_python_exe", spawn.get_executable())  # put back after the test
    context = local._spawn_context()
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        assert pool.submit(os.getpid).result() != os.getpid()
    assert not marker.exists(), "the planted launcher was run"
    launcher = Path(os.fsdecode(spawn.get_executable()))
    assert launcher.parent != squatted
    st = launcher.parent.stat()
    assert st.st_uid == os.geteuid() and not st.st_mode & 0o077
    # A launcher tampered with in place is written again before use, never run as it is.
    launcher.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\n")
    local._spawn_context()
    assert str(marker) not in launcher.read_text()


# --- one real ingest over a folder of them all ----------------------------------------------------


@pytest.mark.slow
def test_one_ingest_over_a_folder_of_every_hostile_file(tmp_path):
    """`situate ingest` (MiniLM, default limits), run from inside the folder, over three ordinary
    files beside links out of the folder (absolute, relative, /proc, a directory), a FIFO, a file
    it may not read, the PDFs, the workbook and two HTML pages (10.8 MB of nested menus, and one
    nested too deep), with a launcher planted at the old predictable path and a `uvicorn.py` in
    the folder: exit 0, the ordinary files indexed, each hostile file a
    counted skip or read, no byte of the linked file in the store, no traceback, nothing planted
    ever run, the command's process tree under 3 GiB."""
    from tests.helpers import open_store

    corpus = hostile_folder(tmp_path)
    locked = modes_bind()
    if not locked:  # root that may not drop its file capabilities reads any file
        (corpus / "locked.md").unlink()
    shared = tmp_path / "tmp"  # the command's temporary directory (TMPDIR), as /tmp is shared
    shared.mkdir(mode=0o1777)
    marker = tmp_path / "planted-ran"
    interpreter = SITUATE.read_text().splitlines()[0][2:].strip()  # the command's sys.executable
    _plant_old_launcher(shared, interpreter, marker)
    # Run from inside the folder, as `cd clone && situate ingest .`: a module planted there must
    # not be imported by any interpreter the command starts (Prefect's server is `python -m
    # uvicorn`).
    (corpus / "uvicorn.py").write_text(f"open({str(marker)!r}, 'w').write('uvicorn')\n")
    summary = tmp_path / "summary.json"
    env = {**os.environ, "SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
           "SITUATE_CACHE_DIR": str(tmp_path / "cache"), "SITUATE_RESULTS_DIR": str(tmp_path / "r"),
           "TMPDIR": str(shared)}
    for name in [k for k in env if k.startswith("SITUATE_READ")] + ["ANTHROPIC_API_KEY", "XDG_RUNTIME_DIR"]:
        env.pop(name, None)
    proc = subprocess.Popen([str(SITUATE), "ingest", str(corpus), "--collection", "hostile",
                             "--json", str(summary)], cwd=corpus, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=_without_file_privileges if os.geteuid() == 0 and locked else None)
    with TreeMemory(proc.pid) as tree:
        out, err = proc.communicate(timeout=900)
    said = out + err
    assert proc.returncode == 0, said[-3000:]
    assert "Traceback" not in said
    assert tree.peak < 3 * GIB, f"the ingest's process tree peaked at {tree.peak >> 20} MiB"
    assert not marker.exists(), f"a planted file was run: {marker.read_text()}"
    got = json.loads(summary.read_text())
    expected = {"link out of the corpus": 5, "too many pages": 1, "XML entities in XLSX": 1,
                "read past 1 GiB": 1, "HTML nested too deep": 1}
    if locked:
        expected["cannot be read (Permission denied)"] = 1
    assert got["skipped"] == expected
    rows = list(open_store(str(tmp_path / "m.db")).rows("hostile"))
    assert {r["doc_id"] for r in rows} == {*ORDINARY, "uvicorn.py", "overlapping-runs.pdf",
                                           "xobject-10000.pdf", "menus.html"}
    assert not any(SECRET_MARK in r["text"] or SECRET_MARK in r["context"] for r in rows)
    assert "skipped 5 links out of the corpus" in said
    assert f"skipped {corpus / 'xobject-1000000.pdf'}: read past 1 GiB (memory;" in said

