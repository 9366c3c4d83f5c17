"""situate installs as one namespaced package (`situate.*`): another distribution that ships
top-level `flows`, `tasks` and `storage` packages can live in the same environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_CORPUS, SAMPLE_EVAL

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


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True, capture_output=True,
                   text=True, timeout=300)


@pytest.mark.slow
def test_situate_works_beside_a_distribution_with_top_level_flows_tasks_storage(tmp_path):
    _pip("install", "--no-build-isolation", "--no-deps", str(_build_intruder(tmp_path)))
    try:
        probe = subprocess.run([sys.executable, "-c", "import storage"], capture_output=True,
                               text=True, cwd=tmp_path)
        assert "situate-intruder" in probe.stderr  # the intruder really is installed and first
        situate = Path(sys.executable).with_name("situate")
        env = {**os.environ, "SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
               "SITUATE_CACHE_DIR": str(tmp_path / "cache"),
               "SITUATE_RESULTS_DIR": str(tmp_path / "results")}
        env.pop("ANTHROPIC_API_KEY", None)
        env.pop("COHERE_API_KEY", None)
        ingest = subprocess.run([str(situate), "ingest", str(SAMPLE_CORPUS), "--collection", "sample"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert ingest.returncode == 0, ingest.stderr
        assert "chunks_written" in ingest.stdout
        out = tmp_path / "r.json"
        evaluate = subprocess.run([str(situate), "evaluate", str(SAMPLE_EVAL), "--collection", "sample",
                                   "--json", str(out)], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=600)
        assert evaluate.returncode == 0, evaluate.stderr
        assert json.loads(out.read_text())["pass_at_k"]["hybrid"]["10"] >= 90.0
    finally:
        _pip("uninstall", "-y", "situate-intruder")
    assert ROOT.joinpath("cli", "main.py").exists()  # situate's own files untouched
