"""A clone holds everything its tests, benchmarks and README commands read: the codebase
benchmark is committed under data/benchmarks/codebase, and nothing reads a folder beside the
repository (the sibling datasets folder a development machine once had there)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.conftest import CODEBASE, ROOT

# A path out of the repository into the sibling folder, however it is spelt (its name is joined
# here so this file is not itself such a path).
SIBLING = "sha" + "red"
OUTSIDE = re.compile(rf"\.\./{SIBLING}|{SIBLING}/datasets|parent\s*/\s*[\"']{SIBLING}[\"']")


def _tracked(*paths: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in listed.stdout.splitlines() if (ROOT / line).is_file()]


def test_the_codebase_benchmark_is_in_the_repository():
    assert CODEBASE == ROOT / "data" / "benchmarks" / "codebase"
    chunks = json.loads((CODEBASE / "codebase_chunks.json").read_text())
    queries = (CODEBASE / "evaluation_set.jsonl").read_text().splitlines()
    assert (len(chunks), sum(len(d["chunks"]) for d in chunks), len(queries)) == (90, 737, 248)
    assert "MIT License" in (CODEBASE / "LICENSE").read_text()
    ignored = subprocess.run(["git", "check-ignore", "-q", str(CODEBASE / "codebase_chunks.json")],
                             cwd=ROOT)
    assert ignored.returncode == 1  # not ignored: a commit carries it


def test_nothing_reads_a_folder_beside_the_repository():
    """Records of past runs included: the benchmark's files, byte for byte the ones those runs
    read, are named where a clone has them, so every recorded command runs in a clone."""
    files = _tracked("tests", "benchmarks", "Makefile", ".ci", "README.md", "CONTRIBUTING.md",
                     "flows", "pipeline", "cli", "docs", "mkdocs.yml", "pyproject.toml")
    assert len(files) > 100
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in files
             if p.suffix in ("", ".py", ".md", ".sh", ".yml", ".yaml", ".toml", ".json")
             and p.name != Path(__file__).name
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert not found, "\n".join(found)
