"""A real Prefect API server for tests of served deployments: `prefect server start` on a free
loopback port with its own PREFECT_HOME, plus what the tests ask it over HTTP (flow runs by
deployment and state).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.milvus_server import free_port, stop_process, wait_for_port

BIN = Path(sys.executable).parent


def prefect_env(home: Path, api: str, **extra: str) -> dict[str, str]:
    """This server's home and API for every child; no PREFECT_ or SITUATE_ setting inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "SITUATE_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DO_NOT_TRACK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    """`check()`'s first truthy value, polled; errors while the thing is not up yet are retried."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - not up yet
            last = e
        time.sleep(every)
    raise TimeoutError(f"{what}: not so after {timeout:.0f} s ({last})")


# What Prefect's own client retries: the server's SQLite busy (503), throttled (429) or its proxy
# (502). Such a request was rolled back, so sending it again is safe.
_RETRY_STATUS = (429, 502, 503)


def _send(method: str, url: str, attempts: int = 8, **kwargs: Any) -> httpx.Response:
    for attempt in range(attempts):
        r = httpx.request(method, url, timeout=10, **kwargs)
        if r.status_code not in _RETRY_STATUS or attempt == attempts - 1:
            r.raise_for_status()
            return r
        time.sleep(min(0.25 * 2 ** attempt, 4.0))
    raise AssertionError("unreachable")


@dataclass
class PrefectApi:
    api: str
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        return prefect_env(self.home, self.api, **extra)

    def deployment(self, flow: str, name: str) -> dict[str, Any]:
        return _send("GET", f"{self.api}/deployments/name/{flow}/{name}").json()

    def flow_runs(self, deployment_ids: list[str] | None = None,
                  states: list[str] | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"flow_runs": {}, "limit": 200}
        if deployment_ids:
            body["deployments"] = {"id": {"any_": deployment_ids}}
        if states:
            body["flow_runs"]["state"] = {"type": {"any_": states}}
        return _send("POST", f"{self.api}/flow_runs/filter", json=body).json()

    def task_runs(self, flow_run_id: str, states: list[str] | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200}
        if states:
            body["task_runs"] = {"state": {"type": {"any_": states}}}
        return _send("POST", f"{self.api}/task_runs/filter", json=body).json()

    def create_run(self, deployment_id: str) -> dict[str, Any]:
        """A run of the deployment due now, as `prefect deployment run` makes it."""
        return _send("POST", f"{self.api}/deployments/{deployment_id}/create_flow_run",
                     json={"state": {"type": "SCHEDULED"}}).json()

    def flow_run(self, run_id: str) -> dict[str, Any]:
        return _send("GET", f"{self.api}/flow_runs/{run_id}").json()


@contextmanager
def prefect_server(root: Path, startup: float = 180) -> Iterator[PrefectApi]:
    """`prefect server start` (UI off) under ROOT; yields its API and stops it on exit."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    api = PrefectApi(f"http://127.0.0.1:{port}/api", root / "prefect-home")
    env = api.env(PREFECT_UI_ENABLED="false")
    with open(root / "prefect-server.log", "wb") as out:
        proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, cwd=root, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc, startup, "prefect server")
        wait_until(lambda: httpx.get(f"{api.api}/health", timeout=2).status_code == 200, startup,
                   "prefect server health")
        yield api
    finally:
        stop_process(proc)
