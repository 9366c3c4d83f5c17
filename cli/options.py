"""The options of the search faces' commands (`situate search`, `situate api`, `situate mcp`):
the Retriever's configuration (`situate.api.config.RetrieverConfig`), each field a flag, and what
each face adds. Imports no Prefect."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from situate.api.config import RetrieverConfig
from situate.api.request import K, Query, SearchRequest
from situate.core.fields import Flag, FromSetting, from_settings
from situate.core.settings import (
    AUTO_API_PROCESSES,
    AUTO_LITE_ROWS,
    MAX_API_PROCESSES,
    MAX_WORKERS,
)
from situate.pipeline.options import Options, check_reranker_for
from situate.tasks.retrieval.search import check_k


class _RetrieverOptions(Options, RetrieverConfig):
    """Options of the commands that open a Retriever: its settings are its configuration's fields
    (`situate.api.config.RetrieverConfig`), each a flag; `config` is that configuration."""

    def config(self, **face: Any) -> RetrieverConfig:
        """The Retriever's configuration these options hold (checked when they were), with what
        the face sets itself (`model_process`)."""
        values = {name: getattr(self, name) for name in RetrieverConfig.model_fields}
        return RetrieverConfig.model_construct(**{**values, **face})

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        return value  # a flag's bounds are its field's (`--workers 0: Input should be ...`)

    @model_validator(mode="after")
    def _check_reranker(self) -> _RetrieverOptions:
        check_reranker_for([self.mode], self.reranker)
        return self


class SearchOptions(_RetrieverOptions):
    """`situate search` (one query: no flow)."""

    query: Annotated[Query, Flag()]
    k: Annotated[K, Flag(("--k",))] = 10
    json_out: Annotated[bool, Flag(("--json",))] = Field(
        False, description="print the reply as JSON, as POST /search of `situate api` returns it")
    full: Annotated[bool, Flag(("--full",))] = Field(
        False, description="print each chunk's whole text and context, not their first lines")

    _request: SearchRequest | None = PrivateAttr(default=None)

    @field_validator("k", mode="before")
    @classmethod
    def _k(cls, value: Any) -> int:
        return check_k(value)  # worded as HTTP and MCP word it (`situate.api.request`)

    @property
    def request(self) -> SearchRequest:
        """The search, checked as every face checks one (`situate.api.request`)."""
        assert self._request is not None
        return self._request

    @model_validator(mode="after")
    def _check(self) -> SearchOptions:
        self._request = SearchRequest.of({"query": self.query, "k": self.k, "mode": self.mode})
        return self


class _ServingOptions(_RetrieverOptions):
    """What `situate api` and `situate mcp` serve: one collection, searched warm (no flow)."""

    host: Annotated[str, Flag(("--host",))] = Field(
        "127.0.0.1", description="address to listen on; other than loopback needs "
                                 "SITUATE_API_TOKEN")
    port: Annotated[int, Flag(("--port",))] = Field(8000, ge=0, le=65535,
                                                    description="port to listen on")
    # The servers' own default of the Retriever's `workers`: SITUATE_WORKERS, and a flag.
    workers: Annotated[int, Flag(("--workers",), metavar="N"), FromSetting("workers")] = \
        from_settings(ge=1, le=MAX_WORKERS, description="processes of a local embedder that "
                      "embed queries, each on one core (concurrent queries are embedded together)")
    allowed_hosts: Annotated[list[str], Flag(("--allowed-host",), metavar="NAMES"),
                             FromSetting("allowed_hosts")] = from_settings(
        description="names clients call the server by, beyond loopback ones (comma-separated; * "
                    "for any, behind a proxy that checks Host): any other Host is refused; "
                    "needed with a non-loopback --host")
    cors_origins: Annotated[list[str], Flag(("--cors-origin",), metavar="ORIGINS"),
                            FromSetting("cors_origins")] = from_settings(
        description="browser origins (scheme://host[:port], comma-separated) whose pages may call "
                    "the server; no other origin may")
    max_body: Annotated[int, Flag(("--max-body",), metavar="BYTES"),
                        FromSetting("api_max_body")] = from_settings(
        description="largest request body read, in bytes (413 past it)", ge=1024)
    client_limit: Annotated[int, Flag(("--client-limit",), metavar="N"),
                            FromSetting("api_client_limit")] = from_settings(
        description="requests one client address may have in flight (429 past it)", ge=1)
    read_timeout: Annotated[float, Flag(("--read-timeout",), metavar="SECONDS")] = Field(
        10.0, gt=0, le=600, description="seconds a request's body may take to arrive whole (408 "
                                         "past it, and the connection closed)")
    forwarded_allow_ips: Annotated[str | None, Flag(("--forwarded-allow-ips",),
                                                    metavar="ADDRESSES")] = Field(
        None, description="addresses of the reverse proxies whose X-Forwarded-For and "
                              "X-Forwarded-Proto are believed (comma-separated); without it the "
                              "client is the connection's own address")

    @field_validator("allowed_hosts", "cors_origins", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            scheme, sep, rest = origin.partition("://")
            if origin == "*" or not sep or scheme not in ("http", "https") or not rest \
                    or "/" in rest.rstrip("/"):
                raise ValueError(f"{origin!r} is not an origin: give scheme://host[:port], e.g. "
                                 "http://localhost:3000 (each origin by name; no wildcard)")
        return [o.rstrip("/") for o in value]

    def policy(self, token: str) -> Any:
        """The door of the server these options start (`situate.api.guard.Policy`)."""
        from situate.api.guard import Policy

        return Policy(token=token, allowed_hosts=tuple(self.allowed_hosts),
                      cors_origins=tuple(self.cors_origins), max_body=self.max_body,
                      client_limit=self.client_limit, read_timeout=self.read_timeout,
                      forwarded_allow_ips=self.forwarded_allow_ips or "")


class ApiOptions(_ServingOptions):
    """`situate api`: the search over HTTP."""

    processes: Annotated[int, Flag(("--processes",), metavar="N"), FromSetting("api_processes")] = \
        from_settings(ge=0, le=MAX_API_PROCESSES, description="server processes answering on the "
                      "one port, each with its own model process and lexical index (concurrent "
                      "clients use more cores); the limits apply per process; 0: one per core, "
                      f"at most {AUTO_API_PROCESSES}, on a Milvus server (on a milvus-lite server "
                      f"up to {AUTO_LITE_ROWS:,} chunks), else 1")


class McpOptions(_ServingOptions):
    """`situate mcp`: the search as an MCP server."""

    transport: Annotated[str, Flag(("--transport",), choices=lambda: ("stdio", "streamable-http"),
                                   strict=True)] = Field(
        "stdio", description="stdio (an agent starts the server) or streamable-http (--host, "
                             "--port, path /mcp)")
