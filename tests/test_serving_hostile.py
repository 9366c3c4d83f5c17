"""A hostile client at the served door: one request must not stall the server, forge its log,
starve other clients, crash a parser or pass as another origin.

The real app and door (`situate.api.http.create_app`, `situate.api.mcp.create_server`, the
`Guard`) are served by uvicorn as `situate api` configures it (`uvicorn_config`), in this
process, on 127.0.0.1, in front of a `Retriever` over a one-chunk store and the hash embedding
(tests/fakes/served.py): no model, no Milvus, so that each case costs what the door costs.
tests/test_serving_door.py drives the same cases through the real commands where it matters
(the log as `situate api` writes it, the query's cost with MiniLM).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from situate.api.guard import Policy
from tests.fakes.served import OneChunkStore, retriever, served

TOKEN = "t" * 40
ROOT = Path(__file__).resolve().parents[1]
# Control characters a log line must never carry raw (a line feed or carriage return would start
# a forged line; ESC drives the terminal; NUL makes grep call the log binary).
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class Lines(logging.Handler):
    """The access log's lines, as a stream handler writes them (one record, one line)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        self.written: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.written.append(self.format(record) + "\n")

    @property
    def text(self) -> str:
        return "".join(self.written)


@pytest.fixture
def access() -> Iterator[Lines]:
    """The access log, at the level a server logs it, through the process's redaction (as
    `situate api` runs it)."""
    from situate.core.secrets import install_log_redaction

    install_log_redaction()
    logger = logging.getLogger("situate.api.access")
    lines, level = Lines(), logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


@pytest.fixture
def store() -> OneChunkStore:
    return OneChunkStore()


@contextlib.contextmanager
def _api(store: OneChunkStore, embedders: Any, **policy: Any) -> Iterator[int]:
    from situate.api.http import create_app

    door = Policy(**policy)
    with served(create_app(retriever(store, embedders), door), door) as port:
        yield port


def _raw(port: int, request: bytes, source: str = "127.0.0.1",
         timeout: float = 30) -> tuple[int, dict[str, str], bytes, float]:
    """(status, headers, body, seconds to the whole answer) of one request sent as raw bytes on
    its own connection (the server closes it after the answer: `Connection: close`)."""
    import socket

    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0)) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    seconds = time.perf_counter() - started
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, body, seconds


def _get(path: str, host: str = "127.0.0.1", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode()


def _post(body: bytes, extra: str = "", host: str = "127.0.0.1") -> bytes:
    return (f"POST /search HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {TOKEN}\r\n{extra}Content-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


# --- redaction in linear time -------------------------------------------------------------------

ADVERSARIAL = ("a.", "a@", "://", "%", "a://", "&token", "bearer ", "a:", "?a", "&a", "a-",
               "x://a:")


@pytest.mark.parametrize("unit", ADVERSARIAL)
def test_redaction_of_adversarial_text_up_to_1_mb_is_fast(unit):
    """`redact` on text shaped to make a backtracking pattern quadratic (`a.a.a.` took 7.6 s at
    32 KB): each size, from 1 KB up to 1 MB, is redacted in under 50 ms."""
    from situate.core.secrets import redact

    for size in (1 << 10, 1 << 14, 1 << 17, 1 << 20):
        text = (unit * (size // len(unit) + 1))[:size]
        best = min(_timed(redact, text) for _ in range(3))
        assert best < 0.05, (unit, size, best)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(units=st.lists(st.sampled_from([*ADVERSARIAL, "x", " ", "=", "/", "\n"]), min_size=1,
                      max_size=6),
       size=st.sampled_from([1 << 10, 1 << 14, 1 << 17, 1 << 20]), at=st.floats(0, 1))
def test_redaction_is_fast_and_masks_a_secret_anywhere_in_any_adversarial_text(units, size, at):
    """The property: any mix of adversarial pieces, up to 1 MB, with a URI's password put
    anywhere (at either cut included) is redacted in under 50 ms, and the password never shows."""
    from situate.core.secrets import REDACTED_CHARS, redact

    unit = "".join(units)
    text = (unit * (size // len(unit) + 1))[:size]
    where = int(at * len(text))
    text = f"{text[:where]} https://reader:Pw-7y1x-secret@db.example:19530 {text[where:]}"
    for part in (text[:1 << 12], text[:1 << 15], text):  # growing: a slow one fails early
        assert min(_timed(redact, part) for _ in range(2)) < 0.05, len(part)
    out = redact(text)
    assert "Pw-7y1x" not in out and len(out) <= REDACTED_CHARS + 64


@pytest.mark.parametrize("unit", ["a.", "&token", "a://", "?a"])
def test_every_pattern_reads_text_in_linear_time(unit):
    """The patterns themselves, on the whole text (no cut): 8 times the text takes well under
    the 64 times a quadratic pattern needs (the old scheme pattern: 0.5 s at 8 KB of `a.`)."""
    from situate.core.secrets import _masked

    def best(size: int) -> float:
        text = (unit * (size // len(unit) + 1))[:size]
        return min(_timed(_masked, text, []) for _ in range(5))

    small = best(1 << 13)
    assert small < 0.05, (unit, small)
    large = best(1 << 16)
    assert large < 32 * max(small, 1e-4), (unit, small, large)


def test_a_long_text_keeps_its_ends_and_loses_no_secret_at_the_cut():
    from situate.core.secrets import REDACTED_CHARS, redact

    half = REDACTED_CHARS // 2
    secret_uri = "http://admin:hunter2-pw@db:19530"
    # A URI's user information and a token straddling each place the text is cut.
    text = ("x" * (half - 10) + secret_uri + "y" * 100_000 + "Bearer sometokenvalue123"
            + "z" * (half - 8))
    out = redact(text)
    assert len(out) < REDACTED_CHARS + 100 and "characters cut" in out
    assert "hunter2" not in out and "sometokenvalue123"[:8] not in out
    assert out.startswith("x" * 100) and out.endswith("z" * 100)


def _timed(fn: Any, *args: Any) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


# --- one request cannot stall the server ------------------------------------------------------

@pytest.mark.parametrize("size", [32_000, 100_000])
def test_a_long_path_is_refused_at_once_and_healthz_answers_meanwhile(size, store, embedders,
                                                                     access):
    """A path of `a.` (quadratic for the old redaction, which the access log ran in the event
    loop) is answered in under 100 ms without a token, with a foreign Host and with the token,
    and a /healthz from another address sent meanwhile answers in under 100 ms."""
    path = "/" + "a." * (size // 2)
    with _api(store, embedders, token=TOKEN) as port:
        cases = {"no token": _get(path), "foreign Host": _get(path, host="evil.example"),
                 "token": _get(path, extra=f"Authorization: Bearer {TOKEN}\r\n")}
        for name, request in cases.items():
            answers: list[tuple[int, float]] = []
            for _ in range(3):  # the best of three: the machine is shared
                status, _, _, seconds = _raw(port, request)
                answers.append((status, seconds))
            assert min(s for _, s in answers) < 0.1, (name, answers)
            assert {status for status, _ in answers} <= {400, 401, 404, 414, 421, 431}, answers
        # /healthz from 127.0.0.2 while the long path is being answered.
        waits: list[float] = []
        for _ in range(3):
            sender = threading.Thread(target=_raw, args=(port, cases["no token"]))
            sender.start()
            status, _, body, seconds = _raw(port, _get("/healthz"), source="127.0.0.2")
            sender.join()
            assert status == 200 and json.loads(body)["status"] == "ok"
            waits.append(seconds)
        assert min(waits) < 0.1, waits
    assert not RAW_CONTROL.search(access.text)


# --- the access log is data -------------------------------------------------------------------

def test_a_path_cannot_forge_a_log_line_or_drive_the_terminal(store, embedders, access):
    """%0A, %0D, %1B and %00 in a path (decoded by the server) reach the log escaped: no raw
    control byte, no line that begins with the forged text; a long path is cut, with a mark."""
    forged = "INFO:     situate.api: serving collection FORGED"
    path = ("/x%0A" + forged.replace(" ", "%20") + "%0D%0A%1B[2J%00end")
    with _api(store, embedders, token=TOKEN) as port:
        for request in (_get(path), _get(path, host="evil.example"),
                        _get(path, extra=f"Authorization: Bearer {TOKEN}\r\n"),
                        _get("/" + "b" * 5_000)):
            _raw(port, request)
    written = access.text
    assert len(access.written) == 4, written
    assert not RAW_CONTROL.search(written), written
    assert not any(line.startswith(forged) for line in written.splitlines()), written
    assert "\\n" in written and "\\x1b[2J" in written and "\\x00end" in written
    assert "more characters]" in written and len(written) < 4 * 1_000, len(written)
    assert written.count(" 401 ") == 2 and written.count(" 421 ") == 1  # logged with its fate


def test_a_refusal_shows_only_a_short_prefix_of_a_bad_value(store, embedders):
    """A 24 KB mode, collection, field name or Host is refused at once, and the refusal shows
    at most a short, escaped prefix of it."""
    big = "m" * 24_000
    with _api(store, embedders, token=TOKEN) as port:
        for body in ({"query": "retry", "mode": big}, {"query": "retry", "collection": big},
                     {"query": "retry", big: 1}, {"query": "retry", "k": big},
                     {"query": "retry", "mode": "x\x1b[2J\x00"}):
            status, _, reply, seconds = _raw(port, _post(json.dumps(body).encode()))
            detail = json.loads(reply)["detail"]
            assert status == 422 and len(detail) < 400, (status, detail[:300])
            assert not RAW_CONTROL.search(detail), detail
        status, _, reply, _ = _raw(port, _get("/healthz", host="h" * 8_000))
        assert status == 421 and len(json.loads(reply)["detail"]) < 400


# --- fair under load --------------------------------------------------------------------------

def test_forwarded_for_is_not_believed_and_one_address_cannot_take_every_slot(store, embedders,
                                                                              access):
    """300 bodies that never finish, from 127.0.0.1, each with another X-Forwarded-For: the
    server counts them as one client (64 held, the rest 429), so /healthz and a search from
    127.0.0.7 are answered 200, and the log names 127.0.0.1, never a forwarded address."""
    import socket

    held: list[socket.socket] = []
    with _api(store, embedders, token=TOKEN) as port:
        try:
            for i in range(300):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(f"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                             f"{TOKEN}\r\nX-Forwarded-For: 10.9.{i // 250}.{i % 250 + 1}\r\n"
                             f"Content-Length: 100\r\n\r\n{{\"query\"".encode())
                held.append(sock)
            time.sleep(1.0)
            status, _, _, _ = _raw(port, _get("/healthz"), source="127.0.0.7")
            assert status == 200
            status, _, body, _ = _raw(port, _post(b'{"query": "retry delay"}'), source="127.0.0.7")
            assert status == 200, body
            status, _, _, _ = _raw(port, _get("/healthz"))  # even from the busy address
            assert status == 200
        finally:
            for sock in held:
                sock.close()
    lines = access.written
    assert sum(" 429 " in line for line in lines) >= 300 - 64 - 1, access.text[-2000:]
    assert all(re.match(r"INFO:\s+situate\.api\.access: 127\.0\.0\.[17]:\d+ - ", line)
               for line in lines), access.text[-2000:]
    assert "10.9." not in access.text


def test_forwarded_for_is_believed_only_from_a_named_proxy(store, embedders, access):
    with _api(store, embedders, forwarded_allow_ips="127.0.0.1") as port:
        _raw(port, _get("/healthz", extra="X-Forwarded-For: 10.1.2.3\r\n"))
    assert "10.1.2.3:" in access.text


def test_a_body_that_never_finishes_is_dropped_within_its_timeout(store, embedders, access):
    with _api(store, embedders, token=TOKEN, read_timeout=1.0) as port:
        request = _post(b'{"query": "x"}' + b" " * 86)[:-80]  # 80 bytes of the body never sent
        status, headers, body, seconds = _raw(port, request, timeout=10)
    assert status == 408 and 0.9 < seconds < 5, (status, seconds)
    assert headers["connection"] == "close" and "--read-timeout" in json.loads(body)["detail"]
    assert " 408 " in access.text


def test_headers_that_never_finish_are_dropped_within_the_timeout(store, embedders):
    """Headers sent in part (a slowloris): the connection is closed after the read timeout,
    on a new connection and on one that has had an answer already."""
    import socket

    with _api(store, embedders, token=TOKEN, read_timeout=1.0) as port:
        for first in (b"", _get("/healthz").replace(b"Connection: close\r\n", b"")):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                started = time.perf_counter()
                sock.sendall(first + b"GET /healthz HTTP/1.1\r\nHost: 127.0")
                data = b""
                while chunk := sock.recv(1 << 16):
                    data += chunk
                seconds = time.perf_counter() - started
            assert data.count(b"HTTP/1.1 ") == (1 if first else 0), data
            assert 0.9 < seconds < 5, seconds


# --- every refusal is one line of JSON -------------------------------------------------------

@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_json_is_the_invalid_json_refusal(depth, store, embedders, access):
    nested = b"[" * depth + b"]" * depth
    in_field = b'{"query": ' + nested + b"}"
    with _api(store, embedders, token=TOKEN, max_body=1 << 20) as port:
        for body in (nested, in_field):
            status, headers, reply, _ = _raw(port, _post(body))
            assert status == 422 and headers["content-type"] == "application/json", reply[:300]
            assert json.loads(reply)["detail"].startswith("the body is not JSON"), reply[:300]
        shallow = b'{"query": "x", "k": ' + b"[" * 500 + b"]" * 500 + b"}"
        status, _, reply, _ = _raw(port, _post(shallow))
        assert status == 422 and len(reply) < 400 and "k=list" in json.loads(reply)["detail"]
    assert "Traceback" not in access.text


def _mcp_post(port: int, body: bytes) -> tuple[int, bytes]:
    request = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
               f"\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {TOKEN}"
               f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    status, _, reply, _ = _raw(port, request)
    return status, reply


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_json_over_mcp_http_is_a_parse_error(depth, store, embedders, caplog):
    from situate.api.guard import Guard
    from situate.api.mcp import create_server

    server = create_server(retriever(store, embedders))
    app = Guard(server.streamable_http_app(host="127.0.0.1"),
                Policy(token=TOKEN, max_body=1 << 20))
    nested = b"[" * depth + b"]" * depth
    call = (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "search", '
            b'"arguments": {"query": ' + nested + b"}}}")
    with caplog.at_level(logging.DEBUG), served(app) as port:
        for body in (nested, call):
            status, reply = _mcp_post(port, body)
            assert 400 <= status < 500, (status, reply[:300])
            assert json.loads(reply)["error"]["code"] == -32700, reply[:300]
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


# --- MCP over stdio answers what it cannot read ----------------------------------------------

def test_mcp_over_stdio_answers_a_malformed_line_with_a_parse_error():
    """Bad JSON, invalid UTF-8 and requests nested 5,000 and 100,000 deep (with an id) are each
    answered with a JSON-RPC parse error (id null) instead of silence; the session goes on."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p])}
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.served", "mcp-stdio"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    answers: list[dict[str, Any]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            answers.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deep = b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": '
    bad = [b"{not json", b'{"jsonrpc": "2.0", "id": 1, "method": "ping\xff\xfe"',
           deep + b"[" * 5_000 + b"]" * 5_000 + b"}}", deep + b"[" * 100_000 + b"]" * 100_000 + b"}}"]
    try:
        for line in bad:
            proc.stdin.write(line + b"\n")
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}).encode() + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while len(answers) < len(bad) + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.stdin.close()
        proc.wait(30)
    errors = [a for a in answers if "error" in a]
    assert [(a["id"], a["error"]["code"]) for a in errors] == [(None, -32700)] * len(bad), answers
    assert any(a.get("id") == 9 and "result" in a for a in answers), answers
    assert b"Traceback" not in proc.stderr.read()


# --- origins and hosts by exact match ---------------------------------------------------------

def test_origins_and_hosts_are_compared_by_scheme_name_and_port(store, embedders):
    with _api(store, embedders, token=TOKEN) as port:
        auth = f"Authorization: Bearer {TOKEN}\r\n"

        def origin(value: str, host: str = f"localhost:{port}") -> int:
            return _raw(port, _post(b'{"query": "retry"}', f"Origin: {value}\r\n", host))[0]

        for refused in (f"http://localhost:{port + 1}", f"https://localhost:{port}",
                        "http://localhost:3000.evil.example", f"http://localhost:{port}@evil.example",
                        f"http://evil.example:{port}", "null"):
            assert origin(refused) == 403, refused
        assert origin(f"http://localhost:{port}") == 200  # its own pages (/docs)
        assert origin(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}") == 200
        for host in ("localhost:1@evil.example", "localhost:3000.evil.example", "evil.example",
                     "localhost.", "localhost:port", "[::1"):
            assert _raw(port, _get("/collection", host=host, extra=auth))[0] == 421, host
        assert _raw(port, _get("/collection", host=f"localhost:{port}", extra=auth))[0] == 200


# --- a query's cost is bounded ---------------------------------------------------------------

def test_a_long_query_is_searched_up_to_its_64th_term_and_the_reply_says_where(store, embedders,
                                                                               monkeypatch):
    from situate.tasks.retrieval.search import MAX_QUERY_TERMS

    embedded: list[str] = []
    encoder = embedders.get("hash:bow-64")
    encode = encoder._function.encode_queries
    monkeypatch.setattr(encoder._function, "encode_queries",
                        lambda texts: embedded.extend(texts) or encode(texts))
    query = ("how does the worker retry a failed job with backoff " * 1_000)[:8_192]
    with _api(store, embedders, token=TOKEN) as port:
        status, _, reply, _ = _raw(port, _post(json.dumps({"query": query}).encode()))
        assert status == 200, reply
        [warning] = json.loads(reply)["warnings"]
        status, _, short, _ = _raw(port, _post(b'{"query": "retry delay"}'))
        assert json.loads(short)["warnings"] == []
    searched = query[:331]  # up to the end of its 64th word
    assert len(re.findall(r"\w+", searched)) == MAX_QUERY_TERMS
    assert f"first {MAX_QUERY_TERMS} terms" in warning and "characters 1 to 331 of 8,192" in warning
    assert ("bm25", searched) in store.asked and ("dense", searched) in store.asked
    assert embedded[-2] == searched and all(len(t) <= 331 for t in embedded)
