"""What the servers send and take, shared by HTTP (`situate.api.http`) and MCP
(`situate.api.mcp`): one search request (`situate.api.request`), one response (the MCP tool's
structured result is the same JSON as `POST /search`'s body) of `Hit`s, the records `Retriever`
returns, the collection's description (`CollectionDescription`, as `Retriever.describe` gives it),
and each error as a status and one line that says what to do. No secret reaches a message: each is
redacted (`situate.core.secrets.redact`: keys, tokens, a URI's user information).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from situate.api.request import MODES_TEXT, SearchRequest
from situate.api.retriever import CollectionDescription
from situate.core.errors import (
    CollectionNotFound,
    CollectionNotServed,
    InputError,
    ProviderError,
    SituateError,
    StoreError,
    StoreUnreachable,
)
from situate.core.records import Hit
from situate.core.secrets import redact
from situate.tasks.retrieval.search import MAX_K, query_cut

REQUEST_SHAPE = (f'send JSON {{"query": "words to search for", "k": 1-{MAX_K}, "mode": '
                 f'"{MODES_TEXT}"}}')


class SearchResponse(BaseModel):
    """The hits, best first, the time the search took in the server, and what the client should
    know of how its request was searched (a long query is searched up to its 64th term)."""

    hits: list[Hit]
    took_ms: float
    warnings: list[str] = Field(default_factory=list, description=(
        "how the request was not searched as sent, one line each: a query longer than 64 terms "
        "(or 8,192 characters) is cut, and the line says where"))


def warnings_of(request: SearchRequest) -> list[str]:
    """What a reply to `request` says of how it was searched (`SearchResponse.warnings`)."""
    cut = query_cut(request.query)
    return [cut] if cut else []


def status_of(error: SituateError) -> tuple[int, str]:
    """An error as an HTTP status and one line a client can act on (what to send, for a bad
    request)."""
    status, message = _status(error), message_of(error)
    return status, f"{message}; {REQUEST_SHAPE}" if status == 422 else message


def message_of(error: SituateError) -> str:
    """An error as one line a client can act on, with no secret in it (an MCP tool error)."""
    if isinstance(error, StoreUnreachable):
        return redact(f"Milvus at {error.uri} did not answer ({error.what}; {error.cause}): try "
                      "again shortly; the server reconnects by itself once Milvus is back")
    if isinstance(error, StoreError) and not isinstance(error, CollectionNotFound):
        return redact(f"{error}: try again shortly")
    return redact(" ".join(str(error).split()))


def _status(error: SituateError) -> int:
    if isinstance(error, CollectionNotServed | CollectionNotFound):
        return 404
    if isinstance(error, InputError):
        return 422
    if isinstance(error, ProviderError):
        return 502
    if isinstance(error, StoreError):
        return 503
    return 500


__all__ = ["CollectionDescription", "Hit", "SearchRequest", "SearchResponse", "message_of",
           "status_of", "warnings_of"]
