"""A virtual environment of a test's own, layered over the project's: a `.pth` adds the project's
site-packages (situate, editable, and its dependencies), so what a test installs or uninstalls
there is seen there only, never by another test, worker or engineer using the project's venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


class Env:
    """A virtual environment over the project's: what is installed in it is seen there only."""

    def __init__(self, where: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
        self.python = str(where / "bin" / "python")
        site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True, check=True)
        base = sysconfig.get_paths()["purelib"]  # the project's: situate, editable, and its deps
        Path(site.stdout.strip(), "project.pth").write_text(
            f"import site; site.addsitedir({base!r})\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SITUATE_")}

    def pip(self, *args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "pip", "--python", self.python, *args,
                               "--no-input", "-q"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr

    def install(self, source: Path, into: Path) -> None:
        """`pip install -e` of a copy of `source` (the build leaves its files beside the copy)."""
        copy = into / source.name
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
        self.pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(copy))

    def run(self, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, *args], cwd=cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def situate(self, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        return self.run("-m", "situate.cli.main", *args, cwd=cwd)
