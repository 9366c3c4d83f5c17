"""Where a search face's milliseconds go, beside the search itself (issue 34).

Against a running `situate api` (its URL) on the codebase collection, over one keep-alive
connection each:
- GET /healthz with a raw socket client and with httpx: the server's floor (uvicorn, FastAPI)
  and what the httpx client adds to it;
- POST /search in BM25 mode (the cheapest search, where a face's own cost shows most) with both
  clients: the round trip less the `took_ms` the server reports for the search;
- the MCP SDK client's check of a search result against the tool's output schema (jsonschema, as
  `ClientSession.call_tool` runs it on every result): a result of 20 hits from the server above,
  validated in this process.

    .venv/bin/situate api --collection codebase --milvus-uri http://127.0.0.1:19634 --port 18734 &
    .venv/bin/python benchmarks/probe_face_overhead.py http://127.0.0.1:18734 \\
        data/benchmarks/codebase/evaluation_set.jsonl
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import time
from urllib.parse import urlsplit

import httpx


def raw_round_trip(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    buffer = b""
    while True:
        buffer += sock.recv(1 << 20)
        head, found, body = buffer.partition(b"\r\n\r\n")
        if not found:
            continue
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        if len(body) >= length:
            return body


def http_request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: probe\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def main() -> None:
    url, eval_set = sys.argv[1], sys.argv[2]
    parts = urlsplit(url)
    queries = [json.loads(line)["query"] for line in open(eval_set)][:20] * 3
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client = httpx.Client(base_url=url)
    report: dict[str, float] = {}

    raw, via_httpx = [], []
    for _ in range(300):
        started = time.perf_counter()
        raw_round_trip(sock, http_request("GET", "/healthz"))
        raw.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        client.get("/healthz").json()
        via_httpx.append((time.perf_counter() - started) * 1000)
    report["healthz_raw_ms"], report["healthz_httpx_ms"] = p50(raw), p50(via_httpx)

    raw_gap, httpx_gap, took = [], [], []
    result: dict = {}
    for query in queries:
        body = json.dumps({"query": query, "k": 20, "mode": "bm25"}).encode()
        started = time.perf_counter()
        answer = json.loads(raw_round_trip(sock, http_request("POST", "/search", body)))
        raw_gap.append((time.perf_counter() - started) * 1000 - answer["took_ms"])
        started = time.perf_counter()
        result = client.post("/search", content=body,
                             headers={"content-type": "application/json"}).json()
        httpx_gap.append((time.perf_counter() - started) * 1000 - result["took_ms"])
        took.append(result["took_ms"])
    report["bm25_search_took_ms"] = p50(took)
    report["bm25_beside_search_raw_ms"] = p50(raw_gap)
    report["bm25_beside_search_httpx_ms"] = p50(httpx_gap)

    from jsonschema import validators
    from jsonschema.exceptions import best_match

    from situate.api.wire import SearchResponse

    schema = SearchResponse.model_json_schema()
    validator = validators.validator_for(schema)(schema)
    started = time.perf_counter()
    for _ in range(200):
        assert best_match(validator.iter_errors(result)) is None
    report["mcp_client_schema_check_20_hits_ms"] = round((time.perf_counter() - started) * 5, 2)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
