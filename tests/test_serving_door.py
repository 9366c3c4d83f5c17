"""A served collection is a door even on loopback: what `situate api` and `situate mcp
--transport streamable-http` let through, and what they never let out.

One small corpus is ingested once by `situate ingest` with the default settings into a Milvus
Lite file; a copy of that file is then served by a `milvus-lite server`, and the servers reach
it by a URI that carries a password (`http://situate:PASSWORD@127.0.0.1:PORT`), with
SITUATE_MILVUS_TOKEN set too. Every test here drives the real commands as subprocesses; the last
one reads every byte they wrote (stdout, stderr, logs, replies, the evaluation's files and the
Prefect database of its run) for the password, the token and a token sent in a query string.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.fakes.milvus_server import MilvusServer, free_port, stop_process

pytestmark = pytest.mark.slow

SITUATE = str(Path(sys.executable).with_name("situate"))
PASSWORD = f"pw-{secrets.token_hex(10)}"
MILVUS_TOKEN = f"mt-{secrets.token_hex(10)}"
API_TOKEN = f"situate-door-{secrets.token_hex(16)}"
QUERY_TOKEN = f"qs-{secrets.token_hex(10)}"
SECRETS = (PASSWORD, MILVUS_TOKEN, API_TOKEN, QUERY_TOKEN)
DOCS = {
    "retry.md": "# Retries\n\n## Backoff\n\nThe retry delay doubles after each failed attempt, "
                "from half a second up to ten seconds, with jitter.\n\n## Giving up\n\nAfter "
                "eight attempts the call fails with one line saying what to do.\n",
    "queue.md": "# Queues\n\nA dead letter queue keeps the messages no consumer could handle, "
                "so that an operator can replay them once the bug is fixed.\n",
    "cache.md": "# Cache\n\nEvery answer is cached on disk as it arrives, keyed by the model, the "
                "prompt version and the document's hash.\n",
}


@dataclass
class Door:
    root: Path
    lite: str  # the Milvus Lite file `situate ingest` wrote
    server: MilvusServer
    uri: str  # the server, with a password in the URI
    env: dict[str, str]
    written: list[Path] = field(default_factory=list)  # files whose every byte is checked
    said: list[str] = field(default_factory=list)  # outputs and replies, checked the same way


@pytest.fixture(scope="module")
def door(tmp_path_factory) -> Iterator[Door]:
    root = tmp_path_factory.mktemp("door")
    corpus = root / "corpus"
    corpus.mkdir()
    for name, text in DOCS.items():
        (corpus / name).write_text(text)
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "COHERE_API_KEY", "SITUATE_API_TOKEN")}
    env.update(SITUATE_CACHE_DIR=str(root / "cache"), SITUATE_RESULTS_DIR=str(root / "results"))
    lite = str(root / "door.db")
    ingest = subprocess.run([SITUATE, "ingest", str(corpus), "--collection", "door",
                             "--milvus-uri", lite], env=env, capture_output=True, text=True,
                            timeout=600)
    assert ingest.returncode == 0, ingest.stderr
    shutil.copytree(lite, root / "served")  # a Lite file's folder is a server's data dir
    server = MilvusServer(root / "served", log=root / "milvus.log")
    server.start()
    uri = server.uri.replace("http://", f"http://situate:{PASSWORD}@")
    env.update(SITUATE_MILVUS_URI=uri, SITUATE_MILVUS_TOKEN=MILVUS_TOKEN)
    found = Door(root, lite, server, uri, env)
    found.said += [ingest.stdout, ingest.stderr]
    try:
        yield found
    finally:
        server.stop()


@dataclass
class Served:
    url: str
    proc: subprocess.Popen
    log: Path

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None,
             **kw: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, headers=headers or {}, timeout=60,
                          **kw)


def _serve(door: Door, command: list[str], name: str, token: str | None = API_TOKEN,
           extra_env: dict[str, str] | None = None) -> Served:
    port = free_port()
    log = door.root / f"{name}.log"
    env = {**door.env, **(extra_env or {})}
    if token:
        env["SITUATE_API_TOKEN"] = token
    with open(log, "wb") as out:
        proc = subprocess.Popen([SITUATE, *command, "--collection", "door", "--port", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    door.written.append(log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.3)
    return Served(url, proc, log)


@pytest.fixture(scope="module")
def api(door) -> Iterator[Served]:
    served = _serve(door, ["api"], "api")
    try:
        yield served
    finally:
        stop_process(served.proc, timeout=30)


@pytest.fixture(scope="module")
def mcp_http(door) -> Iterator[Served]:
    served = _serve(door, ["mcp", "--transport", "streamable-http"], "mcp-http")
    try:
        yield served
    finally:
        stop_process(served.proc, timeout=30)


def _auth(token: str = API_TOKEN, scheme: str = "Bearer") -> dict[str, str]:
    return {"Authorization": f"{scheme} {token}"}


MCP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "door-test", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _ask(served: Served, kind: str, headers: dict[str, str]) -> httpx.Response:
    """The same kind of request to either face: a search (api) or an MCP initialize."""
    if kind == "api":
        return served.post("/search", {"query": "retry delay", "k": 2}, headers)
    return served.post("/mcp", MCP_INIT, {**MCP_HEADERS, **headers})


# --- Host and Origin ---------------------------------------------------------------------------

@pytest.mark.parametrize("face", ["api", "mcp"])
def test_foreign_host_and_origin_are_refused(face, api, mcp_http, door):
    served = api if face == "api" else mcp_http
    port = served.url.rsplit(":", 1)[1]
    ok = _ask(served, face, _auth())
    assert ok.status_code == 200, ok.text
    for host in ("localhost", f"localhost:{port}", f"[::1]:{port}", f"127.0.0.1:{port}"):
        assert _ask(served, face, {**_auth(), "Host": host}).status_code == 200, host
    # A page of http://rebind.example:PORT whose name now points at 127.0.0.1 (DNS rebinding):
    # the browser sends its own name as Host, and its origin.
    rebound = _ask(served, face, {**_auth(), "Host": f"rebind.example:{port}",
                                  "Origin": f"http://rebind.example:{port}"})
    assert rebound.status_code == 421, rebound.text
    assert "not served here" in rebound.json()["detail"]
    assert _ask(served, face, {**_auth(), "Host": "attacker.example"}).status_code == 421
    # Loopback Host, foreign Origin (a page elsewhere calling 127.0.0.1 with CORS's help): 403.
    foreign = _ask(served, face, {**_auth(), "Origin": "http://evil.example"})
    assert foreign.status_code == 403 and "--cors-origin" in foreign.json()["detail"]
    # No CORS by default: a preflight from another origin gets no allowance.
    preflight = httpx.options(f"{served.url}/search", headers={
        "Origin": "http://app.example:3000", "Access-Control-Request-Method": "POST"}, timeout=30)
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    door.said += [rebound.text, foreign.text]


def test_cors_is_per_origin_when_asked_for(door):
    served = _serve(door, ["api", "--mode", "bm25", "--cors-origin", "http://app.example:3000",
                           "--allowed-host", "search.internal"], "api-cors")
    try:
        preflight = httpx.options(f"{served.url}/search", headers={
            "Origin": "http://app.example:3000", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}, timeout=30)
        assert preflight.status_code == 200, preflight.text
        assert preflight.headers["access-control-allow-origin"] == "http://app.example:3000"
        r = served.post("/search", {"query": "dead letter queue", "k": 1},
                        {**_auth(), "Origin": "http://app.example:3000"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == \
            "http://app.example:3000"
        assert r.json()["hits"][0]["doc_id"].endswith("queue.md")
        other = served.post("/search", {"query": "x"}, {**_auth(), "Origin": "http://other.example"})
        assert other.status_code == 403
        # A name given with --allowed-host is served; others still are not.
        assert served.post("/search", {"query": "cache", "k": 1},
                           {**_auth(), "Host": "search.internal:80"}).status_code == 200
        assert served.post("/search", {"query": "cache"},
                           {**_auth(), "Host": "search.external"}).status_code == 421
    finally:
        stop_process(served.proc, timeout=30)


# --- tokens ------------------------------------------------------------------------------------

@pytest.mark.parametrize("face", ["api", "mcp"])
def test_the_bearer_scheme_is_read_in_any_case_on_both_faces(face, api, mcp_http):
    served = api if face == "api" else mcp_http
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert _ask(served, face, _auth(scheme=scheme)).status_code == 200, scheme
    for headers in ({}, _auth("wrong-token-of-enough-length-000000")):
        refused = _ask(served, face, headers)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("command", [["api"], ["mcp", "--transport", "streamable-http"]])
def test_tokens_that_would_misfire_are_refused_at_start(command, door):
    name = command[0]
    for token, host, says in (
            (" spaced-token-of-plenty-characters-0000 ", "127.0.0.1", "whitespace"),
            ("short-token", "0.0.0.0", "needs at least 32"),
            ("", "0.0.0.0", "SITUATE_API_TOKEN is not set")):
        env = {**door.env, "SITUATE_API_TOKEN": token}
        refused = subprocess.run([SITUATE, *command, "--collection", "door", "--host", host,
                                  "--port", str(free_port())], env=env, capture_output=True,
                                 text=True, timeout=120)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1, refused.stderr
        assert lines[0].startswith(f"situate {name}: error: ") and says in lines[0], lines
        door.said += [refused.stdout, refused.stderr]
    # A public bind with a strong token still names its hosts.
    strong = subprocess.run([SITUATE, *command, "--collection", "door", "--host", "0.0.0.0",
                             "--port", str(free_port())],
                            env={**door.env, "SITUATE_API_TOKEN": API_TOKEN},
                            capture_output=True, text=True, timeout=120)
    assert strong.returncode == 2 and "--allowed-host" in strong.stderr
    made = subprocess.run([SITUATE, name, "--new-token"], capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 0 and len(made.stdout.strip()) >= 43 and made.stdout.strip() == \
        made.stdout.strip().split()[0]


# --- bodies ------------------------------------------------------------------------------------

def _tree_rss(pid: int) -> int:
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])


def _big_post(url: str, chunked: bool, total: int, headers: bytes = b"") -> tuple[bytes, int]:
    """POST `total` bytes of body to /search (or as many as the server takes before it answers);
    returns the status line and how many body bytes were sent."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = (f"POST /search HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            ).encode() + headers
    head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else \
        f"Content-Length: {total}\r\n\r\n".encode()
    sock.sendall(head)
    sock.setblocking(False)
    piece = b"a" * 65536
    if chunked:
        piece = b"10000\r\n" + piece + b"\r\n"
    got, sent, sending = b"", 0, True
    try:
        while b"\r\n" not in got:
            if sending and sent < total:
                try:
                    sent += sock.send(piece)
                except BlockingIOError:
                    time.sleep(0.001)
                except OSError:  # the server answered and closed: nothing more is read
                    sending = False
            else:
                time.sleep(0.001)
            try:
                got += sock.recv(4096)
            except BlockingIOError:
                pass
    finally:
        sock.close()
    return got.split(b"\r\n")[0], sent


def test_unauthenticated_big_bodies_are_refused_before_they_are_read(api):
    """Ten 100 MB bodies at once without a token: each 401 before most of it was sent, and the
    server's process tree grows by less than 20 MB."""
    total = 100_000_000
    before = _tree_rss(api.proc.pid)
    peak = [before]
    answers: list[tuple[bytes, int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss(api.proc.pid))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=lambda c=chunked: answers.append(
        _big_post(api.url, c, total))) for chunked in [False] * 5 + [True] * 5]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    watcher.join()
    assert [status for status, _ in answers] == [b"HTTP/1.1 401 Unauthorized"] * 10
    assert max(sent for _, sent in answers) < total // 4  # answered long before the end
    assert peak[0] - before < 20 * 2**20, (peak[0] - before) / 2**20


def test_bodies_over_the_limit_are_413_with_or_without_a_length(api):
    auth = f"Authorization: Bearer {API_TOKEN}\r\n".encode()
    for chunked in (False, True):
        status, _ = _big_post(api.url, chunked, 1_000_000, auth)
        assert status == b"HTTP/1.1 413 Request Entity Too Large", status
    near = api.post("/search", {"query": "retry " * 10_000, "k": 1}, _auth())  # ~60 KB: read
    assert near.status_code == 200, near.text


def test_requests_in_flight_per_client_are_bounded(door):
    """With --client-limit 2, a third request while two bodies are still arriving is 429."""
    # The limit is each server process's: one process, so that it is the whole server's.
    served = _serve(door, ["api", "--mode", "bm25", "--client-limit", "2", "--processes", "1"],
                    "api-limit")
    host, port = served.url.removeprefix("http://").split(":")
    held = []
    try:
        for _ in range(2):  # each holds its place: its body never finishes
            sock = socket.create_connection((host, int(port)))
            sock.sendall(f"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                         f"{API_TOKEN}\r\nContent-Length: 100\r\n\r\n{{\"query\"".encode())
            held.append(sock)
        time.sleep(0.5)
        r = served.post("/search", {"query": "cache"}, _auth())
        assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 30
        while served.post("/search", {"query": "cache"}, _auth()).status_code == 429:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        for sock in held:
            sock.close()
        stop_process(served.proc, timeout=30)


# --- one validation ------------------------------------------------------------------------------

BAD_INPUTS = [  # (name, arguments, error kind, what the line says)
    ("k as bool", {"query": "cache", "k": True}, "input", "k=True is not a number of hits"),
    ("k as string", {"query": "cache", "k": "5"}, "input", "k='5' is not a number of hits"),
    ("k as float", {"query": "cache", "k": 5.0}, "input", "k=5.0 is not a number of hits"),
    ("k zero", {"query": "cache", "k": 0}, "input", "k=0 is not a number of hits"),
    ("k too big", {"query": "cache", "k": 1001}, "input", "k=1001 is not a number of hits"),
    ("no query", {"k": 3}, "input", "query is missing"),
    ("blank query", {"query": "  "}, "input", "empty query"),
    ("unknown field", {"query": "cache", "top_k": 3}, "input", "unknown field 'top_k'"),
    ("other collection", {"query": "cache", "collection": "other"}, "collection",
     "collection 'other' is not served here"),
    ("unusable mode", {"query": "cache", "mode": "rerank"}, "input",
     "retrieval mode 'rerank' is not available here"),
    ("unknown mode", {"query": "cache", "mode": "nope"}, "input", "unknown retrieval mode 'nope'"),
]
HTTP_STATUS = {"input": 422, "collection": 404}


def _python_face(door: Door, args: dict[str, Any]) -> tuple[str, str]:
    from situate.api import Retriever
    from situate.core.errors import SituateError

    with Retriever("door", door.lite, mode="bm25") as retriever:
        try:
            retriever.search(**args)
        except TypeError as e:  # Python's own word for an unknown keyword
            return "TypeError", str(e)
        except SituateError as e:
            return type(e).__name__, str(e)
    return "ok", ""


def test_every_face_refuses_the_same_bad_input_the_same_way(door, api):
    """The table of bad inputs through Python (Retriever, LangChain, LlamaIndex), HTTP and MCP:
    the same kind of error on each, one line, saying the same thing."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from situate.api import Retriever
    from situate.core.errors import CollectionNotServed, InputError
    from situate.integrations.langchain import SituateRetriever as LangChain
    from situate.integrations.llamaindex import SituateRetriever as LlamaIndex

    async def over_mcp() -> dict[str, tuple[bool, str]]:
        params = StdioServerParameters(command=SITUATE, args=["mcp", "--collection", "door",
                                                              "--mode", "bm25"], env=door.env)
        out = {}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for name, args, _, _ in BAD_INPUTS:
                result = await session.call_tool("search", args)
                out[name] = (result.is_error, result.content[0].text)
        return out

    mcp_said = asyncio.run(over_mcp())
    with Retriever("door", door.lite, mode="bm25") as retriever:
        for name, args, kind, says in BAD_INPUTS:
            expected = CollectionNotServed if kind == "collection" else InputError
            # Python, as an app calls it: its own TypeError for a keyword that is not there or
            # an argument left out, as for any function.
            if name in ("unknown field", "no query"):
                with pytest.raises(TypeError, match="top_k|query"):
                    retriever.search(**args)
            else:
                with pytest.raises(expected) as raised:
                    retriever.search(**args)
                python_line = str(raised.value)
                assert says in python_line and "\n" not in python_line, (name, python_line)
            # HTTP.
            r = api.post("/search", args, _auth())
            assert r.status_code == HTTP_STATUS[kind], (name, r.text)
            detail = r.json()["detail"]
            assert says in detail and "\n" not in detail, (name, detail)
            # MCP (stdio): a tool error, the same line.
            is_error, text = mcp_said[name]
            assert is_error and says in text and "\n" not in text, (name, text)
            door.said += [r.text, text]
            # The framework retrievers, where they take the field.
            if set(args) <= {"query", "k", "mode"} and "query" in args:
                lc_args = {k: v for k, v in args.items() if k != "query"}
                with pytest.raises(expected, match=says.split("'")[0]):
                    LangChain(collection="door", retriever=retriever,
                              **{"mode": "bm25", **lc_args}).invoke(args["query"])
                li = LlamaIndex("door", retriever=retriever, **{"mode": "bm25", **lc_args})
                with pytest.raises(expected, match=says.split("'")[0]):
                    li.retrieve(args["query"])
    # The collection describes only the modes it can run (no Cohere key here).
    described = httpx.get(f"{api.url}/collection", headers=_auth(), timeout=30).json()
    assert described["modes"] == ["dense", "bm25", "hybrid"]


# --- the command line, as the servers -------------------------------------------------------------

def test_search_json_prints_the_http_reply_and_full_the_whole_texts(door, api):
    """`situate search --json` prints what POST /search replies (one serializer: the hits equal,
    field for field); `--full` prints each hit's whole text, its lines kept."""
    import textwrap

    query = "how long is the retry delay?"
    ran = {flag: subprocess.run([SITUATE, "search", query, "--collection", "door", "--k", "3",
                                 flag], env=door.env, capture_output=True, text=True, timeout=300)
           for flag in ("--json", "--full")}
    for done in ran.values():
        assert done.returncode == 0, done.stderr
        door.said += [done.stdout, done.stderr]
    printed = json.loads(ran["--json"].stdout)
    replied = api.post("/search", {"query": query, "k": 3}, _auth()).json()
    assert set(printed) == set(replied) == {"hits", "took_ms", "warnings"}
    assert printed["warnings"] == replied["warnings"] == []
    assert printed["hits"] == replied["hits"] and len(printed["hits"]) == 3
    assert printed["hits"][0]["doc_id"] == "retry.md"
    for hit in printed["hits"]:
        assert textwrap.indent(hit["text"], "     ") in ran["--full"].stdout
    assert "\n\n" in printed["hits"][0]["text"]  # so the lines kept are seen to be kept


@pytest.mark.parametrize("k", [0, 1001])
def test_the_command_line_refuses_k_in_the_servers_words(door, api, k):
    """`situate search --k 0` says what POST /search (and the MCP tool: the table above) says."""
    cli = subprocess.run([SITUATE, "search", "cache", "--collection", "door", "--k", str(k)],
                         env=door.env, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and cli.stdout == ""
    prefix = "situate search: error: "
    line = cli.stderr.strip()
    assert line.startswith(prefix) and "\n" not in line, cli.stderr
    detail = api.post("/search", {"query": "cache", "k": k}, _auth()).json()["detail"]
    assert detail.split("; send JSON")[0] == line.removeprefix(prefix) == (
        f"k={k} is not a number of hits: give a whole number from 1 to 1000")


@pytest.mark.parametrize("command", [["search", "cache", "--collection", "door", "--k", "200",
                                      "--full"], ["version"], ["--help"]])
def test_a_reader_that_stops_reading_ends_the_command_quietly(door, command):
    """A pipe closed before the command writes (the reader gone, as `| head -1` after its line):
    the command ends with SIGPIPE's conventional status, and no traceback."""
    proc = subprocess.Popen([SITUATE, *command], env=door.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 141), err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err


def test_search_piped_into_head_prints_one_line(door):
    shell = subprocess.run(["bash", "-c", f"set -o pipefail; '{SITUATE}' search cache "
                            "--collection door --k 200 --full | head -1"],
                           env=door.env, capture_output=True, text=True, timeout=300)
    assert shell.returncode in (0, 141), shell.stderr
    assert len(shell.stdout.splitlines()) == 1 and shell.stdout.startswith("  1. ")
    assert "Traceback" not in shell.stderr and "Exception ignored" not in shell.stderr


# --- MCP started elsewhere -----------------------------------------------------------------------

def test_an_mcp_client_starting_the_server_elsewhere_gets_answers(door, tmp_path):
    """As the README's client configuration does it: the command and an absolute --milvus-uri,
    started in another directory with none of the SITUATE_* variables. Without a store there,
    the client's stderr holds one line saying why."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    elsewhere = tmp_path / "agent-home"
    elsewhere.mkdir()
    bare = {k: v for k, v in os.environ.items() if not k.startswith("SITUATE_")}

    async def ask(uri: str, errlog: Any) -> Any:
        params = StdioServerParameters(command=SITUATE, args=["mcp", "--collection", "door",
                                                              "--milvus-uri", uri],
                                       env=bare, cwd=str(elsewhere))
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool("search", {"query": "dead letter queue", "k": 1})

    with open(tmp_path / "stderr-ok", "w") as errlog:
        found = asyncio.run(ask(door.lite, errlog))
    assert not found.is_error and found.structured_content["hits"][0]["doc_id"].endswith("queue.md")
    missing = str(tmp_path / "nowhere" / "milvus.db")
    with open(tmp_path / "stderr-missing", "w") as errlog, pytest.raises(Exception):  # noqa: B017
        asyncio.run(asyncio.wait_for(ask(missing, errlog), 120))
    lines = (tmp_path / "stderr-missing").read_text().strip().splitlines()
    assert lines == [f"situate mcp: error: collection 'door' not found at {missing} (no Milvus "
                     "Lite file there): run `situate ingest CORPUS --collection door` first"]
    assert not (tmp_path / "nowhere").exists()


# --- the store let go, and a start that is stopped ---------------------------------------------

def test_a_closed_retriever_lets_another_process_open_the_lite_file(door):
    from situate.api import Retriever

    other = [sys.executable, "-c", "from pymilvus import MilvusClient; "
             f"print(MilvusClient({door.lite!r}).has_collection('door'))"]
    with Retriever("door", door.lite, mode="bm25") as retriever:
        assert retriever.search("cache", 1)
        held = subprocess.run(other, capture_output=True, text=True, timeout=120)
        assert held.returncode != 0 and "Open local milvus failed" in held.stderr
    opened = subprocess.run(other, capture_output=True, text=True, timeout=120)
    assert opened.returncode == 0 and opened.stdout.strip() == "True", opened.stderr


@pytest.mark.parametrize("more", [[], ["--processes", "2"]], ids=["one process", "two processes"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_server_stopped_while_starting_says_so_in_its_own_line(sig, more, door):
    proc = subprocess.Popen([SITUATE, "api", "--collection", "door", "--port", str(free_port()),
                             *more], env=door.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (children := psutil.Process(proc.pid).children(recursive=True)):
        assert proc.poll() is None and time.monotonic() < deadline  # the model starts loading
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig
    assert err.strip().splitlines()[-1] == f"situate api: stopped ({name}) while starting, " \
                                            "before serving"
    assert "run the same command again" not in err and "Traceback" not in err
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def _server_processes(served: Served, wanted: int) -> list[psutil.Process]:
    """The server processes of `situate api --processes N`, once each serves."""
    parent = psutil.Process(served.proc.pid)
    deadline = time.monotonic() + 300
    while True:
        servers = [c for c in parent.children() if "spawn_main" in " ".join(c.cmdline())]
        if len(servers) == wanted and served.log.read_text().count(
                "Application startup complete") == wanted:
            return servers
        assert served.proc.poll() is None and time.monotonic() < deadline, served.log.read_text()
        time.sleep(0.2)


def test_several_processes_answer_on_one_port_as_one_does_and_stop_together(door, api):
    served = _serve(door, ["api", "--processes", "2"], "api-processes")
    try:
        servers = _server_processes(served, 2)
        tree = psutil.Process(served.proc.pid).children(recursive=True)
        asked = {"query": "how long does the retry delay wait", "k": 3, "mode": "hybrid"}
        alone = api.post("/search", asked, _auth()).json()["hits"]

        def search(_: int) -> tuple[int, Any]:
            with httpx.Client(timeout=60) as c:  # a connection each: both processes take some
                r = c.post(f"{served.url}/search", json=asked, headers=_auth())
                return r.status_code, r.json()["hits"] if r.status_code == 200 else r.text

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(search, range(32)))
        assert all(status == 200 and hits == alone for status, hits in replies), replies[:2]
        assert all(s.is_running() for s in servers)
        # Eight keep-alive connections opened together are handed out evenly, four each (left
        # to the kernel, whichever process woke first took most of them).
        port = int(served.url.rsplit(":", 1)[1])
        clients = [httpx.Client(timeout=60) for _ in range(8)]
        together = threading.Barrier(8)

        def opened(c: httpx.Client) -> int:
            together.wait()
            return c.get(f"{served.url}/healthz", headers=_auth()).status_code

        try:
            with ThreadPoolExecutor(8) as pool:
                assert list(pool.map(opened, clients)) == [200] * 8
            held = [sum(1 for c in s.net_connections("tcp")
                        if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port)
                    for s in servers]
            assert held == [4, 4], held
        finally:
            for c in clients:
                c.close()
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=60) == 0
        log = served.log.read_text()
        assert "from 2 processes" in log and "Traceback" not in log
        assert log.strip().splitlines()[-1] == "situate api: stopped (SIGTERM)"
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, alive
    finally:
        stop_process(served.proc, timeout=30)


@pytest.mark.parametrize("asked", [["--collection", "dor"], ["--embedder", "e5"]],
                         ids=["no such collection", "another embedder"])
def test_several_processes_refuse_a_bad_start_in_the_one_processs_words(door, asked):
    said = []
    for more in ([], ["--processes", "2"]):
        done = subprocess.run([SITUATE, "api", "--collection", "door", "--port", str(free_port()),
                               *more, *asked], env=door.env, capture_output=True, text=True,
                              timeout=300)
        door.said += [done.stdout, done.stderr]
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        said.append(done.stderr.strip().splitlines())
    assert said[0] == said[1] and len(said[0]) == 1, said


def test_a_server_process_that_dies_stops_the_others_and_the_command_says_so(door):
    served = _serve(door, ["api", "--processes", "2", "--mode", "bm25"], "api-processes-died")
    try:
        first, second = _server_processes(served, 2)
        tree = psutil.Process(served.proc.pid).children(recursive=True)
        assert served.post("/search", {"query": "cache"}, _auth()).status_code == 200
        second.kill()
        assert served.proc.wait(timeout=60) == 2
        line = served.log.read_text().strip().splitlines()[-1]
        assert line.startswith("situate api: error: server process 2 of 2 (pid "), line
        assert "ended with exit code -9 while serving; the others were stopped" in line
        assert "Traceback" not in served.log.read_text()
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, alive
    finally:
        stop_process(served.proc, timeout=30)


def test_server_processes_whose_parent_is_killed_stop(door):
    served = _serve(door, ["api", "--processes", "2", "--mode", "bm25"], "api-processes-orphaned")
    tree: list[psutil.Process] = []
    try:
        _server_processes(served, 2)
        tree = psutil.Process(served.proc.pid).children(recursive=True)
        assert served.post("/search", {"query": "cache"}, _auth()).status_code == 200
        served.proc.kill()  # no graceful stop: the processes it started must not serve on alone
        served.proc.wait(timeout=30)
        _, alive = psutil.wait_procs(tree, timeout=60)
        assert not alive, alive
    finally:
        stop_process(served.proc, timeout=30)
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()


# --- a hostile client, against the real commands (tests/test_serving_hostile.py: every case) -----

def _raw_get(served: Served, path: str, source: str = "127.0.0.1") -> tuple[int, float]:
    """(status, seconds) of a GET sent as raw bytes (httpx refuses URLs past 64 KB)."""
    host, port = served.url.removeprefix("http://").split(":")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=60,
                                  source_address=(source, 0)) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                     .encode())
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    return int(data.split(b" ", 2)[1]), time.perf_counter() - started


def test_the_log_of_situate_api_is_data_and_long_paths_cost_nothing(api):
    """As `situate api` writes its log: a path with %0A, %0D, %1B and %00 leaves no raw control
    byte and no forged line; a 32 KB path of `a.` is refused at once and /healthz from another
    address answers meanwhile."""
    forged = "INFO:     situate.api: serving collection FORGED"
    status, _ = _raw_get(api, "/x%0A" + forged.replace(" ", "%20") + "%0D%0A%1B[2J%00end")
    assert status == 401
    seconds = []
    for _ in range(3):
        sender = threading.Thread(target=_raw_get, args=(api, "/" + "a." * 16_000))
        sender.start()
        status, waited = _raw_get(api, "/healthz", source="127.0.0.2")
        sender.join()
        seconds.append(waited)
        assert status == 200
        assert _raw_get(api, "/" + "a." * 16_000)[1] < 5
    assert min(seconds) < 0.1, seconds
    time.sleep(0.5)  # the access log's thread writes the lines
    text = api.log.read_bytes()
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", text), text[-2000:]
    assert not any(line.startswith(forged.encode()) for line in text.splitlines())
    assert b"\\x1b[2J\\x00end" in text


def test_nested_json_is_the_invalid_json_refusal_on_both_faces(api, mcp_http, door):
    nested = "[" * 1_000 + "]" * 1_000
    r = httpx.post(f"{api.url}/search", content=nested, headers=_auth(), timeout=30)
    assert r.status_code == 422 and r.json()["detail"].startswith("the body is not JSON"), r.text
    r = httpx.post(f"{mcp_http.url}/mcp", content=nested, timeout=30,
                   headers={**_auth(), **MCP_HEADERS, "Content-Type": "application/json"})
    assert 400 <= r.status_code < 500 and r.json()["error"]["code"] == -32700, r.text
    door.said += [r.text]
    for log in (api.log, mcp_http.log):
        assert "Traceback" not in log.read_text()


def test_a_long_query_costs_about_a_short_one_and_its_reply_says_it_was_cut(api):
    """With MiniLM, on the same server: an 8,192-character query's median time is at most 5
    times a short query's (it took 40 times: every window embedded, every term looked up)."""
    long = ("how does the retry delay grow after each failed attempt with jitter " * 200)[:8_192]
    short, cut = [], []
    for _ in range(11):
        for query, times in (("retry delay", short), (long, cut)):
            started = time.perf_counter()
            r = api.post("/search", {"query": query, "k": 5}, _auth())
            times.append(time.perf_counter() - started)
            assert r.status_code == 200, r.text
    assert statistics.median(cut) <= 5 * statistics.median(short), (short, cut)
    [warning] = r.json()["warnings"]
    assert "first 64 terms" in warning and "of 8,192" in warning


def test_situate_search_says_where_a_long_query_was_cut(door, api):
    long = ("how does the retry delay grow after each failed attempt with jitter " * 200)[:8_192]
    cli = subprocess.run([SITUATE, "search", long, "--collection", "door", "--json"],
                         env=door.env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    [warning] = api.post("/search", {"query": long}, _auth()).json()["warnings"]
    assert json.loads(cli.stdout)["warnings"] == [warning]
    assert f"situate search: warning: {warning}" in cli.stderr.splitlines()


# --- no secret leaves ----------------------------------------------------------------------------

def test_no_secret_reaches_a_reply_a_log_or_a_file(door, api, mcp_http):
    """Ordinary requests, bad ones and an outage, on every face, with the password in the Milvus
    URI, SITUATE_MILVUS_TOKEN, SITUATE_API_TOKEN and a token in a query string; then every byte
    written is searched for them (runs last: it stops the module's Milvus server)."""
    query_url = f"/search?token={QUERY_TOKEN}&api_key={QUERY_TOKEN}"
    for path in (query_url, "/search"):
        r = api.post(path, {"query": "retry delay", "k": 3}, _auth())
        assert r.status_code == 200
        door.said.append(r.text)
    door.said.append(api.post(query_url, {"query": "x"}).text)  # 401
    evaluation = door.root / "eval.jsonl"
    evaluation.write_text(json.dumps({"query": "how long is the retry delay?", "golden_quotes": [
        {"doc_id": "retry.md", "quote": "The retry delay doubles"}]}) + "\n")
    ran = subprocess.run([SITUATE, "evaluate", str(evaluation), "--collection", "door", "--json",
                          str(door.root / "eval.json")], env=door.env, capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    door.said += [ran.stdout, ran.stderr]
    door.server.stop()  # the outage
    try:
        for served, kind in ((api, "api"), (mcp_http, "mcp")):
            down = served.post("/search" if kind == "api" else "/mcp",
                               {"query": "cache"} if kind == "api" else MCP_INIT,
                               {**_auth(), **(MCP_HEADERS if kind == "mcp" else {})})
            door.said.append(down.text)
        down = api.post("/search", {"query": "cache"}, _auth())
        assert down.status_code == 503 and "***@" in down.json()["detail"]
        collection = httpx.get(f"{api.url}/collection", headers=_auth(), timeout=60)
        assert collection.status_code == 503
        door.said.append(collection.text)
        # The four commands at once: each waits out its retries (about 30 s) against the outage.
        commands = (["search", "cache"], ["evaluate", str(evaluation)], ["api"], ["mcp"])
        started = [subprocess.Popen([SITUATE, *command, "--collection", "door", "--port",
                                     str(free_port())] if command[0] in ("api", "mcp") else
                                    [SITUATE, *command, "--collection", "door"],
                                    env=door.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, stdin=subprocess.DEVNULL) for command in commands]
        try:
            for command, proc in zip(commands, started, strict=True):
                out, err = proc.communicate(timeout=600)
                assert proc.returncode == 2, err
                said = [line for line in err.strip().splitlines()
                        if "Stopping temporary server" not in line]  # Prefect's own last line
                assert said[-1].startswith(f"situate {command[0]}: error: ") and \
                    "did not answer" in said[-1], err
                door.said += [out, err]
        finally:
            for proc in started:
                if proc.poll() is None:
                    stop_process(proc, timeout=30)
    finally:
        door.server.start()
    for served in (api, mcp_http):
        stop_process(served.proc, timeout=30)
    written = [*door.written, door.server.log,
               *[p for p in door.root.rglob("*") if p.is_file() and "served" not in p.parts
                 and p.suffix != ".db"]]
    prefect_home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
    written += [p for p in prefect_home.glob("prefect.db*") if p.is_file()]
    assert len(door.said) > 40 and written
    for secret in SECRETS:
        for text in door.said:
            assert secret not in text
        for path in written:
            assert secret.encode() not in path.read_bytes(), (secret, path)
