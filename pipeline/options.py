"""What each run is told: one pydantic model per command, defined once (the search faces'
commands, which run no flow, have theirs in `situate.cli.options`, on the same `Options`).

A model is the flow's one parameter (Prefect renders it as the deployment's run form and
validates values against it), the source of the CLI's flags, choices and help (`situate.cli.main`
builds its parser from the fields), and of the docs' CLI and configuration pages
(`docs.tools.generate`; a test fails when they differ). A field that a `SITUATE_*` setting can
fill carries `FromSetting`: left empty, it is filled from the settings when the model is made, so
a run is resolved once, where it runs. Building a model checks it: a bad option is one
`InputError` line, before Prefect is even imported. Imports no Prefect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from situate.api.config import (
    Device,
    Fusion,
    QueryBackend,
    Reranker,
    StoreUri,
    backend_choices,
    embedder_names,
    mode_names,
)
from situate.core.errors import InputError, SituateError
from situate.core.fields import Flag, FromSetting, Settled, from_settings, meta
from situate.core.secrets import redact
from situate.core.settings import Settings, get_settings
from situate.core.uri import credentials, shown
from situate.tasks.sources.base import block_name

DEFAULT_KS = (5, 10, 20)
TASK_RUNNERS = ("threads", "dask")


# What a field says besides its type (`Flag`, `FromSetting`): situate.core.fields, shared with
# the Retriever's configuration (situate.api.config), whose fields the search commands take.
_meta = meta

T = TypeVar("T")


def _context_names() -> list[str]:
    from situate.tasks.contexts.base import CONTEXTUALIZERS

    return CONTEXTUALIZERS.names()


def _code_chunk_names() -> list[str]:
    return ["syntax", "text"]


class Options(Settled):
    """Base of every command's options: frozen, no unknown field, settings filled in."""

    _given: frozenset[str] | None = PrivateAttr(default=None)  # what `build` was given

    @classmethod
    def build(cls: type[OptionsT], **values: Any) -> OptionsT:
        """The options from `values` (None: not given), checked; a bad value is one InputError
        naming its flag."""
        given = {k: v for k, v in values.items() if v is not None}
        try:
            options = cls(**given)
        except ValidationError as e:
            raise InputError(_one_line(cls, e)) from None
        options._given = frozenset(given)
        return options

    def given(self) -> dict[str, Any]:
        """The values given to `build`, as JSON (what a deployment stores: the rest is resolved
        from the settings where each run runs)."""
        return self.model_dump(mode="json", include=set(self._given or self.model_fields_set))


OptionsT = TypeVar("OptionsT", bound=Options)


def _one_line(model: type[Options], error: ValidationError) -> str:
    first = error.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    field = model.model_fields.get(name)
    flag = _meta(field, Flag) if field is not None else None
    label = (flag.names[0] if flag and flag.names else name) or model.__name__
    # A value may carry a secret (a URL's user information): masked, as every message is.
    return redact(f"{label} {first.get('input')!r}: {first['msg'].removeprefix('Value error, ')}")


# --- the commands' options ------------------------------------------------------------------------

Collection = Annotated[str, Flag(("--collection",))]
MilvusUri = StoreUri
JsonOut = Annotated[str | None, Flag(("--json",), metavar="OUT")]
Backend = Annotated[str, Flag(("--backend",), metavar="BACKEND", choices=backend_choices, strict=True),
                    FromSetting("embed_backend")]
# Fields `situate ingest` and `situate synth` share: how the corpus is read and cut, where
# contexts are cached, and the context provider's server.
LlmBaseUrl = Annotated[str, Flag(("--llm-base-url",), metavar="URL"), FromSetting("llm_base_url"),
                      Field(description="address of the context provider's server: any "
                                        "OpenAI-compatible server for openai, Ollama's for ollama "
                                        "(default: OPENAI_BASE_URL, OLLAMA_HOST)")]
Concurrency = Annotated[int, Flag(("--concurrency",)), FromSetting("concurrency"),
                       Field(ge=1, description="concurrent context requests")]
CacheDir = Annotated[str, Flag(("--cache-dir",)), FromSetting("cache_dir"),
                    Field(description="context cache directory")]
ChunkSize = Annotated[int, Flag(("--chunk-size",)), FromSetting("chunk_size"),
                     Field(description="characters per chunk for unchunked input")]
ChunkOverlap = Annotated[int, Flag(("--chunk-overlap",)), FromSetting("chunk_overlap"),
                        Field(description="characters shared by consecutive chunks")]
CodeChunks = Annotated[str, Flag(("--code-chunks",), choices=_code_chunk_names, strict=True),
                      FromSetting("code_chunks"),
                      Field(description="cut source files along their syntax (functions, "
                                        "classes) or as text")]
FollowLinks = Annotated[bool, Flag(("--follow-links",), default_text="false"),
                       FromSetting("follow_links"),
                       Field(description="read what symbolic links in a directory corpus point to "
                                         "outside it (files and directories; never /proc, /sys or "
                                         "/dev): off, such links are skipped and counted")]



CredentialsBlock = Annotated[
    str | None, Flag(("--credentials-block",), metavar="BLOCK"),
    AfterValidator(lambda v: v if v is None else block_name(v)),
    Field(description="Prefect block the source's credentials are read from where the run "
                      "runs (TYPE/NAME as `prefect block ls` shows it, e.g. aws-credentials/prod, "
                      "or NAME of a Secret block): the run's parameters hold its name, never a "
                      "secret")]


class IngestOptions(Options):
    """`situate ingest`, and the ingest flow's parameter."""

    corpus: Annotated[str, Flag()] = Field(
        description="the corpus: a pre-chunked .json, a .jsonl of documents, a directory (or "
                    "file) of text, Markdown and source files, or where documents live: a git "
                    "repository (git+https://host/org/repo@main, git+file:///path/repo.git), a "
                    "website (https://docs.example.com/guide/) or a bucket's prefix "
                    "(s3://bucket/prefix/, gs://bucket/prefix/, az://container/prefix/)")
    collection: Collection = Field(description="Milvus collection name")
    milvus_uri: MilvusUri = from_settings(description="Milvus Lite file, or http(s)://host:port")
    context: Annotated[str, Flag(("--context",), choices=_context_names),
                       FromSetting("context", Settings.default_context)] = from_settings(
        description="context provider by name")
    embedder: Annotated[str, Flag(("--embedder",), choices=embedder_names,
                                  hint="optionally name:model; st:NAME_OR_PATH"),
                        FromSetting("embedder")] = from_settings(description="embedder by name")
    backend: Backend = from_settings(description="how a local embedder runs: auto (openvino on "
                                     "the CPU, torch fp16 on a GPU), openvino, openvino-bf16, "
                                     "torch, onnx, onnx-int8, or another measured setting (docs: "
                                     "embedding backends)")
    device: Device = from_settings(description="where a local embedder runs: auto, cpu, cuda, "
                                   "cuda:N or mps")
    model: Annotated[str, Flag(("--model",)), FromSetting("anthropic_model")] = from_settings(
        description="Claude model for --context anthropic (other providers: --context "
                    "name:MODEL)")
    llm_base_url: LlmBaseUrl = from_settings()
    concurrency: Concurrency = from_settings()
    group_chunks: Annotated[bool, Flag(("--group-chunks",))] = Field(
        False, description="situate all chunks of a small document in one request")
    batch: Annotated[bool, Flag(("--batch",))] = Field(
        False, description="use the Message Batches API (half price)")
    cache_dir: CacheDir = from_settings()
    chunk_size: ChunkSize = from_settings()
    chunk_overlap: ChunkOverlap = from_settings()
    code_chunks: CodeChunks = from_settings()
    follow_links: FollowLinks = from_settings()
    credentials_block: CredentialsBlock = None
    prune: Annotated[bool, Flag(("--prune",))] = Field(
        False, description="delete documents no longer in the corpus")
    force: Annotated[bool, Flag(("--force",))] = Field(
        False, description="re-process unchanged documents too")
    rebuild: Annotated[bool, Flag(("--rebuild",))] = Field(
        False, description="rebuild the collection from its own rows after the run even without "
                           "drift (no context paid, nothing embedded)")
    rebuild_at: Annotated[float, Flag(("--rebuild-at",), metavar="SHARE"),
                          FromSetting("rebuild_at")] = from_settings(
        ge=0, description="rebuild when rows written or deleted since the collection was built "
                          "pass this share of its rows (0: any; inf: never by itself)")
    rebuild_below: Annotated[int, Flag(("--rebuild-below",), metavar="ROWS"),
                             FromSetting("rebuild_below")] = from_settings(
        ge=0, description="rebuild a collection of at most this many rows after any change, "
                          "whatever its drift (0: by --rebuild-at alone)")
    task_runner: Annotated[Literal["threads", "dask"],
                           Flag(("--task-runner",), choices=lambda: TASK_RUNNERS, strict=True)] = Field(
        "threads", description="run the per-window tasks on threads here, or on Dask (needs a "
                               "Milvus server --milvus-uri)")
    dask_address: Annotated[str | None, Flag(("--dask-address",))] = Field(
        None, description="scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786 "
                          "(default with dask: a LocalCluster for this run)")
    dry_run: Annotated[bool, Flag(("--dry-run",))] = Field(
        False, description="plan the run against the collection and print what it would do and "
                           "cost; writes and calls nothing")
    json_out: JsonOut = Field(None, description="write the run's summary (or with --dry-run, the "
                                                "plan) as JSON")
    chars_per_token: Annotated[float | None, Flag(("--chars-per-token",))] = Field(
        None, gt=0, description="--dry-run's token estimate: characters per token (default 3.5; "
                                "about 3 for code); calibrate on a real bill")
    context_tokens: Annotated[int | None, Flag(("--context-tokens",))] = Field(
        None, ge=1, description="--dry-run's output estimate: tokens per context (default 100)")

    @model_validator(mode="after")
    def _check(self) -> IngestOptions:
        from situate.tasks.contexts.base import check_context
        from situate.tasks.embedders.base import check_embedder

        check_collection(self.collection, self.milvus_uri)
        check_context(self.context)
        check_embedder(self.embedder, self.backend, self.device)
        check_task_runner(self.task_runner, self.dask_address, self.milvus_uri)
        return self

    def runtime(self) -> Any:
        """The local embedder's backend and device (`situate.tasks.embedders.runtime.Runtime`),
        its exports kept in the user's model cache (SITUATE_MODEL_CACHE), not the project's."""
        from situate.tasks.embedders.runtime import Runtime

        return Runtime(self.backend, self.device, get_settings().model_cache)


class EvaluateOptions(Options):
    """`situate evaluate`, and the evaluate flow's parameter."""

    eval_set: Annotated[str, Flag()] = Field(
        description="evaluation JSONL (the codebase evaluation_set.jsonl format)")
    collection: Collection = Field(
        description="Milvus collection; several, comma-separated (a,b), are each evaluated and "
                    "compared in one chart")
    milvus_uri: MilvusUri = from_settings(description="Milvus Lite file, or http(s)://host:port")
    k: Annotated[list[int], Flag(("--k",), default_text="5,10,20")] = Field(
        default_factory=lambda: list(DEFAULT_KS), description="cut-offs, comma-separated")
    modes: Annotated[list[str], Flag(("--modes",), choices=mode_names,
                                     default_text="dense,bm25,hybrid (and rerank)")] = Field(
        default_factory=list, description="retrieval modes to compare, comma-separated (default: "
                                          "all but rerank; rerank too with a local --rerank "
                                          "st:... or when COHERE_API_KEY is set)")
    reranker: Reranker = from_settings()
    fusion: Fusion = from_settings()
    embedder: Annotated[str | None, Flag(("--embedder",), choices=embedder_names)] = Field(
        None, description="embedder of the queries (default: the one the collection was built "
                          "with; must be the same)")
    backend: QueryBackend = Field(None, description="how the queries' embedder runs (default: as "
                                                   "the collection was embedded)")
    device: Device = from_settings(description="where the queries' embedder runs: auto, cpu, "
                                   "cuda, cuda:N or mps")
    json_out: JsonOut = Field(None, description="write the results as JSON")
    query_batch: Annotated[int, Flag(("--query-batch",), metavar="N")] = Field(
        64, ge=1, le=256, description="queries searched at once (they share the store's calls; "
                                      "each ranks as it does alone); latency is then each "
                                      "batch's time per query: 1 searches one at a time, and "
                                      "measures what one user waits")
    trec_dir: Annotated[str | None, Flag(("--trec",), metavar="DIR")] = Field(
        None, description="also write the run (one file per collection and mode) and the qrels in "
                          "TREC format into DIR, for trec_eval, ir-measures or ranx")
    results_dir: Annotated[str, Flag(("--results-dir",)), FromSetting("results_dir")] = from_settings(
        description="evaluation history directory")

    @field_validator("k", mode="before")
    @classmethod
    def _ks(cls, value: Any) -> Any:
        from situate.tasks.retrieval.metrics import parse_ks

        return parse_ks(value) if isinstance(value, str) else value

    @field_validator("modes", mode="before")
    @classmethod
    def _modes(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [m.strip() for m in value.split(",") if m.strip()] or value.split(",")
        return value

    @model_validator(mode="after")
    def _check(self) -> EvaluateOptions:
        from situate.tasks.retrieval.metrics import parse_ks
        from situate.tasks.retrieval.search import check_modes, default_modes

        split_collections(self.collection, self.milvus_uri)  # every name checked
        parse_ks(",".join(str(k) for k in self.k))
        if not self.modes:  # frozen: set once, here
            object.__setattr__(self, "modes", default_modes(self.reranker).split(","))
        check_modes(self.modes)
        check_reranker_for(self.modes, self.reranker)
        return self

    @property
    def names(self) -> list[str]:
        return split_collections(self.collection, self.milvus_uri)


class ServeOptions(Options):
    """`situate serve`: the two deployments and their schedules. The context, embedder and URI
    left empty are resolved by each run from the settings where it runs."""

    corpus: Annotated[str, Flag()] = Field(description="corpus the ingest deployment re-reads on "
                                                        "every run (a path, or a git, website or "
                                                        "bucket URL, synced on every run)")
    collection: Collection = Field(description="Milvus collection name")
    milvus_uri: MilvusUri = from_settings(description="Milvus Lite file, or http(s)://host:port")
    credentials_block: CredentialsBlock = None
    eval_set: Annotated[str | None, Flag(("--eval-set",))] = Field(
        None, description="evaluation JSONL; without it only ingest is served")
    context: Annotated[str | None, Flag(("--context",), choices=_context_names)] = Field(
        None, description="context provider of the ingest runs")
    embedder: Annotated[str | None, Flag(("--embedder",), choices=embedder_names,
                                         hint="optionally name:model; st:NAME_OR_PATH")] = Field(
        None, description="embedder of the ingest runs")
    ingest_cron: Annotated[str, Flag(("--ingest-cron",))] = Field(
        "0 * * * *", description="ingest schedule (cron: minute hour day month weekday)")
    evaluate_cron: Annotated[str, Flag(("--evaluate-cron",))] = Field(
        "30 * * * *", description="evaluate schedule")
    prune: Annotated[bool, Flag(("--no-prune",), negate=True)] = Field(
        True, description="delete documents that left the corpus (--no-prune keeps them)")
    paused: Annotated[bool, Flag(("--paused",))] = Field(
        False, description="register the schedules paused (runs only when triggered)")
    name: Annotated[str, Flag(("--name",))] = Field(
        "situate", description="deployment name (ingest/NAME, evaluate/NAME)")

    @field_validator("milvus_uri")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        if credentials(value):
            raise ValueError("a deployment's parameters are kept in Prefect's database: give "
                             "the URI without user:password@ and the credentials as "
                             "SITUATE_MILVUS_TOKEN (user:password) where the runs run")
        return value

    @field_validator("corpus")
    @classmethod
    def _no_token(cls, value: str) -> str:
        if "://" in value and credentials(value):
            raise ValueError("a deployment's parameters are kept in Prefect's database: give "
                             "the URL without user:token@ and the token in a Prefect Secret "
                             "block named by --credentials-block, read where the runs run")
        return value


SYNTH_GENERATORS = ("held-out", "anthropic", "openai", "ollama")


class SynthOptions(Options):
    """`situate synth`: an evaluation set made from a corpus (no flow: `situate.pipeline.synth`)."""

    corpus: Annotated[str, Flag()] = Field(description="corpus to make the evaluation set from "
                                                        "(any form ingest reads)")
    out: Annotated[str, Flag(("--out",), metavar="DIR")] = Field(
        description="directory written: eval.jsonl (and corpus/ for held-out)")
    generator: Annotated[str, Flag(("--generator",), choices=lambda: SYNTH_GENERATORS,
                                   hint="an LLM as name:model, e.g. openai:gpt-4.1-mini")] = Field(
        "held-out", description="who writes the queries: held-out sentences (offline, free) or an "
                                "LLM's questions")
    n: Annotated[int, Flag(("--n",))] = Field(200, ge=1, description="queries wanted (chunks "
                                                                     "sampled, for an LLM)")
    seed: Annotated[int, Flag(("--seed",))] = Field(0, description="seed of the sampling")
    llm_base_url: LlmBaseUrl = from_settings()
    concurrency: Concurrency = from_settings()
    cache_dir: CacheDir = from_settings()
    chunk_size: ChunkSize = from_settings()
    chunk_overlap: ChunkOverlap = from_settings()
    code_chunks: CodeChunks = from_settings()
    follow_links: FollowLinks = from_settings()
    dry_run: Annotated[bool, Flag(("--dry-run",))] = Field(
        False, description="say what the run would ask and pay, and write nothing")
    json_out: JsonOut = Field(None, description="write the run's summary (or with --dry-run, the "
                                                "plan) as JSON")
    chars_per_token: Annotated[float | None, Flag(("--chars-per-token",))] = Field(
        None, gt=0, description="--dry-run's token estimate: characters per token (default 3.5; "
                                "about 3 for code); calibrate on a real bill")
    answer_tokens: Annotated[int | None, Flag(("--answer-tokens",))] = Field(
        None, ge=1, description="the plan's output estimate: tokens per question and quote "
                                "(default 80)")

    @model_validator(mode="after")
    def _check(self) -> SynthOptions:
        from situate.tasks.contexts.base import split_context

        name = split_context(self.generator)[0]
        if name not in SYNTH_GENERATORS or (name == "held-out" and self.generator != name):
            raise InputError(f"unknown generator {self.generator!r}: use one of "
                             f"{', '.join(SYNTH_GENERATORS)} (an LLM optionally as name:model)")
        return self


# --- checks shared by the models -------------------------------------------------------------------

def check_reranker_for(modes: Sequence[str], reranker: str) -> None:
    """The reranker, checked where a mode asked for needs one."""
    if "rerank" in modes:
        from situate.tasks.rerankers.base import check_reranker

        check_reranker(reranker)


def check_collection(name: str, uri: str = "") -> str:
    """`name` by the rule of the kind of store `uri` names (its own; a Milvus Lite file's
    without a URI): one InputError saying what a name may be."""
    from situate.storage import STORES, store_kind

    return (store_kind(uri) if uri else STORES.get("file")).check_collection(name)


def check_task_runner(kind: str, dask_address: str | None = None, milvus_uri: str = "") -> None:
    """Threads, or Dask with a store its workers, other processes, share (a Milvus server; the
    kind of store says: `StoreKind.shared_problem`), each opening it from its spec, which never
    holds credentials."""
    if kind not in TASK_RUNNERS:
        raise InputError(f"unknown task runner {kind!r}: use one of {', '.join(TASK_RUNNERS)}")
    if kind == "threads" and dask_address:
        raise InputError("--dask-address needs --task-runner dask")
    if kind != "dask" or not milvus_uri:
        return
    from situate.storage import store_kind

    problem = store_kind(milvus_uri).shared_problem(milvus_uri)
    if problem is not None:
        raise InputError(f"--task-runner dask needs a store its workers (other processes) "
                         f"share: {shown(milvus_uri)!r} {problem}")
    if credentials(milvus_uri):
        raise InputError("--task-runner dask: the workers open the store from its URI, which "
                         "never carries credentials to them: give --milvus-uri without "
                         "user:password@ and the credentials as SITUATE_MILVUS_TOKEN "
                         "(user:password), set where the workers run")


def split_collections(text: str, uri: str = "") -> list[str]:
    """`--collection a,b,c` -> ['a', 'b', 'c'] (collection names hold no comma), each name
    checked by the store's rule (`check_collection`); InputError for an empty or repeated one."""
    names = [c.strip() for c in text.split(",")]
    if not all(names):
        raise InputError(f"--collection {text!r} has an empty name: give names separated by commas")
    for name in names:
        check_collection(name, uri)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"--collection names {repeated[0]!r} twice: give each collection once")
    return names


# --- the documentation view -----------------------------------------------------------------------

def fields(model: type[Options]) -> list[tuple[str, FieldInfo, Flag | None, FromSetting | None]]:
    """(name, field, flag, setting) of each field of `model`, in order."""
    return [(name, f, _meta(f, Flag), _meta(f, FromSetting)) for name, f in model.model_fields.items()]


__all__ = ["DEFAULT_KS", "EvaluateOptions", "Flag", "FromSetting", "IngestOptions",
           "Options", "ServeOptions", "SituateError", "SynthOptions",
           "check_task_runner", "split_collections"]
