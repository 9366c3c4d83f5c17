"""Shared fixtures: an isolated Prefect test server, per-test state directories, the `hash` fake
embedder registered for store and flow tests that are not about embedding quality."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Before Prefect is imported anywhere: quiet, offline, and patient on a fresh database.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    """Under pytest-xdist, each worker's `situate` subprocesses get a Prefect home of their own:
    two one-off runs migrating one fresh database at once (a new machine's ~/.prefect) would race,
    as Prefect's migration lock is per process. A user's own PREFECT_HOME wins."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "PREFECT_HOME" not in os.environ:
        import atexit
        import shutil
        import tempfile

        home = tempfile.mkdtemp(prefix=f"situate-tests-prefect-{worker}-")
        os.environ["PREFECT_HOME"] = home
        atexit.register(shutil.rmtree, home, ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CORPUS = ROOT / "data" / "sample" / "corpus"
SAMPLE_EVAL = ROOT / "data" / "sample" / "eval.jsonl"
CODEBASE = ROOT.parent / "shared" / "datasets" / "codebase"


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


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect server for the whole session (flow tests request it)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture
def state(tmp_path, monkeypatch):
    """Every place situate keeps state, under this test's tmp dir; settings re-read."""
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
