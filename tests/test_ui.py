"""The Prefect UI as a user sees it: a real `prefect server start`, the deployments served by
`situate serve`, runs triggered with `prefect deployment run`, and headless Chromium (Debian's
`chromium`) driven over the DevTools protocol to load the pages, read the rendered text and take
screenshots (kept under tests/output/ui/)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, SAMPLE_CORPUS, SAMPLE_EVAL
from tests.fakes.milvus_server import free_port, stop_process, wait_for_port
from tests.fakes.prefect_server import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BIN = Path(sys.executable).parent
COLLECTION = "ui_sample"
OUTPUT = ROOT / "tests" / "output" / "ui"
# Every file of the sample corpus is a document situate reads (code, Markdown, PDF, Office...).
SAMPLE_DOCUMENTS = str(sum(1 for p in SAMPLE_CORPUS.rglob("*") if p.is_file()))


def _env(home: Path, api: str, **extra: str) -> dict[str, str]:
    """This test's own Prefect home and API for every child; nothing inherited from the session."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "SITUATE_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DO_NOT_TRACK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


def _start(cmd: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """`prefect server start` on a free loopback port with its own PREFECT_HOME (UI on)."""
    tmp_path = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    home = tmp_path / "prefect-home"
    env = _env(home, api, PREFECT_UI_ENABLED="true", PREFECT_UI_API_URL=api)
    proc = _start([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                  env, tmp_path / "prefect-server.log", tmp_path)
    try:
        wait_for_port(port, proc, 120, "prefect server")
        wait_until(lambda: httpx.get(f"{api}/health", timeout=2).status_code == 200, 120, "server health")
        yield api, home
    finally:
        stop_process(proc)


class Browser:
    """Headless Chromium over the DevTools protocol: navigate, read text, click, screenshot."""

    def __init__(self, profile: Path, log: Path, args: tuple[str, ...] = ()) -> None:
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        self.proc = _start([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                            "--window-size=1400,1300", "--remote-debugging-port=0",
                            "--remote-debugging-address=127.0.0.1", *args, "about:blank"],
                           dict(os.environ), log, profile)
        port_file = profile / "DevToolsActivePort"
        port = wait_until(lambda: port_file.exists() and port_file.read_text().split("\n")[0].strip(), 30,
                     "chromium DevTools port")
        pages = wait_until(lambda: [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json()
                               if t["type"] == "page"], 30, "chromium page target")
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self._id = 0
        self.call("Page.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        return self.eval("document.body ? document.body.innerText : ''") or ""

    def wait_for(self, needles: list[str], timeout: float = 60) -> str:
        return wait_until(lambda: (t := self.text()) and all(n in t for n in needles) and t, timeout,
                     f"page showing {needles}")

    def click(self, label: str) -> bool:
        return bool(self.eval(
            "(() => { const e = [...document.querySelectorAll('button, [role=tab], a, li')]"
            f".find(e => e.textContent.trim() === {json.dumps(label)}); if (e) e.click(); return !!e; }})()"))

    def capture(self, name: str, out: Path) -> tuple[str, str]:
        """Screenshot and rendered DOM of the current page, saved as NAME.png and NAME.html."""
        time.sleep(0.5)  # let the last render paint
        png = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        (out / f"{name}.png").write_bytes(png)
        dom = self.eval("document.documentElement.outerHTML") or ""
        (out / f"{name}.html").write_text(dom)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        return self.text(), dom

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            stop_process(self.proc)


def _run_deployment(name: str, env: dict[str, str], cwd: Path) -> None:
    proc = subprocess.run([str(BIN / "prefect"), "deployment", "run", name, "--watch",
                           "--watch-timeout", "300"], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=360)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Completed" in proc.stdout, proc.stdout[-2000:]


def _flow_run(api: str, flow: str) -> dict[str, Any]:
    dep = httpx.get(f"{api}/deployments/name/{flow}/situate").json()
    runs = httpx.post(f"{api}/flow_runs/filter",
                      json={"deployments": {"id": {"any_": [dep["id"]]}},
                            "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}}).json()
    assert len(runs) == 1, runs
    return runs[0]


def _artifact(api: str, key: str) -> dict[str, Any]:
    found = httpx.post(f"{api}/artifacts/filter", json={"artifacts": {"key": {"any_": [key]}},
                                                           "sort": "CREATED_DESC"}).json()
    assert found, key
    return found[0]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make test installs it)")
@pytest.mark.timeout(900)
def test_deployment_runs_show_in_the_ui(prefect_server, tmp_path):
    api, home = prefect_server
    out = tmp_path / "ui"
    out.mkdir()
    state = tmp_path / "state"
    env = _env(home, api, SITUATE_MILVUS_URI=str(state / "milvus.db"),
               SITUATE_CACHE_DIR=str(state / "cache"), SITUATE_RESULTS_DIR=str(state / "results"),
               PREFECT_RUNNER_POLL_FREQUENCY="2")
    serve = _start([str(BIN / "situate"), "serve", str(SAMPLE_CORPUS), "--collection", COLLECTION,
                    "--eval-set", str(SAMPLE_EVAL), "--context", "structural",
                    # Live schedules, far enough away that no scheduled run starts during the test.
                    "--ingest-cron", "0 0 1 1 *", "--evaluate-cron", "30 0 1 1 *"],
                   env, tmp_path / "serve.log", tmp_path)
    browser = None
    try:
        for flow in ("ingest", "evaluate"):
            wait_until(lambda flow=flow: httpx.get(
                f"{api}/deployments/name/{flow}/situate").status_code == 200,
                120, f"deployment {flow}/situate")
        dep = httpx.get(f"{api}/deployments/name/ingest/situate").json()
        options = dep["parameters"]["options"]  # the flow's one parameter: its options
        assert options["prune"] is True and options["collection"] == COLLECTION
        assert "milvus_uri" in options and "chunk_size" not in options  # the rest: at run time
        assert [x["schedule"]["cron"] for x in dep["schedules"]] == ["0 0 1 1 *"]
        assert dep["schedules"][0]["active"]
        assert "situate" in dep["tags"]
        # Prefect's scheduler turns the cron schedule into upcoming runs (it would not with SQLAlchemy 2.1).
        upcoming = wait_until(lambda: httpx.post(f"{api}/flow_runs/filter", json={
            "deployments": {"id": {"any_": [dep["id"]]}},
            "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}}).json(), 60, "scheduled runs")
        assert all("-01-01T00:00:00" in r["expected_start_time"] for r in upcoming), upcoming

        _run_deployment("ingest/situate", env, tmp_path)
        _run_deployment("evaluate/situate", env, tmp_path)
        ingest_run, evaluate_run = _flow_run(api, "ingest"), _flow_run(api, "evaluate")
        table = _artifact(api, "pass-at-k-ui-sample")
        summary = _artifact(api, "ingest-summary-ui-sample")
        rows = json.loads(table["data"]) if isinstance(table["data"], str) else table["data"]
        assert {r["mode"] for r in rows} == {"dense", "bm25", "hybrid"}
        assert any(r["metric"] == "new" and r["value"] == SAMPLE_DOCUMENTS for r in (
            json.loads(summary["data"]) if isinstance(summary["data"], str) else summary["data"]))

        browser = Browser(tmp_path / "chromium", tmp_path / "chromium.log")
        ui = api.removesuffix("/api")
        browser.goto(f"{ui}/runs")
        text, dom = browser.capture("flow-runs", out) if browser.wait_for(
            [ingest_run["name"], evaluate_run["name"]]) else ("", "")
        assert ingest_run["name"] in dom and evaluate_run["name"] in dom
        assert "ingest" in text and "evaluate" in text

        browser.goto(f"{ui}/runs/flow-run/{evaluate_run['id']}")
        browser.wait_for([evaluate_run["name"], "Artifacts", "Completed"])
        wait_until(lambda: browser.click("Artifacts"), 30, "Artifacts tab")
        browser.wait_for(["pass-at-k-ui-sample", "evaluation-report-ui-sample"])
        text, _ = browser.capture("evaluate-run-artifacts", out)
        assert "Pass@k (%) of ui_sample" in text

        browser.goto(f"{ui}/artifacts/artifact/{table['id']}")
        browser.wait_for(["pass-at-k-ui-sample", "hybrid", "pass@20"])
        text, dom = browser.capture("pass-at-k-table", out)
        for r in rows:  # every cell of the table the flow computed is on the page
            for col, value in r.items():
                assert col in text
                assert str(value) in text or f"{value:g}" in text, (col, value)

        # The evaluation report carries its Pass@k chart as a PNG data URI: the UI renders it,
        # and the browser decodes it (a broken or blocked image has naturalWidth 0).
        report = _artifact(api, "evaluation-report-ui-sample")
        assert "](data:image/png;base64," in report["data"]
        browser.goto(f"{ui}/artifacts/artifact/{report['id']}")
        browser.wait_for(["Pass@k on", "Queries every mode missed", "median ms"])
        images = wait_until(lambda: (found := browser.eval(
            "[...document.images].filter(i => i.src.startsWith('data:image/png;base64,'))"
            ".map(i => ({w: i.naturalWidth, h: i.naturalHeight, done: i.complete, alt: i.alt}))"))
            and all(i["done"] for i in found) and found, 30, "the chart image decoded")
        assert len(images) == 1 and images[0]["w"] >= 600 and images[0]["h"] >= 400, images
        assert images[0]["alt"].startswith("Pass@k of ui_sample")
        browser.capture("evaluation-report", out)

        browser.goto(f"{ui}/runs/flow-run/{ingest_run['id']}")
        browser.wait_for([ingest_run["name"], "Artifacts", "Completed"])
        wait_until(lambda: browser.click("Artifacts"), 30, "Artifacts tab")
        text = browser.wait_for(["ingest-summary-ui-sample", "ingest-progress-ui-sample"])
        browser.capture("ingest-run-artifacts", out)

        # A custom run of the ingest deployment: Prefect builds its form from the options model
        # (the flow's one parameter), every field with its description.
        from situate.pipeline.options import IngestOptions

        browser.goto(f"{ui}/deployments/deployment/{dep['id']}/run")
        browser.wait_for(["Parameters", "Corpus", "Chunk Size", "Context Tokens"], 60)
        text, _ = browser.capture("ingest-custom-run-form", out)
        for name, field in IngestOptions.model_fields.items():
            title = name.replace("_", " ").title()  # pydantic's title of the field
            assert title in text, f"the run form has no field {title}"
            assert (field.description or "")[:40] in text, f"the run form lacks {name}'s help"
    finally:
        if browser is not None:
            browser.close()
        # Ctrl-C, as a user stops it (SIGTERM works as well; tests/test_serve.py checks both).
        stop_process(serve, sig=signal.SIGINT)
        OUTPUT.mkdir(parents=True, exist_ok=True)
        for f in out.glob("*"):
            shutil.copy2(f, OUTPUT / f.name)


@pytest.mark.timeout(600)
def test_prefect_yaml_deployments_run_on_a_process_worker(prefect_server, tmp_path):
    """prefect.yaml as its header says: a process pool, `prefect deploy --all`, `prefect worker`."""
    api, home = prefect_server
    state = tmp_path / "state"
    env = _env(home, api, SITUATE_MILVUS_URI=str(state / "milvus.db"),
               SITUATE_CACHE_DIR=str(state / "cache"), SITUATE_RESULTS_DIR=str(state / "results"),
               PREFECT_WORKER_QUERY_SECONDS="2")
    prefect = str(BIN / "prefect")
    for cmd in ([prefect, "work-pool", "create", "situate", "--type", "process"],
                [prefect, "--no-prompt", "deploy", "--all"]):
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for flow, cron in (("ingest", "0 * * * *"), ("evaluate", "30 * * * *")):
        dep = httpx.get(f"{api}/deployments/name/{flow}/hourly").json()
        assert dep["work_pool_name"] == "situate"
        assert [s["schedule"]["cron"] for s in dep["schedules"]] == [cron]
    worker = _start([prefect, "worker", "start", "--pool", "situate"], env, tmp_path / "worker.log",
                    tmp_path)
    try:
        options = {"corpus": str(ROOT / "data" / "sample" / "corpus"), "collection": "yaml_sample",
                   "context": "structural", "prune": True}
        proc = subprocess.run([prefect, "deployment", "run", "ingest/hourly",
                               "--params", json.dumps({"options": options}),
                               "--watch", "--watch-timeout", "300"], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=360)
        assert proc.returncode == 0 and "Completed" in proc.stdout, proc.stdout[-2000:]
    finally:
        stop_process(worker, sig=signal.SIGTERM)
    summary = _artifact(api, "ingest-summary-yaml-sample")
    data = json.loads(summary["data"]) if isinstance(summary["data"], str) else summary["data"]
    values = {r["metric"]: r["value"] for r in data}
    assert values["new"] == SAMPLE_DOCUMENTS and values["rows"] == values["chunks_written"] != "0"
