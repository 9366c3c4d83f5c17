"""The documentation stays true to the code: the generated pages are what the code generates
today, every code block of the README, CONTRIBUTING.md and docs/ is either run here or marked with
the reason it cannot be, and every block that can run does, page by page, as a reader would run
it: against a copy of the sample data, with one ingested `sample` collection shared by all pages.
(`make docs` builds the site with --strict; `make test` runs it before these.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from docs.tools.blocks import Block, blocks, inventory, pages
from tests.conftest import ROOT

# What a reader's shell would not have: provider keys (so the default context is the free one)
# and situate's own settings (so every default is the documented one).
CLEARED = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
           "COHERE_API_KEY", "COHERE_BASE_URL", "VOYAGE_API_KEY", "OLLAMA_HOST", "PREFECT_API_URL")
BLOCK_TIMEOUT = 600


def _runnable_pages() -> list[Path]:
    return [p for p in pages() if any(b.kind in ("run", "background") for b in blocks(p))]


def test_generated_pages_are_current():
    """`generate --check`, in a process of its own (these tests register fake providers, which
    the CLI's help would list): a page that differs from what the code generates fails here."""
    # docs/ is imported from ROOT by path: a command run in this worker may have set
    # PYTHONSAFEPATH (flows/launch.py), which keeps the working directory off sys.path.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-m", "docs.tools.generate", "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "100", "PYTHONPATH": path})
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_code_block_is_run_or_says_why_not():
    found = inventory()  # an unmarked block that cannot run, or an unknown marker, raises
    assert len(found) > 50
    for block in found:
        assert block.kind in ("run", "background", "not run", "generated"), block.where
        if block.kind == "not run":
            assert len(block.reason) > 10, f"{block.where}: say why it is not run"
    run = {b.path for b in found if b.kind in ("run", "background")}
    assert {ROOT / "README.md", ROOT / "docs" / "tutorials" / "first-search.md"} <= run


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    head = readme.split("## Quickstart")[0]
    assert "make demo" in head and "make test" in head
    assert "make docs-serve" in readme


def test_the_readmes_headline_is_the_latest_measurement():
    """The README's figures are the codebase benchmark's latest result file's (the benchmarks
    page is generated from it)."""
    import json

    latest = json.loads((ROOT / "benchmarks" / "results" / "synth.json").read_text())
    hybrid = latest["labelled"]["pass_at_k"]["hybrid"]
    head = (ROOT / "README.md").read_text().split("## Set up")[0]
    assert f"**{hybrid['10']:.2f}%**" in head
    assert f"{hybrid['5']:.2f} at 5, {hybrid['20']:.2f} at 20" in head
    assert latest["started"].split()[0] in (ROOT / "README.md").read_text()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Where the blocks run: a copy of data/sample, the package's environment as `.venv`, and
    the `sample` collection every page may search, ingested once."""
    where = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "data" / "sample", where / "data" / "sample")
    (where / ".venv").symlink_to(Path(sys.prefix))
    env = {k: v for k, v in os.environ.items()
           if k not in CLEARED and not k.startswith("SITUATE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "100"
    _run(Block(ROOT / "docs" / "tutorials" / "first-search.md", 0, "bash",
               "situate ingest data/sample/corpus --collection sample\n", "run"), where, env)
    return where, env


@pytest.mark.slow
@pytest.mark.parametrize("page", _runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_blocks_of_a_page_run(page, workspace):
    where, env = workspace
    servers: list[subprocess.Popen] = []
    try:
        for n, block in enumerate(blocks(page)):
            if block.kind == "background":
                servers.append(_start(block, where, env, n))
            elif block.kind == "run":
                _run(block, where, env, n)
    finally:
        for server in servers:
            _stop(server)


def _command(block: Block, where: Path, n: int) -> list[str]:
    if block.language in ("python", "py"):
        script = where / f"block_{block.path.stem}_{n}.py"
        script.write_text(block.script())
        return [sys.executable, str(script)]
    return ["bash", "-eo", "pipefail", "-c", block.script()]


def _run(block: Block, where: Path, env: dict[str, str], n: int = 0) -> None:
    r = subprocess.run(_command(block, where, n), cwd=where, env=env, capture_output=True,
                       text=True, timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL)
    said = (f"{block.where}: exit {r.returncode}\n{block.script()}\n"
            f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
    assert r.returncode == 0, said
    # `situate search` exits 0 when it finds nothing: an example that shows a search shows hits.
    assert "no results" not in r.stdout.splitlines(), said


def _start(block: Block, where: Path, env: dict[str, str], n: int) -> subprocess.Popen:
    log = where / f"server_{block.path.stem}_{n}.log"
    with open(log, "w") as out:
        server = subprocess.Popen(_command(block, where, n), cwd=where, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"{block.where}: the server exited {server.returncode}\n"
                                 f"{log.read_text()[-4000:]}")
        try:
            urllib.request.urlopen(block.ready, timeout=2).close()
            return server
        except urllib.error.HTTPError:
            return server  # it answers
        except OSError:
            time.sleep(0.5)
    _stop(server)
    raise AssertionError(f"{block.where}: {block.ready} did not answer in 180 s\n"
                         f"{log.read_text()[-4000:]}")


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's whole process group (its model's process too), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=30)
            time.sleep(1)  # the group's other processes (the model's) end with their parent
        except subprocess.TimeoutExpired:
            continue


def test_the_gpu_section_prints_a_gpu_run_and_never_a_run_without_a_gpu(tmp_path, monkeypatch):
    """The benchmarks page's GPU section: a run of benchmarks/bench_gpu.py that saw a GPU is
    printed with the device named; a run that saw none, or no run at all, is said to hold no GPU
    figure."""
    import json

    from docs.tools import benchmark_page

    monkeypatch.setattr(benchmark_page, "RESULTS", tmp_path)
    assert "Not measured" in "\n".join(benchmark_page.bench_gpu())
    machine = {"cpu": "a CPU", "cores": 16, "python": "3.12.3"}
    run = {"command": "benchmarks/bench_gpu.py --out gpu.json", "started": "2026-12-01 10:00",
           "machine": machine, "gpu": {"torch": "2.11.0", "cuda": "13.0", "device": "NVIDIA H200"}}
    speed = {"texts": 10000, "cpu_texts": 5000, "ratio_default_over_cpu_default": 12.5,
             "default": {"device": "cuda", "backend": "torch", "precision": "fp16",
                         "forward_batch": 256, "rounds": [2400.0, 2500.0, 2450.0],
                         "chunks_per_second": 2450.0},
             "cpu_default": {"device": "cpu", "backend": "openvino", "precision": "fp32",
                             "cores": 16, "chunks_per_second": 196.0}}
    ingest = {"chunks": 100000, "wall_seconds": 100.0, "peak_rss_mib": 3000.0, "device": "cuda",
              "backend": "torch", "precision": "fp16", "ratio_ingest_over_embed_only": 1.6,
              "embed_only": {"wall_seconds": 62.5}}
    (tmp_path / "gpu.json").write_text(json.dumps({"run": run, "speed": speed, "ingest": ingest,
                                                   "batch_failed": {"traceback": "..."}}))
    page = "\n".join(benchmark_page.bench_gpu())
    assert "2,450 chunks/s on NVIDIA H200" in page and "12.5×" in page
    assert "100,000-chunk generated corpus" in page and "1.60× that" in page
    assert "failed in this run" in page and "batch" in page
    run["gpu"].pop("device")
    (tmp_path / "gpu.json").write_text(json.dumps({"run": run, "speed": speed}))
    assert "holds no GPU figure" in "\n".join(benchmark_page.bench_gpu())
