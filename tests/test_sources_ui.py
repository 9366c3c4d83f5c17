"""A scheduled deployment syncing a website, seen in the Prefect UI: `situate serve` of a site
served by `python -m http.server` on 127.0.0.1, two runs triggered (the first sync, then one after
an edit, an add and a delete), and the second run's page in headless Chromium showing the sync's
summary artifact (new, changed, unchanged, deleted, failed, skipped, and the sync's own counts).
Screenshots are kept under tests/output/ui/ as test_ui's are."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.fakes.milvus_server import free_port, stop_process, wait_for_port
from tests.fakes.prefect_server import wait_until
from tests.test_ui import (
    BIN,
    CHROMIUM,
    OUTPUT,
    Browser,
    _artifact,
    _env,
    _run_deployment,
    _start,
    prefect_server,
)

# Another combination of what test_ui checks (a served deployment, its run and artifacts in the
# UI), with a website as the corpus: left to `make test-soak`.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.soak]
__all__ = ["prefect_server"]  # the module-scoped server fixture, shared with test_ui

COLLECTION = "site_ui"
ARTIFACT = "ingest-summary-site-ui"


def _page(root: Path, n: int, extra: str = "") -> None:
    (root / "docs" / f"p{n}.html").write_text(
        f"<html><head><title>Page {n}</title></head><body><h1>Page {n}</h1><p>Page {n} explains "
        f"topic {n} at some length so that it makes a chunk of its own. {extra}</p></body></html>")


def _sitemap(root: Path, base: str, pages: list[int]) -> None:
    locs = "".join(f"<url><loc>{base}/docs/p{n}.html</loc></url>" for n in pages)
    (root / "docs" / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/'
        f'sitemap/0.9">{locs}</urlset>')


def _rows(artifact: dict) -> dict[str, str]:
    data = json.loads(artifact["data"]) if isinstance(artifact["data"], str) else artifact["data"]
    return {r["metric"]: r["value"] for r in data}


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make test installs it)")
@pytest.mark.timeout(900)
def test_a_served_website_sync_shows_its_run_and_artifact(prefect_server, tmp_path):
    api, home = prefect_server
    site = tmp_path / "site"
    (site / "docs").mkdir(parents=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    for n in range(3):
        _page(site, n)
    _sitemap(site, base, [0, 1, 2])
    (site / "robots.txt").write_text(f"User-agent: *\nSitemap: {base}/docs/sitemap.xml\n")
    server = _start([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                     "--directory", str(site)], {}, tmp_path / "site.log", tmp_path)
    state = tmp_path / "state"
    env = _env(home, api, SITUATE_MILVUS_URI=str(state / "milvus.db"),
               SITUATE_CACHE_DIR=str(state / "cache"), SITUATE_RESULTS_DIR=str(state / "results"),
               PREFECT_RUNNER_POLL_FREQUENCY="2")
    serve = None
    browser = None
    out = tmp_path / "ui"
    out.mkdir()
    try:
        wait_for_port(port, server, 30, "http.server")
        serve = _start([str(BIN / "situate"), "serve", f"{base}/docs/", "--collection", COLLECTION,
                        "--context", "structural", "--name", "site", "--ingest-cron", "0 0 1 1 *"],
                       env, tmp_path / "serve.log", tmp_path)
        wait_until(lambda: httpx.get(f"{api}/deployments/name/ingest/site").status_code == 200,
                   120, "deployment ingest/site")
        dep = httpx.get(f"{api}/deployments/name/ingest/site").json()
        assert [x["schedule"]["cron"] for x in dep["schedules"]] == ["0 0 1 1 *"]
        assert dep["parameters"]["options"]["corpus"] == f"{base}/docs/"

        _run_deployment("ingest/site", env, tmp_path)
        assert _rows(_artifact(api, ARTIFACT))["new"] == "3"

        _page(site, 1, "Edited.")  # an edit, an add and a delete
        _page(site, 3)
        (site / "docs" / "p2.html").unlink()
        _sitemap(site, base, [0, 1, 3])
        _run_deployment("ingest/site", env, tmp_path)
        artifact = _artifact(api, ARTIFACT)
        rows = _rows(artifact)
        assert (rows["new"], rows["changed"], rows["unchanged"], rows["deleted_documents"]) == (
            "1", "1", "1", "1"), rows
        assert rows["source failed"] == "0" and rows["source gone"] == "1", rows
        runs = httpx.post(f"{api}/flow_runs/filter", json={
            "deployments": {"id": {"any_": [dep["id"]]}},
            "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}},
            "sort": "START_TIME_DESC"}).json()
        assert len(runs) == 2, runs
        run = runs[0]

        browser = Browser(tmp_path / "chromium", tmp_path / "chromium.log")
        ui = api.removesuffix("/api")
        browser.goto(f"{ui}/runs/flow-run/{run['id']}")
        browser.wait_for([run["name"], "Artifacts", "Completed"])
        wait_until(lambda: browser.click("Artifacts"), 30, "Artifacts tab")
        browser.wait_for([ARTIFACT])
        browser.capture("site-sync-run-artifacts", out)

        browser.goto(f"{ui}/artifacts/artifact/{artifact['id']}")
        text = browser.wait_for([ARTIFACT, "deleted_documents", "source gone"])
        text, _ = browser.capture("site-sync-summary", out)
        for metric in ("new", "changed", "unchanged", "deleted_documents", "skipped_empty",
                       "skipped_large_files", "source listed", "source fetched",
                       "source unchanged (not fetched)", "source gone", "source failed"):
            assert metric in text, f"the artifact's page has no {metric}"
            assert re.search(rf"(^|\n){re.escape(metric)}\s+{rows[metric]}\s", text), metric
    finally:
        if browser is not None:
            browser.close()
        if serve is not None:
            stop_process(serve, sig=signal.SIGINT)
        stop_process(server)
        OUTPUT.mkdir(parents=True, exist_ok=True)
        for f in out.glob("*"):
            shutil.copy2(f, OUTPUT / f.name)
