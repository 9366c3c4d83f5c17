"""What the servers send and take, shared by HTTP (`situate.api.http`) and MCP
(`situate.api.mcp`): one search request, one response (the MCP tool's structured result is the
same JSON as `POST /search`'s body), the collection's description, and each error as a status and
one line that says what to do. No secret reaches a message: each is redacted
(`situate.core.secrets.redact`: API keys, SITUATE_MILVUS_TOKEN, SITUATE_API_TOKEN).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from situate.api.retriever import CollectionDescription
from situate.core.errors import (
    CollectionNotFound,
    InputError,
    ProviderError,
    SituateError,
    StoreError,
    StoreUnreachable,
)
from situate.core.records import Hit
from situate.core.secrets import redact
from situate.tasks.retrieval.search import MAX_K, MODES

MODES_TEXT = " | ".join(MODES)
REQUEST_SHAPE = (f'send JSON {{"query": "words to search for", "k": 1-{MAX_K}, "mode": '
                 f'"{MODES_TEXT}"}}')


class SearchRequest(BaseModel):
    """One query. `k` and `mode` are checked by the retriever, so every face says the same."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="what to search for", examples=["how is the retry delay computed?"])
    k: int = Field(10, description=f"number of hits, 1 to {MAX_K}")
    mode: str | None = Field(None, description=f"{MODES_TEXT}; default: the server's --mode "
                                               "(rerank needs a reranker: COHERE_API_KEY or "
                                               "SITUATE_RERANKER=st:...)")
    collection: str | None = Field(None, description="the collection served (optional; a server "
                                                     "serves one and refuses any other)")


class SearchHit(BaseModel):
    """One chunk: its id, document, place in the document, text, context, score (higher is
    better; fused for hybrid, the reranker's for rerank) and its document's metadata."""

    id: str
    doc_id: str
    index: int
    text: str
    context: str
    score: float
    metadata: dict[str, Any]

    @classmethod
    def of(cls, hit: Hit) -> SearchHit:
        return cls(id=hit.id, doc_id=hit.doc_id, index=hit.index, text=hit.text,
                   context=hit.context, score=hit.score, metadata=dict(hit.metadata))


class SearchResponse(BaseModel):
    """The hits, best first, and the time the search took in the server."""

    hits: list[SearchHit]
    took_ms: float


class CollectionInfo(BaseModel):
    """The collection served: rows, embedder, contexts, when it was last ingested ("" when the
    collection predates situate recording it), and how it is searched."""

    collection: str
    rows: int
    embedder: str
    dim: int | None
    contexts: str
    ingested: str
    mode: str
    modes: list[str]
    fusion: str

    @classmethod
    def of(cls, d: CollectionDescription) -> CollectionInfo:
        return cls(collection=d.collection, rows=d.rows, embedder=d.embedder, dim=d.dim,
                   contexts=d.contexts, ingested=d.ingested, mode=d.mode, modes=list(d.modes),
                   fusion=d.fusion)


class Refused(InputError):
    """A request for another collection than the one served."""


def other_collection(asked: str | None, served: str) -> None:
    """Refuse a request naming a collection this server does not serve."""
    if asked is not None and asked != served:
        raise Refused(f"collection {asked!r} is not served here: this server serves {served!r}; "
                      f"leave collection out, or start `situate api --collection {asked}`")


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
    if isinstance(error, Refused | CollectionNotFound):
        return 404
    if isinstance(error, InputError):
        return 422
    if isinstance(error, ProviderError):
        return 502
    if isinstance(error, StoreError):
        return 503
    return 500


def validation_message(errors: list[Any]) -> str:
    """pydantic's errors of a request body as one line: the first, where it is, what to send."""
    if not errors:
        return f"bad request: {REQUEST_SHAPE}"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    kind = first.get("type", "")
    if kind == "json_invalid":
        return f"the body is not JSON ({first.get('msg', '')}): {REQUEST_SHAPE}"
    if kind == "missing":
        return f"{where or 'body'} is missing: {REQUEST_SHAPE}"
    if kind == "extra_forbidden":
        return f"unknown field {where!r}: {REQUEST_SHAPE}"
    return f"{where or 'body'}: {first.get('msg', 'invalid')}: {REQUEST_SHAPE}"
