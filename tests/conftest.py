"""Shared fixtures: an isolated Prefect test server, per-test state directories, the `hash` fake
embedder registered for store and flow tests that are not about embedding quality."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Before Prefect is imported anywhere: quiet, offline, and patient on a fresh database.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


FAST = os.environ.get("SITUATE_TESTS_FAST") == "1"  # `make test-fast`: no Prefect server may run
# Fixtures that start a Prefect server: a test that uses one is slow, whatever its marks say.
SERVER_FIXTURES = {"prefect_harness"}


def pytest_configure(config):
    """Under pytest-xdist, each worker's `situate` subprocesses get a Prefect home of their own:
    two one-off runs migrating one fresh database at once (a new machine's ~/.prefect) would race,
    as Prefect's migration lock is per process. A user's own PREFECT_HOME wins, except in
    `make test-fast`, where each worker's home is new and must stay without a Prefect database
    (`pytest_sessionfinish`)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if FAST or (worker and "PREFECT_HOME" not in os.environ):
        import atexit
        import shutil
        import tempfile

        home = tempfile.mkdtemp(prefix=f"situate-tests-prefect-{worker or 'main'}-")
        os.environ["PREFECT_HOME"] = home
        os.environ.pop("PREFECT_API_URL", None)
        atexit.register(shutil.rmtree, home, ignore_errors=True)


# The slowest test files, slowest first (each file's tests summed, `pytest --durations`, on a
# 2-core machine): they are started first. Each file runs whole on one worker (--dist loadfile),
# in the order collected (--no-loadscope-reorder: xdist would put files with fewer tests last);
# by name these sort last, and the slowest, started at the end, ran alone for minutes while the
# other worker had nothing left.
SLOWEST_FIRST = ("test_docs.py", "test_search_faces.py", "test_stop.py", "test_ui.py",
                 "test_rebuild_flow.py", "test_serving_door.py", "test_error_exits.py",
                 "test_nothing_moves.py", "test_update.py", "test_claude_flow.py", "test_serve.py",
                 "test_embed_backends.py", "test_progress.py", "test_error_exits_b.py")


def pytest_collection_modifyitems(config, items):
    """A test that starts a Prefect server is marked slow (so `make test-fast` leaves it out);
    the slowest files first (`SLOWEST_FIRST`), each file's tests kept together and in order."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_testnodedown(node, error):
    """A worker that died (no Python traceback: a signal, the OOM killer, `os._exit`): what the
    machine's memory looked like then, and the kernel's last word on it where it can be read, so
    a crash on a machine no one can log into says why."""
    if error is None:
        return
    lines = [f"worker {node.gateway.id} died: {error}"]
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        lines.append("memory: " + ", ".join(f"{k} {info[k].strip()}" for k in
                                            ("MemTotal", "MemAvailable", "SwapFree") if k in info))
    except OSError:
        pass
    try:
        import subprocess

        kernel = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
        lines += [line for line in kernel.splitlines()[-400:]
                  if "oom" in line.lower() or "killed process" in line.lower()][-5:]
    except (OSError, subprocess.SubprocessError):
        pass
    print("\n" + "\n".join(lines), file=sys.stderr)


def pytest_sessionfinish(session, exitstatus):
    """`make test-fast` runs no Prefect server: none of its tests may have started one, in
    process (the fixtures above are slow) or in a `situate` subprocess, whose temporary server
    would have created its database in this worker's fresh PREFECT_HOME."""
    if not FAST:
        return
    database = Path(os.environ["PREFECT_HOME"]) / "prefect.db"
    if database.exists():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nmake test-fast started a Prefect server (it created {database}): "
              "mark the test that runs a flow slow", file=sys.stderr)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CORPUS = ROOT / "data" / "sample" / "corpus"
SAMPLE_EVAL = ROOT / "data" / "sample" / "eval.jsonl"
CODEBASE = ROOT / "data" / "benchmarks" / "codebase"


@pytest.fixture(scope="session", autouse=True)
def _register_hash_embedder():
    from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec
    from tests.fakes.hash_embedding import HashEmbedding

    EMBEDDERS.register("hash", EmbedderSpec("bow-64", "math", "", "", lambda model, key: HashEmbedding()))
    yield
    EMBEDDERS.unregister("hash")


@pytest.fixture
def embedders():
    """A test's own embedders, let go (local models killed) when it ends."""
    from situate.tasks.embedders.base import Embedders

    pool = Embedders()
    yield pool
    pool.release(kill=True)


@pytest.fixture
def counting():
    """The embedder `counting`: the hash embedding, counting the document texts it embeds."""
    from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec
    from tests.fakes.hash_embedding import CountingEmbedding

    model = CountingEmbedding()
    EMBEDDERS.register("counting", EmbedderSpec("bow-64", "math", "", "", lambda m, k: model))
    yield model
    EMBEDDERS.unregister("counting")


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect server for the whole session (flow tests request it)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture
def state(tmp_path, monkeypatch):
    """Every place situate keeps a project's state, under this test's tmp dir; settings re-read.
    The exported models are the user's, not a project's (SITUATE_MODEL_CACHE, by default
    ~/.cache/situate): every test, worker and run shares one export, prepared once."""
    from situate.core.settings import get_settings
    from tests.helpers import close_opened

    paths = {
        "milvus_uri": str(tmp_path / "milvus.db"),
        "cache_dir": str(tmp_path / "cache"),
        "results_dir": str(tmp_path / "results"),
    }
    for key, value in paths.items():
        monkeypatch.setenv(f"SITUATE_{key.upper()}", value)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield paths
    close_opened()
    get_settings.cache_clear()
