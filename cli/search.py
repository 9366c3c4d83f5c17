"""The search faces as commands: `situate search` (one query), `situate api` (HTTP) and
`situate mcp`. None runs a flow, so none imports Prefect (its import alone takes seconds): a
contract in pyproject.toml holds this module to it."""

from __future__ import annotations

import gc
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager

from situate.api.retriever import Retriever
from situate.api.wire import SearchResponse, warnings_of
from situate.cli.commands import command
from situate.cli.options import ApiOptions, McpOptions, SearchOptions
from situate.core.records import Hit


def search(options: SearchOptions) -> list[Hit]:
    """The top `k` chunks of a collection for one query (`respond`'s hits)."""
    return respond(options).hits


def respond(options: SearchOptions) -> SearchResponse:
    """The top `k` chunks of a collection for one query: the same `Retriever` an app searches
    with, so the same ranking as `situate evaluate` measures. The model runs in a process of its
    own, so that Ctrl-C stops the command at once, even while torch loads. The reply is the one
    `POST /search` sends (`situate.api.wire`): the hits, the time the search took once the
    store and the model were ready, and where a long query was cut."""
    with _collector_paused(), Retriever.open(options.config(model_process=True)) as retriever:
        started = time.perf_counter()
        hits = retriever.run(options.request)
        return SearchResponse(hits=hits, took_ms=round((time.perf_counter() - started) * 1000, 3),
                              warnings=warnings_of(options.request))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a one-off search opens the store, loads the
    model and answers: the imports and the store's opening make hundreds of thousands of objects
    that live until the command ends, and the collector walked them over and over for nothing
    (about 0.1 s of the command's 1.3 s of CPU here). Back on after, as it was, with those
    objects frozen first (`gc.freeze`): the first collection would otherwise walk them all."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.freeze()
            gc.enable()


@command("print the top chunks for a query",
         """\
  situate search "How is the retry delay computed?" --collection sample --k 5
  situate search "dead letter queue" --collection sample --mode bm25
  situate search "how does the differential executor run both executors" --collection codebase
  # the reply of POST /search, as JSON; the first hit's whole text
  situate search "dead letter queue" --collection sample --json
  situate search "dead letter queue" --collection sample --k 1 --full""")
def cmd_search(options: SearchOptions) -> int:
    reply = respond(options)
    for warning in reply.warnings:  # a long query cut: said where, as the servers say it
        print(f"situate search: warning: {warning}", file=sys.stderr)
    if options.json_out:
        print(reply.model_dump_json())  # the bytes `situate api` sends (`situate.api.http`)
        return 0
    if not reply.hits:
        print("no results")
    for rank, h in enumerate(reply.hits, start=1):
        print(f"{rank:>3}. {h.score:.4f}  {h.doc_id} #{h.index}")
        if options.full:
            if h.context:
                print(textwrap.indent(f"context: {h.context}", "     "))
            print(textwrap.indent(h.text, "     "))
            continue
        if h.context:
            print(f"     context: {_one_line(h.context, 200)}")
        print(f"     {_one_line(h.text, 300)}")
    return 0


@command("serve search over HTTP (POST /search), warm: ranked as evaluate ranks",
         """\
  # POST /search on http://127.0.0.1:8000 (OpenAPI page: /docs)
  situate api --collection sample
  curl -s localhost:8000/search -H 'content-type: application/json' \\
       -d '{"query": "How is the retry delay computed?", "k": 5}'
  # beyond loopback: a token (clients send Authorization: Bearer <TOKEN>) and the names it serves
  export SITUATE_API_TOKEN=$(situate api --new-token)
  situate api --collection sample --host 0.0.0.0 --allowed-host search.example.com""", server=True)
def cmd_api(options: ApiOptions) -> int:
    from situate.api.http import serve

    _said_stopped("api", serve(options.config(), host=options.host, port=options.port,
                               policy=options.policy(_api_token()), processes=options.processes))
    return 0


@command("serve search as an MCP server (stdio or streamable HTTP), warm",
         """\
  # an agent starts it and speaks MCP on its stdin/stdout (tools: search, describe_collection)
  situate mcp --collection sample
  # over streamable HTTP on http://127.0.0.1:8000/mcp
  situate mcp --collection sample --transport streamable-http""", server=True)
def cmd_mcp(options: McpOptions) -> int:
    from situate.api.mcp import serve

    _said_stopped("mcp", serve(options.config(), transport=options.transport, host=options.host,
                               port=options.port, policy=options.policy(_api_token())))
    return 0


def _api_token() -> str:
    from situate.core.settings import get_settings

    return get_settings().api_token.get_secret_value()


def _said_stopped(command: str, signal_name: str | None) -> None:
    if signal_name is not None:
        print(f"situate {command}: stopped ({signal_name})", file=sys.stderr)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
