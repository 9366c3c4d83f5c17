"""Every face of situate's search ranks as `situate evaluate` measured.

One collection for the module: the codebase benchmark (737 chunks) ingested once by `situate
ingest` with the default settings (structural contexts, MiniLM) into a `milvus-lite server`, so
that the servers' processes and this one share it. `situate evaluate`, in a process of its own,
runs its 248 queries in dense, BM25 and hybrid and writes the hits it ranked each query by into
its JSON (the golden ranks it measured are checked to come from them).
Then every query of every mode goes through each face: `Retriever`, `situate api`
over HTTP (httpx), `situate mcp` over stdio (the SDK's own client), the LangChain retriever's
`invoke` and the LlamaIndex retriever's `retrieve`; each query's hit ids, in order, must equal
evaluate's. The same servers then answer bad input (4xx, tool errors, InputError), refuse a
request without the token (401), and live through their Milvus server stopping and starting
again (503 during, 200 after, no restart, no traceback, no secret in the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from situate.api.http import auto_processes, server_processes
from tests.conftest import CODEBASE
from tests.fakes.milvus_server import MilvusServer, free_port, stop_process

pytestmark = [pytest.mark.slow]

MODES = ("dense", "bm25", "hybrid")
K = 20  # evaluate's deepest cut-off (5, 10, 20): the hits it ranks each query by
TOKEN = f"situate-test-{secrets.token_hex(12)}"
SITUATE = str(Path(sys.executable).with_name("situate"))


@dataclass
class Codebase:
    uri: str
    queries: list[str]
    evaluated: dict[str, list[list[str]]]  # mode -> each query's hit ids, as evaluate ranked them
    server: MilvusServer
    env: dict[str, str]


@pytest.fixture(scope="module")
def codebase(tmp_path_factory) -> Iterator[Codebase]:
    """The codebase ingested by `situate ingest` with the default settings into a
    `milvus-lite server`, as a user's collection is made, and the hits `situate evaluate`, run in
    a process of its own, ranked each query by (its JSON's `per_query[].hits`)."""
    from situate.tasks.retrieval.metrics import golden_ranks, load_eval_set

    root = tmp_path_factory.mktemp("faces")
    server = MilvusServer(root / "milvus")
    uri = server.start()
    env = {"SITUATE_MILVUS_URI": uri, "SITUATE_CACHE_DIR": str(root / "cache"),
           "SITUATE_RESULTS_DIR": str(root / "results")}
    user = {**{k: v for k, v in os.environ.items()
               if k not in ("ANTHROPIC_API_KEY", "COHERE_API_KEY", "SITUATE_API_TOKEN")}, **env}
    try:
        for command in (["ingest", str(CODEBASE / "codebase_chunks.json")],
                        ["evaluate", str(CODEBASE / "evaluation_set.jsonl"), "--json",
                         str(root / "evaluate.json")]):
            ran = subprocess.run([SITUATE, *command, "--collection", "codebase"], env=user,
                                 capture_output=True, text=True, timeout=1200)
            assert ran.returncode == 0, ran.stderr
        result = json.loads((root / "evaluate.json").read_text())
        assert set(result["pass_at_k"]) == set(MODES)
        evaluated = {m: [q["hits"][m] for q in result["per_query"]] for m in MODES}
        queries = load_eval_set(CODEBASE / "evaluation_set.jsonl")
        assert len(queries) == 248 and all(len(evaluated[m]) == 248 for m in MODES)
        # What was recorded is what evaluate measured: its golden ranks come from these hits.
        texts = _texts(uri)
        for mode in MODES:
            for q, ids, measured in zip(queries, evaluated[mode], result["per_query"],
                                        strict=True):
                assert 0 < len(ids) <= K  # BM25 returns only chunks sharing a term
                assert golden_ranks(q.golden, [texts[i] for i in ids]) == measured["ranks"][mode]
        yield Codebase(uri, [q.query for q in queries], evaluated, server,
                       {**user, "SITUATE_API_TOKEN": TOKEN})
    finally:
        server.stop()


def _texts(uri: str) -> dict[str, tuple[str, str]]:
    from situate.storage.milvus import MilvusStore

    with MilvusStore(uri) as store:
        return {r["id"]: (r["doc_id"], r["text"])
                for r in store.rows("codebase", fields=("id", "doc_id", "text"))}


@dataclass
class Api:
    url: str
    proc: subprocess.Popen
    log: Path

    def post(self, body: Any, token: str | None = TOKEN, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(f"{self.url}/search", json=body, headers=headers, timeout=120, **kw)


@pytest.fixture(scope="module")
def api(codebase, tmp_path_factory) -> Iterator[Api]:
    """`situate api` serving the codebase, with a token; two model processes embed its queries."""
    with _started_api(codebase, tmp_path_factory.mktemp("api") / "api.log") as started:
        yield started


@contextlib.contextmanager
def _started_api(codebase: Codebase, log: Path) -> Iterator[Api]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([SITUATE, "api", "--collection", "codebase", "--port", str(port),
                                 "--workers", "2"],
                                env=codebase.env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield Api(url, proc, log)
    finally:
        stop_process(proc, timeout=30)


# --- each face, every query of every mode ----------------------------------------------------

def _by_retriever(codebase: Codebase, retriever: Any) -> dict[str, list[list[str]]]:
    return {m: [[h.id for h in retriever.search(q, K, m)] for q in codebase.queries] for m in MODES}


def _by_langchain(codebase: Codebase, retriever: Any) -> dict[str, list[list[str]]]:
    from situate.integrations.langchain import SituateRetriever

    out = {}
    for mode in MODES:
        face = SituateRetriever(collection="codebase", uri=codebase.uri, k=K, mode=mode,
                                retriever=retriever)
        out[mode] = [[d.metadata["id"] for d in face.invoke(q)] for q in codebase.queries]
    return out


def _by_llamaindex(codebase: Codebase, retriever: Any) -> dict[str, list[list[str]]]:
    from situate.integrations.llamaindex import SituateRetriever

    out = {}
    for mode in MODES:
        face = SituateRetriever("codebase", codebase.uri, k=K, mode=mode, retriever=retriever)
        out[mode] = [[n.node.node_id for n in face.retrieve(q)] for q in codebase.queries]
    return out


def _by_http(codebase: Codebase, api: Api) -> dict[str, list[list[str]]]:
    out = {}
    with httpx.Client(base_url=api.url, timeout=120,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        for mode in MODES:
            out[mode] = []
            for q in codebase.queries:
                r = client.post("/search", json={"query": q, "k": K, "mode": mode})
                assert r.status_code == 200, r.text
                out[mode].append([h["id"] for h in r.json()["hits"]])
    return out


def _by_mcp(codebase: Codebase, checks: Callable[[Any], Any] | None = None
            ) -> dict[str, list[list[str]]]:
    """Every query through `situate mcp` on stdio, with the SDK's own client; then `checks`
    with the session."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def run() -> dict[str, list[list[str]]]:
        params = StdioServerParameters(command=SITUATE, args=["mcp", "--collection", "codebase"],
                                       env=codebase.env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out: dict[str, list[list[str]]] = {}
            for mode in MODES:
                out[mode] = []
                for q in codebase.queries:
                    result = await session.call_tool("search", {"query": q, "k": K, "mode": mode})
                    assert not result.is_error, result.content
                    out[mode].append([h["id"] for h in result.structured_content["hits"]])
            if checks is not None:
                await checks(session)
            return out

    return asyncio.run(run())


def _first_difference(face: dict[str, list[list[str]]], expected: dict[str, list[list[str]]]
                      ) -> str | None:
    for mode in MODES:
        for i, (got, want) in enumerate(zip(face[mode], expected[mode], strict=True)):
            if got != want:
                return f"{mode}, query {i}: {got[:5]}... != {want[:5]}..."
    return None


def test_every_face_ranks_every_query_as_evaluate_did(codebase, api):
    """Retriever, HTTP, MCP (stdio), LangChain and LlamaIndex: 248 queries x dense, bm25, hybrid,
    each query's hit ids in evaluate's order. The faces run at the same time (one thread each)."""
    from situate.api import Retriever

    mcp_said: dict[str, Any] = {}

    async def mcp_checks(session: Any) -> None:
        bad = await session.call_tool("search", {"query": " ", "k": 5})
        mcp_said["empty"] = (bad.is_error, bad.content[0].text)
        bad = await session.call_tool("search", {"query": "x", "k": 1001})
        mcp_said["k"] = (bad.is_error, bad.content[0].text)
        bad = await session.call_tool("search", {"query": "x", "mode": "nope"})
        mcp_said["mode"] = (bad.is_error, bad.content[0].text)
        described = await session.call_tool("describe_collection", {})
        mcp_said["described"] = described.structured_content
        found = await session.call_tool("search", {"query": codebase.queries[0], "k": 3})
        mcp_said["search"] = found.structured_content

    with Retriever("codebase", codebase.uri) as retriever:
        faces: dict[str, Callable[[], dict[str, list[list[str]]]]] = {
            "Retriever": lambda: _by_retriever(codebase, retriever),
            "LangChain": lambda: _by_langchain(codebase, retriever),
            "LlamaIndex": lambda: _by_llamaindex(codebase, retriever),
            "HTTP": lambda: _by_http(codebase, api),
            "MCP": lambda: _by_mcp(codebase, mcp_checks),
        }
        with ThreadPoolExecutor(len(faces)) as pool:
            futures = {name: pool.submit(face) for name, face in faces.items()}
            ranked = {name: f.result() for name, f in futures.items()}
        described = retriever.describe()
        http_hits = api.post({"query": codebase.queries[0], "k": 3}).json()
    differences = {name: d for name, hits in ranked.items()
                   if (d := _first_difference(hits, codebase.evaluated)) is not None}
    assert differences == {}
    # The MCP tool's structured result is POST /search's JSON (took_ms apart).
    assert {k: v for k, v in mcp_said["search"].items() if k != "took_ms"} == \
        {k: v for k, v in http_hits.items() if k != "took_ms"}
    assert set(http_hits["hits"][0]) == {"id", "doc_id", "index", "text", "context", "score",
                                         "metadata"}
    # The collection describes itself the same way on every face.
    http_described = httpx.get(f"{api.url}/collection", timeout=60,
                               headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert mcp_said["described"] == http_described
    assert http_described["rows"] == described.rows == 737
    assert http_described["embedder"] == "minilm:all-MiniLM-L6-v2"
    assert http_described["contexts"] == "structural"
    assert http_described["ingested"][:4].isdigit() and http_described["ingested"] == described.ingested
    # Bad input over MCP: one line each, as a tool error.
    for name, phrase in (("empty", "empty query"), ("k", "from 1 to 1000"), ("mode", "use one of")):
        is_error, text = mcp_said[name]
        assert is_error and phrase in text and "\n" not in text and "send JSON" not in text


# An application's script as people write them: no `if __name__ == "__main__":` guard.
APP = """\
import json, os, sys
from situate.api import Retriever
retriever = Retriever("codebase")
hits = retriever.search(os.environ["APP_QUERY"], k=5)
print(json.dumps({"hits": [h.id for h in hits],
                  "prefect": sorted(m for m in sys.modules if m.split(".")[0] == "prefect")}))
"""


def test_an_app_script_needs_no_main_guard_and_loads_no_prefect(codebase, tmp_path):
    """The script above, run from a file, from standard input and by `python -c`, prints
    evaluate's top 5 hybrid hits of a query, with no Prefect module loaded: the model runs in the
    script's own process, so nothing re-imports a `__main__` that standard input cannot give."""
    script = tmp_path / "app.py"
    script.write_text(APP)
    env = {**codebase.env, "APP_QUERY": codebase.queries[0]}
    runs = {"file": ([sys.executable, str(script)], None),
            "stdin": ([sys.executable, "-"], APP),
            "-c": ([sys.executable, "-c", APP], None)}
    for how, (command, stdin) in runs.items():
        ran = subprocess.run(command, input=stdin, env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
        assert ran.returncode == 0, (how, ran.stderr)
        said = json.loads(ran.stdout.strip().splitlines()[-1])
        assert said == {"hits": codebase.evaluated["hybrid"][0][:5], "prefect": []}, how


def test_concurrent_clients_get_evaluates_rankings(codebase, api):
    """Eight HTTP clients at once, every query of every mode: queries embedded together (in
    batches, by two model processes) and hybrid legs searched at the same time rank each query
    as evaluate did, one query at a time."""
    local = threading.local()

    def search(job: tuple[str, int]) -> list[str]:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=api.url, timeout=120,
                                        headers={"Authorization": f"Bearer {TOKEN}"})
        mode, i = job
        r = local.client.post("/search", json={"query": codebase.queries[i], "k": K, "mode": mode})
        assert r.status_code == 200, r.text
        return [h["id"] for h in r.json()["hits"]]

    jobs = [(mode, i) for i in range(len(codebase.queries)) for mode in MODES]
    with ThreadPoolExecutor(8) as pool:
        found = dict(zip(jobs, pool.map(search, jobs), strict=True))
    ranked = {mode: [found[mode, i] for i in range(len(codebase.queries))] for mode in MODES}
    assert _first_difference(ranked, codebase.evaluated) is None


def test_a_killed_api_leaves_no_model_process(codebase, tmp_path):
    """SIGKILL to `situate api` alone (not its process group): its server processes and their
    model processes notice and leave."""
    import psutil

    # two model processes (--workers 2) in each server process: one per core, at most 4
    processes = auto_processes(737, lite=True) if server_processes(0, codebase.uri) == 0 else 1
    wanted = 3 * processes if processes > 1 else 2
    with _started_api(codebase, tmp_path / "api.log") as server:
        deadline = time.monotonic() + 300
        while len(spawned := [c for c in psutil.Process(server.proc.pid).children(recursive=True)
                              if "spawn_main" in " ".join(c.cmdline())]) < wanted:
            assert time.monotonic() < deadline, spawned
            time.sleep(0.2)
        assert len(spawned) == wanted
        server.proc.kill()
        server.proc.wait(60)
    deadline = time.monotonic() + 60
    while alive := [m.pid for m in spawned if m.is_running() and m.status() != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, f"processes {alive} outlived situate api"
        time.sleep(0.2)


def test_bad_input_is_one_clear_answer_on_every_face(codebase, api):
    from situate.api import InputError, Retriever
    from situate.integrations.langchain import SituateRetriever as LangChainRetriever

    for body, status, phrase in (
            ({"query": "", "k": 5}, 422, "empty query: give words to search for"),
            ({"query": "x", "k": 0}, 422, "give a whole number from 1 to 1000"),
            ({"query": "x", "k": 1001}, 422, "give a whole number from 1 to 1000"),
            ({"query": "x", "mode": "nope"}, 422, "unknown retrieval mode 'nope'"),
            ({"query": "x", "k": "many"}, 422, "k='many' is not a number of hits"),
            ({"k": 5}, 422, "query is missing"),
            ({"query": "x", "collection": "other"}, 404, "collection 'other' is not served")):
        r = api.post(body)
        assert r.status_code == status, (body, r.text)
        detail = r.json()["detail"]
        assert phrase in detail and "\n" not in detail, detail
    assert "send JSON" in api.post({"query": ""}).json()["detail"]  # says what to send
    # Python: an InputError for each, and for a collection that does not exist.
    with pytest.raises(InputError, match="'nope' not found"):
        Retriever("nope", codebase.uri)
    with pytest.raises(InputError, match="was embedded with minilm:all-MiniLM-L6-v2, not e5-small"):
        Retriever("codebase", codebase.uri, embedder="e5-small")
    with Retriever("codebase", codebase.uri, mode="bm25") as retriever:
        first = asyncio.run(retriever.asearch(codebase.queries[0], 3))  # the same, from asyncio
        assert [h.id for h in first] == codebase.evaluated["bm25"][0][:3]
        for kwargs, phrase in (({"query": " "}, "empty query"), ({"query": "x", "k": 0}, "1000"),
                               ({"query": "x", "k": 1001}, "1000"),
                               ({"query": "x", "mode": "nope"}, "unknown retrieval mode")):
            with pytest.raises(InputError, match=phrase):
                retriever.search(**kwargs)
        # The framework retrievers, built as their users build them, delegate and say the same.
        face = LangChainRetriever(collection="codebase", uri=codebase.uri, k=3, mode="bm25")
        try:
            docs = face.invoke(codebase.queries[0])
            assert [d.metadata["id"] for d in docs] == codebase.evaluated["bm25"][0][:3]
            assert docs[0].page_content and {"doc_id", "index", "context", "score"} <= set(
                docs[0].metadata)
            with pytest.raises(InputError, match="empty query"):
                face.invoke("")
        finally:
            face.close()


def test_a_token_is_needed_and_loopback_is_the_default(codebase, api, tmp_path):
    for token in (None, "wrong"):
        r = api.post({"query": "x"}, token=token)
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["detail"]
        assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{api.url}/healthz", timeout=30).json() == {"status": "ok",
                                                                  "collection": "codebase"}
    assert httpx.get(f"{api.url}/docs", timeout=30).status_code == 200
    # Beyond loopback without a token: refused, in one line, before anything is opened.
    env = {k: v for k, v in codebase.env.items() if k != "SITUATE_API_TOKEN"}
    for command in (["api"], ["mcp", "--transport", "streamable-http"]):
        refused = subprocess.run([SITUATE, *command, "--collection", "codebase", "--host",
                                  "0.0.0.0", "--port", str(free_port())], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            f"situate {command[0]}: error: --host 0.0.0.0 is not a loopback address and "
            f"SITUATE_API_TOKEN is not set: set it (`situate {command[0]} --new-token` makes "
            "one; clients then send Authorization: Bearer <SITUATE_API_TOKEN>), or run "
            f"`situate {command[0]}` on 127.0.0.1"]


def test_mcp_over_streamable_http_needs_the_token_and_ranks_the_same(codebase):
    """The MCP server's HTTP transport, in this process: 401 without the token, and the same
    hits as evaluate's with it."""
    import uvicorn
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from situate.api import Retriever
    from situate.api.guard import Guard, Policy
    from situate.api.mcp import create_server

    port = free_port()
    with Retriever("codebase", codebase.uri) as retriever:
        app = Guard(create_server(retriever).streamable_http_app(host="127.0.0.1"),
                    Policy(token=TOKEN))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            deadline = time.monotonic() + 60
            while not server.started:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert httpx.post(url, json={}, timeout=30).status_code == 401

            async def run() -> list[list[str]]:
                import httpx2

                async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"},
                                              timeout=120) as http, \
                        streamable_http_client(url, http_client=http) as (read, write), \
                        ClientSession(read, write) as session:
                    await session.initialize()
                    out = []
                    for q in codebase.queries[:20]:
                        result = await session.call_tool("search", {"query": q, "k": K,
                                                                    "mode": "hybrid"})
                        out.append([h["id"] for h in result.structured_content["hits"]])
                    return out

            assert asyncio.run(run()) == codebase.evaluated["hybrid"][:20]
        finally:
            server.should_exit = True
            thread.join(30)


def test_a_milvus_restart_is_503_then_served_again_without_a_restart(codebase, api):
    """Runs last: stops the module's Milvus server while `situate api` serves, then starts it."""
    query = codebase.queries[1]
    assert api.post({"query": query, "k": K, "mode": "hybrid"}).status_code == 200
    codebase.server.stop()
    try:
        during = [api.post({"query": query, "k": K, "mode": mode}) for mode in MODES]
        for r in during:
            assert r.status_code == 503, r.text
            assert "did not answer" in r.json()["detail"] and "try again" in r.json()["detail"]
            assert r.headers.get("retry-after") == "5"
    finally:
        codebase.server.start()
    deadline = time.monotonic() + 120

    def served(mode: str) -> Any:
        """The first request after the restart that a server process answers may still find
        Milvus starting (each of the server processes finds it for itself)."""
        while True:
            r = api.post({"query": query, "k": K, "mode": mode})
            if r.status_code == 200 or time.monotonic() > deadline:
                return r
            assert r.status_code == 503, r.text
            time.sleep(1)

    # twice each mode: the connections are handed to the server processes in turn
    for mode in (*MODES, *MODES):
        r = served(mode)
        assert r.status_code == 200, r.text
        assert [h["id"] for h in r.json()["hits"]] == codebase.evaluated[mode][1]
    assert api.proc.poll() is None  # the same process throughout
    log = api.log.read_text()
    assert "Traceback" not in log and TOKEN not in log
    assert "503" in log and "did not answer" in log


def test_the_api_stops_cleanly_on_sigterm(api):
    api.proc.send_signal(signal.SIGTERM)
    assert api.proc.wait(60) == 0
    log = api.log.read_text()
    assert log.rstrip().endswith("situate api: stopped (SIGTERM)") and "Traceback" not in log
    assert json.dumps(TOKEN) not in log
