"""What a `Retriever` is opened with, defined once: `RetrieverConfig`, a frozen model checked
when it is made. Its fields are the search's settings for every face: `Retriever.open(config)`,
`situate.api.http.serve(config, ...)`, `situate.api.mcp.serve(config, ...)`, the framework
retrievers, and the options of `situate search`, `api` and `mcp`, which are made of these fields
(`situate.cli.options`): a field's `Flag` is its command-line flag, and its help and the
generated reference come from its description, so a setting added here reaches every face.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, PlainSerializer, ValidationError, field_validator, model_validator

from situate.core.errors import InputError
from situate.core.fields import Flag, FromSetting, Settled, from_settings
from situate.core.settings import MAX_WORKERS
from situate.core.uri import shown


def mode_names() -> list[str]:
    from situate.tasks.retrieval.search import MODES

    return list(MODES)


def reranker_names() -> list[str]:
    from situate.tasks.rerankers.base import RERANKERS

    return RERANKERS.names()


def fusion_names() -> list[str]:
    from situate.core.fusion import FUSIONS

    return list(FUSIONS)


def backend_choices() -> list[str]:
    from situate.tasks.embedders.runtime import backend_names

    return backend_names()


def embedder_names() -> list[str]:
    from situate.tasks.embedders.base import EMBEDDERS

    return EMBEDDERS.names()


def _store_uri(value: str) -> str:
    from situate.storage import uri_problem  # as the kind of store its scheme names says

    problem = uri_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _fusion(value: str) -> str:
    from situate.tasks.retrieval.search import check_fusion

    return check_fusion(value)  # a bad SITUATE_FUSION is said as such


def _device(value: str) -> str:
    from situate.tasks.embedders.runtime import check_device

    return check_device(value)  # a device named and absent: one InputError line (exit 2)


# A store's URI. A flow run's parameters are stored by Prefect (its database, the UI): a URI's
# user information never goes there (the run in this process keeps it; a deployment refuses it).
StoreUri = Annotated[str, Flag(("--milvus-uri",), metavar="MILVUS_URI"), FromSetting("milvus_uri"),
                     AfterValidator(_store_uri), PlainSerializer(shown, when_used="json")]
# How a search ranks, alike in `situate evaluate`, `search`, `api` and `mcp`: the mode, the
# reranker of the rerank mode, the fusion of hybrid's two legs.
SearchMode = Annotated[str, Flag(("--mode",), choices=mode_names, strict=True),
                       Field(description="retrieval mode (rerank: hybrid reranked by --rerank)")]
Reranker = Annotated[str, Flag(("--rerank",), metavar="RERANKER", choices=reranker_names,
                               hint="cohere[:model] or st:NAME_OR_PATH"),
                     FromSetting("reranker"), Field(description="reranker of the rerank mode")]
Fusion = Annotated[str, Flag(("--fusion",), choices=fusion_names, strict=True),
                   FromSetting("fusion"), AfterValidator(_fusion),
                   Field(description="how hybrid search fuses dense and BM25")]
Device = Annotated[str, Flag(("--device",), metavar="DEVICE"), FromSetting("device"),
                   AfterValidator(_device)]
# Queries: left empty, as the collection was embedded (its recorded backend).
QueryBackend = Annotated[str | None, Flag(("--backend",), metavar="BACKEND",
                                          choices=backend_choices, strict=True)]


# The fields a face sets for its user rather than a flag of every command: how many model
# processes (a server's --workers), whether the model runs in a process of its own, the tries at
# a Milvus server that is down (a server's are few, so that a request is answered 503 at once).
SET_BY_FACE = frozenset({"workers", "model_process", "retry_attempts"})


class RetrieverConfig(Settled):
    """A Retriever's settings: the collection and the store at `uri` (default
    `SITUATE_MILVUS_URI`), the default `mode`, hybrid's `fusion` (default `SITUATE_FUSION`), the
    `reranker` of the rerank mode (default `SITUATE_RERANKER`), how and where the queries'
    embedder runs (`backend`, `device`), in how many processes (`workers`) and whether in a
    process of its own (`model_process`), the `embedder` the collection must have been embedded
    with (default: whichever it was), and the attempts at a Milvus server that is down
    (`retry_attempts`). Checked when made: a bad value is one InputError (`checked`)."""

    collection: Annotated[str, Flag(("--collection",))] = Field(
        description="Milvus collection name")
    uri: StoreUri = from_settings(description="Milvus Lite file, or http(s)://host:port")
    mode: SearchMode = "hybrid"
    reranker: Reranker = from_settings()
    fusion: Fusion = from_settings()
    backend: QueryBackend = Field(None, description="how the queries' embedder runs (default: as "
                                                   "the collection was embedded)")
    device: Device = from_settings(description="where the queries' embedder runs: auto, cpu, "
                                   "cuda, cuda:N or mps")
    workers: int = Field(1, description="processes of a local embedder that embed queries")
    model_process: bool = Field(False, description="the model in a process of its own")
    embedder: Annotated[str | None, Flag(("--embedder",), choices=embedder_names,
                                         hint="optionally name:model")] = Field(
        None, description="embedder of the queries (default: the one the collection was built "
                          "with; must be the same)")
    retry_attempts: int | None = Field(None, description="tries at a Milvus server that is down")

    @field_validator("collection", mode="before")
    @classmethod
    def _collection(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise InputError(f"collection must be a name, not {type(value).__name__}")
        return value

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> str:
        return check_mode(value)

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> int:
        return check_workers(value)

    @model_validator(mode="after")
    def _collection_name(self) -> RetrieverConfig:
        from situate.storage import store_kind

        store_kind(self.uri).check_collection(self.collection)  # the store's own rule
        return self

    @classmethod
    def checked(cls, **values: Any) -> RetrieverConfig:
        """The configuration of `values` (None: the default or its setting), or one InputError
        naming what is wrong."""
        try:
            return cls(**{k: v for k, v in values.items() if v is not None})
        except ValidationError as e:
            first = e.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else ""
            message = first["msg"].removeprefix("Value error, ")
            if name == "uri":
                raise InputError(f"store URI {shown(str(first.get('input')))!r} {message}") from None
            raise InputError(f"{name} {first.get('input')!r}: {message}") from None


def check_mode(mode: object) -> str:
    """A retrieval mode (`situate.tasks.retrieval.search.MODES`), else one InputError."""
    from situate.tasks.retrieval.search import MODES, check_modes

    if not isinstance(mode, str):
        raise InputError(f"retrieval mode must be text, not {type(mode).__name__}: use one of "
                         f"{', '.join(MODES)}")
    return check_modes([mode])[0]


def check_workers(workers: object) -> int:
    """A number of model processes: a whole number from 1 to MAX_WORKERS, else one InputError."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"workers={workers!r} is not a number of model processes: give a whole "
                         f"number from 1 to {MAX_WORKERS}")
    return workers


__all__ = ["SET_BY_FACE", "Device", "Fusion", "QueryBackend", "Reranker", "RetrieverConfig",
           "SearchMode", "StoreUri", "backend_choices", "check_mode", "check_workers",
           "embedder_names", "fusion_names", "mode_names", "reranker_names"]
