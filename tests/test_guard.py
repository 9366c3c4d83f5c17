"""The door's rules and the redaction, without a server: what a Host, an Origin and an
Authorization header are judged to be, and what `redact` masks. (tests/test_serving_door.py
drives the same through the real servers.)"""

from __future__ import annotations

import asyncio
import logging

import pytest

from situate.api.guard import Guard, Policy, host_name
from situate.core.secrets import install_log_redaction, redact, remember
from situate.core.uri import credentials, shown
from situate.storage.client import check_uri


@pytest.mark.parametrize("host, name", [("localhost:8000", "localhost"), ("[::1]:8000", "::1"),
                                        ("::1", "::1"), ("127.0.0.1", "127.0.0.1"),
                                        ("Search.Internal:443", "search.internal"), ("", "")])
def test_host_names(host, name):
    assert host_name(host) == name


def test_only_loopback_and_named_hosts_are_served():
    policy = Policy()
    for host in ("localhost", "127.0.0.1:8000", "127.1.2.3", "[::1]:80", "app.localhost:80"):
        assert policy.host_allowed(host), host
    for host in ("rebind.example:8000", "0.0.0.0:8000", "192.168.1.5", "", "localhost.evil.com"):
        assert not policy.host_allowed(host), host
    named = Policy(allowed_hosts=("search.internal",))
    assert named.host_allowed("search.internal:8000") and not named.host_allowed("other:8000")
    assert Policy(allowed_hosts=("*",)).host_allowed("anything.example")


def test_an_origin_is_the_servers_own_or_one_cors_names():
    policy = Policy(cors_origins=("http://app.example:3000",))
    assert policy.origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000")  # its /docs page
    assert policy.origin_allowed("http://app.example:3000/", "127.0.0.1:8000")
    for origin in ("http://app.example:3001", "https://app.example:3000", "http://localhost:3000",
                   "null", "file://", "http://evil.example"):
        assert not policy.origin_allowed(origin, "127.0.0.1:8000"), origin
    # With any host allowed, an origin still has to be the request's own.
    anyhost = Policy(allowed_hosts=("*",))
    assert not anyhost.origin_allowed("http://evil.example", "search.internal")


def test_the_bearer_scheme_in_any_case_and_nothing_else():
    policy = Policy(token="t" * 40)
    for header in (b"Bearer " + b"t" * 40, b"bearer " + b"t" * 40, b"BEARER  " + b"t" * 40):
        assert policy.authorized(header), header
    for header in (b"", b"t" * 40, b"Basic " + b"t" * 40, b"Bearer " + b"t" * 39,
                   b"Bearer " + b"t" * 41, b"Bearertttt"):
        assert not policy.authorized(header), header
    assert Policy().authorized(b"")  # no token: nothing asked


def _call(policy: Policy, headers: list[tuple[bytes, bytes]], body: list[bytes],
          method: str = "POST", path: str = "/search") -> tuple[int, bytes, int]:
    """(status, body, chunks of the request body the guard took) of one request through a
    Guard in front of an app that echoes the body it was handed."""
    received = []

    async def app(scope, receive, send):
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": message.get("body", b"")})

    async def run():
        pieces = [{"type": "http.request", "body": b, "more_body": i < len(body) - 1}
                  for i, b in enumerate(body)] or [{"type": "http.request", "body": b""}]

        async def receive():
            received.append(1)
            return pieces.pop(0) if pieces else {"type": "http.disconnect"}

        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": method, "path": path, "headers": headers,
                 "client": ("127.0.0.1", 5000), "http_version": "1.1"}
        await Guard(app, policy)(scope, receive, send)
        return sent

    sent = asyncio.run(run())
    return sent[0]["status"], sent[1]["body"], len(received)


def test_the_guard_answers_before_reading_a_body_it_will_not_take():
    policy = Policy(token="t" * 40, max_body=1024)
    host = [(b"host", b"127.0.0.1:8000")]
    status, _, read = _call(policy, [*host, (b"content-length", b"100000000")], [b"x" * 10] * 5)
    assert (status, read) == (401, 0)  # no token: not a byte read
    auth = [*host, (b"authorization", b"Bearer " + b"t" * 40)]
    status, _, read = _call(policy, [*auth, (b"content-length", b"2048")], [b"x" * 2048])
    assert (status, read) == (413, 0)  # too long by its own word: not read
    status, _, read = _call(policy, auth, [b"x" * 600, b"x" * 600, b"x" * 600])
    assert (status, read) == (413, 2)  # chunked: read until past the limit, then refused
    status, body, _ = _call(policy, auth, [b"x" * 500, b"y" * 500])
    assert (status, body) == (200, b"x" * 500 + b"y" * 500)  # handed on whole, once
    assert _call(policy, [(b"host", b"evil.example")], [b"{}"])[0] == 421
    assert _call(policy, [*auth, (b"origin", b"http://evil.example")], [b"{}"])[0] == 403
    assert _call(policy, host, [], method="GET", path="/healthz")[0] == 200  # open path


def test_uris_are_shown_without_their_user_information():
    assert shown("http://admin:s3cret@host:19530/db") == "http://***@host:19530/db"
    assert shown("https://token@x.zillizcloud.com") == "https://***@x.zillizcloud.com"
    assert shown("data/milvus.db") == "data/milvus.db"
    assert set(credentials("http://admin:s3cr%40t@host:1")) >= {"s3cr%40t", "s3cr@t", "admin"}
    assert credentials("http://host:1") == () == credentials("data/x.db")
    for bad in ("data/m.db.bak", "ftp://host", " "):
        with pytest.raises(Exception, match="Milvus URI"):
            check_uri(bad)


def test_redact_masks_every_form_a_secret_takes(monkeypatch):
    monkeypatch.setenv("SITUATE_API_TOKEN", "api-token-value-0001")
    remember("remembered-secret-77")
    text = redact("uri http://u:pw-in-uri@h:1 a=?token=abc123&x=1&api_key=zzz9 "
                  "Authorization: Bearer abcdefgh12345 api-token-value-0001 "
                  "remembered-secret-77 and plain words: the token budget, Bearer <TOKEN>")
    for secret in ("pw-in-uri", "abc123", "zzz9", "abcdefgh12345", "api-token-value-0001",
                   "remembered-secret-77"):
        assert secret not in text, (secret, text)
    assert "x=1" in text and "the token budget" in text and "Bearer <TOKEN>" in text


def test_every_log_record_is_redacted(caplog):
    install_log_redaction()
    remember("logged-secret-1234")
    with caplog.at_level(logging.INFO):
        logging.getLogger("some.library").info("connecting to %s", "http://u:logged-secret-1234@h")
        try:
            raise RuntimeError("failed with logged-secret-1234")
        except RuntimeError:
            logging.getLogger("other").exception("boom")
    text = caplog.text + "".join(r.exc_text or "" for r in caplog.records)
    assert "logged-secret-1234" not in text and "***" in text


def test_origins_and_hosts_are_parsed_and_compared_by_scheme_name_and_port():
    policy = Policy(cors_origins=("http://app.example:3000",))
    assert policy.origin_allowed("http://localhost:8000", "localhost:8000")
    assert policy.origin_allowed("http://localhost", "localhost")  # port 80 on both sides
    assert policy.origin_allowed("https://localhost:8443", "localhost:8443", "https")
    for origin in ("http://localhost:9999", "https://localhost:8000", "http://localhost",
                   "http://localhost:3000.evil.example", "http://localhost:8000@evil.example",
                   "http://localhost:8000/path", "http://localhost:8000?x", "ftp://localhost:8000",
                   "http://app.example:3000.evil.example", "http://app.example"):
        assert not policy.origin_allowed(origin, "localhost:8000"), origin
    assert not policy.origin_allowed("http://localhost:8000", "localhost:8000", "https")
    for host in ("localhost:1@evil.example", "localhost:3000.evil.example", "localhost.",
                 "localhost:port", "[::1", "localhost:99999", "local host", "localhost\x00"):
        assert not policy.host_allowed(host), host
    named = Policy(allowed_hosts=("search.internal:8443",))
    assert named.host_allowed("search.internal:8443")
    assert not named.host_allowed("search.internal:8000") and not named.host_allowed("search.internal")


def test_a_clients_value_is_logged_and_shown_escaped_and_bounded():
    from situate.api.guard import printable, shown

    assert printable('a\nb\r\x1b[2J\x00\\"\u2028') == 'a\\nb\\r\\x1b[2J\\x00\\\\\\"\\u2028'
    assert printable("x" * 600) == "x" * 512 + "...[88 more characters]"
    assert printable("/plain/path") == "/plain/path"
    assert shown("m" * 24_000) == "'" + "m" * 64 + "...[23,936 more characters]'"
