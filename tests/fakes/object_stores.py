"""Google Cloud Storage and Azure Blob Storage on 127.0.0.1, for the gs:// and az:// sources.

GCS: gcp-storage-emulator (pure Python, in this process), spoken to through gcsfs's JSON API, and
a token endpoint of Google's OAuth wire format that refuses every service account (a wrong key).
Azure: Azurite (Microsoft's emulator, an npm package), installed on first use with npm into the
virtual environment (`.venv/azurite`, as `make test` installs Chromium for the UI test) and
started on a port the system picks; skipped, saying why, where npm is not installed.

Then the rounds every bucket goes through, whichever its store (`publish`, `change`,
`ingest_rounds`): a store here is anything with `scheme`, `create`, `put` and `delete`.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.loopback import LoopbackServer, send_json

AZURITE = "azurite@3.37.0"
AZURITE_HOME = Path(sys.prefix) / "azurite"
# Azurite's one account and its published key (not a secret: every emulator has it).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
             "KBHBeksoGMGw==")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gcs_emulator() -> Iterator[str]:
    """gcp-storage-emulator in memory on 127.0.0.1; yields its URL (STORAGE_EMULATOR_HOST)."""
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


class _Refusing(BaseHTTPRequestHandler):
    """Google's token endpoint, refusing the signed assertion (what a revoked key gets)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        send_json(self, 400, {"error": "invalid_grant",
                            "error_description": "Invalid JWT Signature."})

    def log_message(self, *args: object) -> None:
        pass


class RefusingTokenEndpoint(LoopbackServer):
    """A token endpoint on 127.0.0.1 that refuses every key (`url`: a key file's token_uri)."""

    handler_class = _Refusing

    @property
    def url(self) -> str:
        return f"{self.base_url}/token"


class _Listing(BaseHTTPRequestHandler):
    """GCS's JSON API object listing, `maxResults` a page, continued by `pageToken`."""

    fake: PagingGCS

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        from urllib.parse import parse_qs, urlsplit

        query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        self.fake.requests.append(query)
        names = sorted(n for n in self.fake.objects if n.startswith(query.get("prefix", "")))
        start = int(query.get("pageToken", 0))
        size = int(query.get("maxResults", 1000))
        page = {"kind": "storage#objects",
                "items": [{"name": n, "generation": str(self.fake.objects[n]), "size": "10"}
                          for n in names[start:start + size]]}
        if start + size < len(names):
            page["nextPageToken"] = str(start + size)
        send_json(self, 200, page)

    def log_message(self, *args: object) -> None:
        pass


class PagingGCS(LoopbackServer):
    """A GCS listing on 127.0.0.1 that pages as GCS does (the emulator returns every object in
    one page whatever `maxResults` says): `objects` maps names to generations, `requests` holds
    each listing request's query."""

    handler_class = _Listing

    def __init__(self, objects: dict[str, int]) -> None:
        self.objects = objects
        self.requests: list[dict[str, str]] = []


def service_account(token_uri: str) -> dict[str, str]:
    """A service account key file's JSON with a fresh RSA key, its tokens asked of `token_uri`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return {"type": "service_account", "project_id": "situate-tests",
            "private_key_id": "0123456789abcdef0123456789abcdef01234567", "private_key": pem,
            "client_email": "reader@situate-tests.iam.gserviceaccount.com",
            "client_id": "100000000000000000001", "token_uri": token_uri}


def azurite_binary() -> Path:
    """Azurite's blob server, installed into the virtual environment on first use (one worker
    installs it while another waits); skips the test where npm is missing or the install fails."""
    binary = AZURITE_HOME / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("Azure Blob tests need Azurite, an npm package: install Node.js and npm")
    AZURITE_HOME.mkdir(parents=True, exist_ok=True)
    with open(AZURITE_HOME / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent",
                                   "--prefix", str(AZURITE_HOME), AZURITE],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or not binary.exists():
                pytest.skip(f"npm could not install {AZURITE}: "
                            f"{(done.stderr or done.stdout).strip()[-300:]}")
    return binary


@contextmanager
def azurite() -> Iterator[str]:
    """Azurite's blob service in memory on 127.0.0.1; yields a connection string to it."""
    process = subprocess.Popen(
        [str(azurite_binary()), "--blobHost", "127.0.0.1", "--blobPort", "0",
         "--inMemoryPersistence", "--skipApiVersionCheck"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        deadline = time.monotonic() + 60
        assert process.stdout is not None
        while port is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                raise RuntimeError("Azurite exited at start")
            found = re.search(r"listens on http://127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        if port is None:
            raise RuntimeError("Azurite did not start within 60 s")
        threading.Thread(target=process.stdout.read, daemon=True).start()  # drain its log
        yield azure_connection(port, AZURE_KEY)
    finally:
        process.kill()  # in memory: nothing to save (a SIGTERM takes it 10 s)
        process.wait()


def azure_connection(port: int, key: str) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={key};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{AZURE_ACCOUNT};")


# --- what every bucket goes through (gs://, az:// and s3:// alike) ---------------------------

def page(n: int, extra: str = "") -> str:
    return f"# Report {n}\n\nReport {n} covers quarter {n} in enough words to chunk. {extra}\n"


def publish(store: Any) -> None:
    store.create("docs")
    for n in range(5):
        store.put(f"reports/r{n}.md", page(n))
    store.put("reports/", "")  # a folder marker: no document
    store.put("other/x.md", page(9))  # outside the prefix


def change(store: Any) -> None:
    store.put("reports/r1.md", page(1, "Edited."))
    store.put("reports/r7.md", page(7))
    store.delete("reports/r2.md")


def ingest_rounds(store: Any, state: dict[str, str], counting: Any) -> None:
    """A bucket holding `publish`'s objects through the ingest flow: the first run indexes every
    object; a re-run downloads none and writes nothing; 1 edit + 1 add + 1 delete touch exactly
    those and give a fresh ingest's rows."""
    from tests.fakes.milvus_server import snapshot
    from tests.helpers import ingest, searches_like_fresh

    params = {"corpus": f"{store.scheme}://docs/reports/", "collection": "reports",
              "context": "structural", "embedder": "counting", "prune": True}
    first = ingest(**params)
    assert (first.new, first.source["fetched"]) == (5, 5)
    before = snapshot(state["milvus_uri"], "reports")
    counting.texts = 0
    again = ingest(**params)
    assert (again.source["fetched"], again.chunks_written, counting.texts) == (0, 0, 0)
    assert snapshot(state["milvus_uri"], "reports") == before

    change(store)
    synced = ingest(**params)
    assert synced.source["fetched"] == 2
    assert (synced.new, synced.changed, synced.deleted_documents, synced.unchanged) == (1, 1, 1, 3)
    fresh = ingest(**{**params, "collection": "reportsfresh", "cache_dir": state["cache_dir"] + "2"})
    assert fresh.new == 5
    assert snapshot(state["milvus_uri"], "reports") == snapshot(state["milvus_uri"], "reportsfresh")
    searches_like_fresh(state["milvus_uri"], "reports", "reportsfresh")
