"""One search request, checked the same way on every face: `Retriever.search` in Python (and the
LangChain and LlamaIndex retrievers over it), `POST /search` over HTTP and the MCP `search` tool.
Each face hands the values it was given, untouched, to `SearchRequest.of` (HTTP: `of_json`), so
a value one face accepts no other refuses, and each refusal is the same one InputError line.

`k` is a whole number (JSON's `5`, never `"5"`, `5.0` or `true`) from 1 to MAX_K; an unknown field
is refused (a misspelt `top_k` would otherwise be ignored in silence); `collection`, when given,
must be the one served. A refusal shows at most a short, escaped prefix of the value it refuses
(`situate.api.guard.shown`): a 24 KB mode is not sent back. A body too deeply nested for the JSON
parser is refused as any other body that is not JSON.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from situate.api.guard import SHOWN, printable, shown
from situate.core.errors import InputError
from situate.tasks.retrieval.search import MAX_K, MODES, check_k, check_modes

MODES_TEXT = " | ".join(MODES)
FIELDS = ("query", "k", "mode", "collection")
# Longest collection name Milvus takes: a longer one is refused before it is named in a reply.
MAX_NAME = 255


# Each field once, with its bounds and description: the request below, the MCP tool's
# parameters (situate.api.mcp) and `situate search`'s options (situate.cli.options) are typed by
# these, and every face checks what it was given through `SearchRequest.of`.
Query = Annotated[str, Field(description="what to search for",
                             examples=["how is the retry delay computed?"])]
K = Annotated[int, Field(ge=1, le=MAX_K,
                         description=f"number of hits, a whole number from 1 to {MAX_K}")]
Mode = Annotated[str | None, Field(description=f"{MODES_TEXT}, as the server can run them; "
                                               "default: the server's --mode (rerank needs a "
                                               "reranker: COHERE_API_KEY or SITUATE_RERANKER=st:...)")]
Served = Annotated[str | None, Field(description="the collection served (optional; a server "
                                                 "serves one and refuses any other)")]


class SearchRequest(BaseModel):
    """One query: what to search for, how many hits, in which mode, in which collection."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: Query
    k: K = 10
    mode: Mode = None
    collection: Served = None

    @field_validator("query", mode="before")
    @classmethod
    def _query(cls, value: Any) -> str:
        if not isinstance(value, str):
            raise InputError(f"query must be text, not {_kind(value)}: give words to search for")
        if not value.strip():
            raise InputError("empty query: give words to search for")
        return value

    @field_validator("k", mode="before")
    @classmethod
    def _k(cls, value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_K:
            return check_k(value)
        raise InputError(f"k={_shown(value)} is not a number of hits: give a whole number from 1 "
                         f"to {MAX_K}")

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise InputError(f"retrieval mode must be text, not {_kind(value)}: use one of "
                             f"{', '.join(MODES)}")
        if value not in MODES:
            raise InputError(f"unknown retrieval mode {shown(value)}: use one of "
                             f"{', '.join(MODES)}")
        return check_modes([value])[0]

    @field_validator("collection", mode="before")
    @classmethod
    def _collection(cls, value: Any) -> str | None:
        if value is not None and not isinstance(value, str):
            raise InputError(f"collection must be a name, not {_kind(value)}")
        if value is not None and len(value) > MAX_NAME:
            raise InputError(f"collection {shown(value)} is not a collection's name (at most "
                             f"{MAX_NAME} characters): leave collection out")
        return value

    @classmethod
    def of(cls, values: Any) -> SearchRequest:
        """The request from the values a face was given, or one InputError line."""
        if not isinstance(values, dict):
            raise InputError(f"a search is an object with fields {', '.join(FIELDS)}, not "
                             f"{_kind(values)}")
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            raise InputError(_one_line(e)) from None

    @classmethod
    def of_json(cls, body: bytes) -> SearchRequest:
        """The request from a JSON body, or one InputError line."""
        try:
            values = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise InputError(f"the body is not JSON ({_first_line(str(e))})") from None
        except RecursionError:  # "[[[[...": deeper than the parser goes
            raise InputError("the body is not JSON (nested too deeply)") from None
        return cls.of(values)


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    kind = first.get("type", "")
    if kind == "missing":
        return f"{where} is missing: give words to search for" if where == "query" else \
            f"{where} is missing"
    if kind == "extra_forbidden":
        return f"unknown field {shown(where)}: a search takes {', '.join(FIELDS)}"
    return f"{where or 'request'}: {_first_line(str(first.get('msg', 'invalid')))}"


def _first_line(text: str) -> str:
    return " ".join(text.split())[:200]


def _shown(value: Any) -> str:
    """A value a client sent, as a refusal shows it: text and numbers as a short prefix, anything
    else by its kind (a list nested 900 deep is not written out)."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, bool | int | float):
        return printable(repr(value), SHOWN)
    return _kind(value)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
