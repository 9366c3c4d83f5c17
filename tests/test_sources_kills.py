"""A real `situate ingest` of a git repository (git+file://) killed with SIGKILL while the source
is synced into its mirror, and while the collection's rows are written; then the same command.
The killed run follows a change in the repository (one file edited, one deleted, one added), and
the command run again leaves the collection's rows as a fresh ingest's of the new commit."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from situate.storage.milvus import MilvusStore
from tests.conftest import SAMPLE_CORPUS
from tests.kill_driver import situate_in_its_own_session
from tests.test_sources_git import Remote

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(900)]

SITUATE = Path(sys.executable).with_name("situate")
C = "gitkilled"
# Both phases in the soak tier (`make test-soak`; tests/test_ingest_kills.py says why).
POINTS = [pytest.param(p, marks=pytest.mark.soak) for p in ("during_fetch", "during_rows")]


def _remote(tmp: Path) -> Remote:
    remote = Remote(tmp / "repo")
    files: dict[str, str | bytes | None] = {p.relative_to(SAMPLE_CORPUS).as_posix(): p.read_bytes()
             for p in sorted(SAMPLE_CORPUS.rglob("*")) if p.is_file()}
    remote.commit(files, "sample")
    return remote


def _change(remote: Remote) -> None:
    queue = remote.work / "harbor" / "queue.py"
    remote.commit({"harbor/queue.py": queue.read_text() + "\n# A lease renewal retries with "
                   "jittered backoff until the shard replica answers.\n",
                   "notes/changelog.txt": None,
                   "notes/release.md": "# Release notes\n\nThe queue worker now retries a lost "
                                       "lease renewal.\n"}, "change")


def _ingest(tmp: Path, url: str, uri: str, point: str | None = None) -> int:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API_URL", "SITUATE_", "ANTHROPIC_"))}
    env.update({"PREFECT_HOME": str(tmp / "prefect"), "SITUATE_WRITE_BATCH": "2",
                "SITUATE_RESULTS_DIR": str(tmp / "results")})
    args = ["ingest", url, "--collection", C, "--milvus-uri", uri, "--context", "structural",
            "--prune", "--cache-dir", str(tmp / "cache")]
    return situate_in_its_own_session("tests.source_kill_driver", point, args, env)


def _rows(uri: str) -> list:
    store = MilvusStore(uri)
    try:
        return sorted((r["id"], r["doc_hash"], r["text"])
                      for r in store.rows(C, fields=("id", "doc_hash", "text")))
    finally:
        store.close()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("fresh")
    remote = _remote(tmp)
    _change(remote)
    _ingest(tmp, remote.url, str(tmp / "m.db"))
    return _rows(str(tmp / "m.db"))


@pytest.mark.parametrize("point", POINTS)
def test_a_killed_source_ingest_then_the_same_command(tmp_path, fresh, point):
    remote = _remote(tmp_path)
    uri = str(tmp_path / "m.db")
    _ingest(tmp_path, remote.url, uri)
    _change(remote)
    assert _ingest(tmp_path, remote.url, uri, point) == -signal.SIGKILL
    _ingest(tmp_path, remote.url, uri)
    assert _rows(uri) == fresh
    shutil.rmtree(tmp_path / "prefect", ignore_errors=True)


def test_a_token_in_the_url_reaches_no_output_log_artifact_or_run(tmp_path):
    """`situate ingest git+file://user:TOKEN@/...`: the token is in none of the command's output,
    its JSON summary, the cache directory, or the Prefect database behind the run's UI (flow run
    parameters, logs, artifacts)."""
    token = "s3cr3t-T0KEN-never-shown"
    remote = Remote(tmp_path / "repo")
    remote.commit({"a.md": "# A\n\nThe first page, with enough words to index.\n"})
    url = remote.url.replace("git+file://", f"git+file://user:{token}@")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API_URL", "SITUATE_", "ANTHROPIC_"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect")})
    out = subprocess.run([str(SITUATE), "ingest", url, "--collection", "tok", "--milvus-uri",
                          str(tmp_path / "m.db"), "--context", "structural", "--cache-dir",
                          str(tmp_path / "cache"), "--json", str(tmp_path / "s.json")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "user:***@" in out.stdout or "***@" in out.stderr + out.stdout
    seen = [p for p in (tmp_path / "prefect").rglob("*") if p.is_file()]
    seen += [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert any(p.name.startswith("prefect.db") for p in seen)
    for text in (out.stdout, out.stderr, (tmp_path / "s.json").read_text()):
        assert token not in text
    for path in seen:
        assert token.encode() not in path.read_bytes(), path
