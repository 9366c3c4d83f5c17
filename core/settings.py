"""All configuration in one place: `SITUATE_*` environment variables (or a `.env` file), which CLI
flags and deployment parameters override. Read at run time through `get_settings()`, never at
import time; a command's options (situate.pipeline.options) are filled from them. The one value set
otherwise is a secret given as a flag (`--milvus-token`): `configured` puts it in the process's
settings, never in the environment or a flow parameter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Literal

from pydantic import ByteSize, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from situate.core.errors import InputError
from situate.core.secrets import has_key, remember
from situate.core.uri import credentials

# Most processes of a local model that embed a server's queries (`situate api --workers`).
MAX_WORKERS = 32
MAX_API_PROCESSES = 64
# `situate api`'s server processes when none are asked for (`--processes 0`, the default), on a
# Milvus server: one per core it may use, at most this many. Past the API's interpreter, the
# store bounds the queries a second (a `milvus-lite server` is one process), and each process
# holds its own model process and lexical index in memory.
AUTO_API_PROCESSES = 4
# ... and on a `milvus-lite server`, only while the collection holds at most this many chunks:
# Lite walks every row once a dense search call, and each server process sends calls of its own
# (concurrent searches share a call only within one process), so past it a second process costs
# Lite more than it gives (docs/benchmarks: concurrent queries, 737 / 10,000 / 100,000 chunks).
AUTO_LITE_ROWS = 10_000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SITUATE_", env_file=".env", extra="ignore")

    milvus_uri: str = Field("data/milvus.db", description="Milvus Lite file, or http(s)://host:port")
    milvus_token: SecretStr = Field(SecretStr(""), description="token for Milvus server / Zilliz")
    api_token: SecretStr = Field(SecretStr(""), description="token the clients of `situate api` "
                                 "and `situate mcp --transport streamable-http` send (Authorization: "
                                 "Bearer ...); needed to listen on an address other than loopback")
    allowed_hosts: str = Field("", description="names (comma-separated) that clients of "
                               "`situate api` and `situate mcp --transport streamable-http` call "
                               "them by, beyond loopback ones; a request under any other Host is "
                               "refused (DNS rebinding); needed beyond loopback; * for any "
                               "(behind a proxy that checks Host)")
    cors_origins: str = Field("", description="browser origins (comma-separated, "
                              "scheme://host[:port]) whose pages may call `situate api` and "
                              "`situate mcp` (CORS); empty: no other origin may")
    api_max_body: ByteSize = Field("64KiB", validate_default=True, ge=1024, description="largest "
                                   "request body `situate api` and `situate mcp` read (413 past "
                                   "it); e.g. 64KiB, 1MiB")
    api_client_limit: int = Field(64, ge=1, description="requests one client address may have in "
                                  "flight at `situate api` or `situate mcp` (429 past it)")
    api_processes: int = Field(0, ge=0, le=MAX_API_PROCESSES, description="server processes of "
                               "`situate api` answering on its one port, each with its own model "
                               "process and lexical index (concurrent clients then use more "
                               "cores); limits apply per process; 0: one per core, at most "
                               f"{AUTO_API_PROCESSES}, on a Milvus server (on a milvus-lite server "
                               f"up to {AUTO_LITE_ROWS:,} chunks), else 1")
    cache_dir: str = Field("data/cache", description="this project's disk cache: generated "
                           "contexts, ingest manifests")
    model_cache: str = Field("", description="where local models exported for ONNX Runtime and "
                             "OpenVINO are kept (models/), shared by every process and project "
                             "of this user; empty: the user's cache directory (~/.cache/situate "
                             "on Linux, ~/Library/Caches/situate on macOS, "
                             "%LOCALAPPDATA%\\situate\\Cache on Windows)")
    results_dir: str = Field("data/results", description="evaluation JSON reports")
    context: str = Field("", description="structural | anthropic | openai | ollama | none "
                                          "(optionally name:model); default: anthropic when an "
                                          "Anthropic key is configured, else structural")
    embedder: str = Field("minilm", description="embedder by name (`situate ingest --help` lists "
                                                "them), optionally name:model")
    reranker: str = Field("cohere", description="reranker of the rerank mode: cohere[:model] (needs "
                          "COHERE_API_KEY) or st:NAME_OR_PATH (a local sentence-transformers "
                          "CrossEncoder)")
    workers: int = Field(1, ge=1, le=MAX_WORKERS, description="processes of a local embedder "
                         "that embed the queries of `situate api` and `situate mcp` (each uses "
                         "one core; concurrent queries are embedded together in each)")
    fusion: str = Field("cdbsf", description="how hybrid search fuses dense and BM25: cdbsf "
                        "(per-query standardised scores, each leg weighted by how far its best "
                        "stands out) | dbsf (the same, unweighted) | rrf (reciprocal ranks, k=60)")
    anthropic_model: str = Field("claude-haiku-4-5", description="model for --context anthropic")
    llm_base_url: str = Field("", description="address of the context provider's server (openai: "
                              "any OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1; ollama: "
                              "http://127.0.0.1:11434); empty: OPENAI_BASE_URL, OLLAMA_HOST, or "
                              "the provider's own")
    llm_price_input: float | None = Field(None, ge=0, description="dollars per million input "
                                          "tokens for --context openai (overrides the price table)")
    llm_price_cached_input: float | None = Field(None, ge=0, description="dollars per million "
                                                 "cached input tokens for --context openai "
                                                 "(default: the input price when that is given)")
    llm_price_output: float | None = Field(None, ge=0, description="dollars per million output "
                                           "tokens for --context openai")
    llm_context_window: int | None = Field(None, ge=1024, description="context window (tokens) "
                                           "of a self-hosted model (openai, ollama): longer "
                                           "documents are situated in spans of them; default: the "
                                           "price table's, else 8192")
    batch_cache_ttl: Literal["1h", "5m"] = Field("1h", description="life of the prompt-cache "
                                                 "entries of Claude's Message Batches (--batch): "
                                                 "1h outlives a batch round (writes at 2x input)")
    concurrency: int = Field(8, ge=1, description="concurrent requests to the context provider")
    chunk_size: int = Field(800, ge=100, description="characters per chunk for unchunked input")
    chunk_overlap: int = Field(100, ge=0, description="characters shared by consecutive chunks")
    embed_batch: int = Field(64, ge=1, description="texts per embedding call (at least the "
                             "local model's forward batch: 256 on a GPU)")
    embed_backend: str = Field("auto", description="how a local embedder runs: auto (on the "
                               "CPU the measured default, openvino; torch fp16 on a GPU) | torch "
                               "| onnx | onnx-int8 | another measured setting (`situate ingest "
                               "--help`); ONNX models are exported once into the cache directory")
    device: str = Field("auto", description="where a local embedder runs: auto (CUDA when torch "
                        "sees it, else MPS, else the CPU) | cpu | cuda | cuda:N | mps")
    write_batch: int = Field(512, ge=1, description="rows per Milvus upsert")
    window: int = Field(2_000, ge=1, description="chunks (whole documents) ingested as one unit: "
                        "situated, embedded and written by one task; two are in memory at once; "
                        "a run of several windows ends in windows that halve, down to an eighth")
    rebuild_at: float = Field(0.05, ge=0, description="an ingest rebuilds the collection from "
                              "its own rows (no context, no embedding) when the rows written or "
                              "deleted since it was built pass this share of its rows; 0: after "
                              "any, so BM25 always scores as on a fresh ingest; inf: never by "
                              "itself")
    rebuild_below: int = Field(10_000, ge=0, description="a collection of at most this many rows "
                               "is rebuilt after any change, whatever its drift (its rebuild "
                               "takes seconds): BM25 then always scores as on a fresh ingest")
    max_file_bytes: int = Field(10_000_000, ge=1, description="a directory corpus's files over "
                                "this size are skipped unread (and logged)")
    max_document_bytes: int = Field(200_000_000, ge=1, description="the same limit for PDF, "
                                    "Office, EPUB and notebook files, what a zip-based one (DOCX, "
                                    "XLSX, PPTX, EPUB) may inflate to (a zip bomb is refused "
                                    "before inflating), and the characters of text read from "
                                    "any document")
    read_seconds: float = Field(60.0, gt=0, description="CPU seconds one document (PDF, Office, "
                                "EPUB, HTML, Markdown, notebook) may take to read in the reader "
                                "process; a document past it is skipped (`read past 60 s`)")
    read_memory: ByteSize = Field("1GiB", validate_default=True, ge=256 << 20, description="memory "
                                  "(address space) of the reader process: a document that needs "
                                  "more is skipped (`read past 1 GiB`); e.g. 512MiB, 2GiB")
    max_pdf_pages: int = Field(10_000, ge=1, description="a PDF with more pages is skipped unread "
                               "(a page tree can list one page a million times in 2 KB)")
    web_max_pages: int = Field(10_000, ge=1, description="pages a website corpus reads at most "
                               "per run (a run stopped by it deletes nothing)")
    web_max_depth: int = Field(20, ge=0, description="links followed from a website corpus's "
                               "start page, at most, when it has no sitemap")
    web_delay: float = Field(0.0, ge=0, description="seconds between two requests of a website "
                             "corpus to one host, each starting this long after the last (then "
                             "one at a time: web_concurrency applies only without a delay); a "
                             "robots.txt Crawl-delay, up to 60 s, is honoured when longer")
    web_concurrency: int = Field(4, ge=1, le=64, description="requests of a website corpus in "
                                 "flight to one host at once (at most 64), when it asks for "
                                 "no delay (a web_delay or Crawl-delay means one at a time); 4 "
                                 "hides most of each page's latency yet stays below the 6 "
                                 "connections a browser opens to "
                                 "a host; pages are read at most twice this many ahead of the "
                                 "mirror, and listed in the same order whatever the value")
    web_timeout: float = Field(30.0, gt=0, description="seconds one request of a website corpus "
                               "may wait to connect or for the next bytes")
    web_max_seconds: float = Field(3600.0, gt=0, description="seconds a website corpus's sync "
                                   "may take in all (a run stopped by it deletes nothing)")
    web_allow_hosts: str = Field("", description="hosts (comma-separated) beyond its start URL's "
                                 "own that a website corpus's redirects may lead to (a page "
                                 "served from a CDN); pages are named by the start host's URLs")
    web_allow_link_local: bool = Field(False, description="let a website corpus start at a "
                                       "link-local address (169.254.0.0/16, fe80::/10: cloud "
                                       "metadata services), which is otherwise refused")
    follow_links: bool = Field(False, description="read files that symbolic links in a directory "
                               "corpus point to outside it (and linked directories)")
    code_chunks: Literal["syntax", "text"] = Field("syntax", description="how source files are "
                                                 "cut: syntax (along functions and classes, with "
                                                 "tree-sitter; text for languages without a "
                                                 "grammar) or text (lines and blank lines)")
    store_memory_limit: str = Field("", description="memory a Milvus Lite file may take (e.g. "
                                    "8GiB): a plan whose collection is estimated above it says so "
                                    "(dry run, and a warning when a run starts); empty: the "
                                    "memory available on this machine")

    def default_context(self) -> str:
        if self.context:
            return self.context
        return "anthropic" if has_key("anthropic") else "structural"


def default(name: str) -> Any:
    """A setting's default as `Settings` declares it, the environment unread: what a module
    that takes the value as an argument falls back on (the one copy of every default)."""
    return Settings.model_fields[name].default


_configured: dict[str, object] = {}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings in force; a `SITUATE_*` value that cannot be used is one InputError line
    naming the variable (secrets' values are never repeated)."""
    try:
        settings = Settings(**_configured)  # type: ignore[arg-type]
    except ValidationError as e:
        first = e.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        field = Settings.model_fields.get(name)
        secret = field is not None and field.annotation is SecretStr
        given = "" if secret else f" {first.get('input')!r}"
        raise InputError(f"SITUATE_{name.upper()}{given}: {first['msg']}; fix or unset it "
                         "(environment or .env)") from None
    remember(settings.milvus_token.get_secret_value(), settings.api_token.get_secret_value(),
             *credentials(settings.milvus_uri))
    return settings


@contextmanager
def configured(**values: object) -> Iterator[Settings]:
    """Within this block, `values` override the environment (the CLI's secret flags); None
    leaves a value alone. Yields the settings then in force."""
    before = dict(_configured)
    _configured.update({k: v for k, v in values.items() if v is not None})
    get_settings.cache_clear()
    try:
        yield get_settings()
    finally:
        _configured.clear()
        _configured.update(before)
        get_settings.cache_clear()
