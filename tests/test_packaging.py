"""situate installs as one namespaced package (`situate.*`): another distribution that ships
top-level `flows`, `tasks` and `storage` packages can live in the same environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_CORPUS, SAMPLE_EVAL
from tests.layered_env import Env

# Every module of the intruder refuses to be imported: if situate imported a top-level `flows`,
# `tasks` or `storage`, it would get one of these and fail.
INTRUDER = "raise ImportError('this is the {name!r} package of situate-intruder, not situate')\n"


def _build_intruder(where: Path) -> Path:
    src = where / "intruder"
    for name in ("flows", "tasks", "storage"):
        (src / name).mkdir(parents=True)
        (src / name / "__init__.py").write_text(INTRUDER.format(name=name))
        (src / name / "cli.py").write_text(INTRUDER.format(name=name))
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "situate-intruder"\nversion = "0.0.1"\n'
        '[tool.setuptools]\npackages = ["flows", "tasks", "storage"]\n')
    return src


@pytest.mark.slow
def test_situate_works_beside_a_distribution_with_top_level_flows_tasks_storage(tmp_path):
    """The intruder goes into a venv of this test's own, layered over the project's: installed in
    the project's venv, it was there (half-written, then half-removed) for every process the other
    test workers started meanwhile."""
    env = Env(tmp_path / "venv")
    env.pip("install", "--no-build-isolation", "--no-deps", "--no-index", str(_build_intruder(tmp_path)))
    probe = env.run("-c", "import storage", cwd=tmp_path)
    assert "situate-intruder" in probe.stderr  # the intruder really is installed and first
    env.env.update({"SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
                    "SITUATE_CACHE_DIR": str(tmp_path / "cache"),
                    "SITUATE_RESULTS_DIR": str(tmp_path / "results")})
    env.env.pop("ANTHROPIC_API_KEY", None)
    env.env.pop("COHERE_API_KEY", None)
    ingest = env.situate("ingest", str(SAMPLE_CORPUS), "--collection", "sample", cwd=tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    assert "chunks_written" in ingest.stdout
    out = tmp_path / "r.json"
    evaluate = env.situate("evaluate", str(SAMPLE_EVAL), "--collection", "sample", "--json", str(out),
                           cwd=tmp_path)
    assert evaluate.returncode == 0, evaluate.stderr
    assert json.loads(out.read_text())["pass_at_k"]["hybrid"]["10"] >= 90.0
    assert ROOT.joinpath("cli", "main.py").exists()  # situate's own files untouched
