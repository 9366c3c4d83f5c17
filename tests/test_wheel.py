"""The package installs whole: a built wheel holds every module of every folder that
makes up `situate.*` (setup.py finds them; no list is kept by hand), and installed without `-e`
into a fresh virtual environment it runs: `situate --version`, an ingest of data/sample, a search
through `Retriever`.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_CORPUS

# Folders at the top of the repository that are not part of the package.
NOT_PACKAGED = {"tests", "benchmarks", "data", "build", ".typecheck"}


def folders() -> tuple[str, ...]:
    """setup.py's FOLDERS, read without running setup()."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FOLDERS":
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no FOLDERS")


def build_wheel(where: Path, source: Path = ROOT) -> Path:
    """A wheel of the package as `source` has it, built from a copy (the tree stays clean)."""
    src = where / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(source / name, src / name)
    for folder in folders():
        shutil.copytree(source / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = where / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", str(src), "-w", str(out)], check=True, capture_output=True,
                   text=True, timeout=300)
    (wheel,) = out.glob("situate-*.whl")
    return wheel


def missing_modules(wheel: Path) -> list[str]:
    """Every Python file under the package's folders that the wheel does not hold."""
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = sorted(f"situate/{path.relative_to(ROOT).as_posix()}" for folder in folders()
                     for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts)
    assert sources, "no sources found"
    return [s for s in sources if s not in names]


def test_every_package_folder_is_built_into_the_wheel(tmp_path):
    # Every folder at the top holding Python packages is in FOLDERS: a new one cannot be forgotten.
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert top - NOT_PACKAGED == set(folders())
    assert {"core", "storage", "tasks", "pipeline", "flows", "cli", "api", "integrations"} <= set(folders())
    wheel = build_wheel(tmp_path)
    assert missing_modules(wheel) == []
    with zipfile.ZipFile(wheel) as z:
        info = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
        assert "situate = situate.cli.main:main" in z.read(info).decode()
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
    text = metadata.decode()
    for extra in ("langchain", "llamaindex", "e5", "dev"):
        assert f"Provides-Extra: {extra}" in text


def fresh_venv(where: Path) -> Path:
    """A new virtual environment with nothing of this one's: its python."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    return where / "bin" / "python"


def install(python: Path, wheel: Path, full: bool) -> None:
    """The wheel installed into `python`'s fresh venv, without -e.

    `full`: with every dependency, as a user's `pip install situate-*.whl` (minutes: 2.8 GB of
    site-packages, torch among them, unpacked from pip's cache). Otherwise (CI's default) the
    dependencies are this environment's, which `make setup` resolved from the same metadata a
    moment ago: its site-packages is put on the fresh venv's path after the venv's own (a path
    line in a .pth file: the .pth files there, the editable install's among them, are not run, so
    the source tree stays out of reach), the wheel is installed with --no-deps, and `pip check`
    confirms that every requirement the wheel declares is met."""
    pip = [str(python), "-m", "pip", "-q", "--disable-pip-version-check"]
    if full:
        done = subprocess.run([*pip, "install", str(wheel)], capture_output=True, text=True,
                              timeout=3600)
        assert done.returncode == 0, done.stderr[-3000:]
        return
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(site, "situate-test-dependencies.pth").write_text(ours + "\n")
    # The venv's own old setuptools would stand in front of the newer one torch requires.
    subprocess.run([*pip, "uninstall", "-y", "setuptools"], capture_output=True, check=True,
                   timeout=300)
    done = subprocess.run([*pip, "install", "--no-deps", str(wheel)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.soak  # the soak tier (`make test-soak`): see README, Tests
def test_the_wheel_installed_alone_ingests_and_searches(tmp_path):
    """The wheel, installed without -e into a fresh venv, run outside the repository: the CLI,
    an ingest of the sample corpus, a search through `Retriever`, from the installed copy.
    SITUATE_WHEEL_CHECK=full installs every dependency too (see `install`)."""
    wheel = build_wheel(tmp_path / "build")
    python = fresh_venv(tmp_path / "venv")
    started = time.monotonic()
    install(python, wheel, full=os.environ.get("SITUATE_WHEEL_CHECK") == "full")
    print(f"installed in {time.monotonic() - started:.0f} s")
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SITUATE_", "PYTHON")) and k not in ("ANTHROPIC_API_KEY",
                                                                  "COHERE_API_KEY", "VIRTUAL_ENV")}
    env.update({"SITUATE_MILVUS_URI": str(work / "m.db"), "SITUATE_CACHE_DIR": str(work / "cache"),
                "SITUATE_RESULTS_DIR": str(work / "results")})
    situate = str(python.with_name("situate"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    assert run(situate, "--version").stdout.strip() == "situate 0.1.0"
    assert "chunks_written" in run(situate, "ingest", str(SAMPLE_CORPUS), "--collection",
                                   "sample").stdout
    script = work / "search.py"
    script.write_text(
        "import situate.api, situate.tasks.contexts.engine, situate.tasks.synth\n"
        "from situate.api import Retriever\n"
        "if __name__ == '__main__':\n"
        "    print(situate.api.__file__)\n"
        "    with Retriever('sample') as r:\n"
        "        for h in r.search('How is the retry delay computed?', k=3):\n"
        "            print(h.doc_id)\n")
    out = run(str(python), str(script)).stdout.splitlines()
    assert out[0].startswith(str(tmp_path / "venv")), out  # the installed copy, not the tree
    assert "harbor/backoff.rs" in out[1:], out
