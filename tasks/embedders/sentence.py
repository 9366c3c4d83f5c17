"""Any sentence-transformers model by name or local path (`--embedder st:NAME_OR_PATH`, and the
cross-encoders of `--rerank st:NAME_OR_PATH`), found and loaded without a download it cannot make.

`resolve_model` runs before anything loads (in the CLI, before Prefect is imported): a local path
must be a directory a model was saved to, and becomes absolute, so the id a collection records
(`st:/abs/path`) names the same model from any working directory and two models never share one.
A Hub name is loaded from the local Hugging Face cache when it is there, so the vectors behind a
recorded id do not change when the Hub's copy does and no network is touched; a name that is not
cached is downloaded only when the Hub may be reached (HF_HUB_OFFLINE unset), else it is one
error line saying how to get the model.

This module imports no Prefect, no torch and no project module with state: the model process
(tasks/embedders/local.py) imports it to build the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from situate.core.errors import InputError, ProviderError

# Files one of which every saved sentence-transformers (or plain transformers) model has.
_MODEL_FILES = ("modules.json", "config.json")
_TRUTHY = {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUTHY


def looks_like_path(arg: str) -> bool:
    """`/x`, `./x`, `../x`, `~/x`, or anything that exists on disk; `org/name` is a Hub name."""
    return arg.startswith(("/", ".", "~")) or os.path.exists(arg)


def resolve_model(arg: str, kind: str) -> str:
    """The model `arg` names, checked without loading it: an absolute directory, or a Hub name.

    `kind` is "embedder" or "reranker", for messages. Raises an InputError for no model and a
    ProviderError for a path with no model or an uncached Hub name while offline.
    """
    what = f"{kind} 'st'"
    flag = "--embedder" if kind == "embedder" else "--rerank"
    arg = arg.strip()
    if not arg:
        raise InputError(f"{what} needs a model: {flag} st:NAME_OR_PATH (a sentence-transformers "
                         "model name, or the directory a model was saved to)")
    if looks_like_path(arg):
        path = Path(arg).expanduser().resolve()
        if not path.is_dir():
            raise ProviderError(f"{what}: no model directory at {path}: give the directory a "
                                "sentence-transformers model was saved to (model.save(DIR)), or a "
                                "model name from the Hugging Face Hub")
        if not any((path / name).is_file() for name in _MODEL_FILES):
            raise ProviderError(f"{what}: {path} holds no model (no modules.json or config.json): "
                                "give the directory a sentence-transformers model was saved to")
        return str(path)
    if hub_offline() and not cached(arg):
        raise ProviderError(f"{what}: model {arg!r} is not in the local Hugging Face cache and "
                            f"HF_HUB_OFFLINE is set: download it once with network (hf download "
                            f"{arg}) or give the path of a saved model")
    return arg



def resolve_embedder(arg: str) -> str:
    """`resolve_model` for an embedder (the `st` embedder spec's check)."""
    return resolve_model(arg, kind="embedder")

def cached(name: str) -> bool:
    """Whether the Hub model `name` is in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return any(isinstance(try_to_load_from_cache(name, f), str) for f in _MODEL_FILES)
    except Exception:  # an invalid repo id, or no huggingface_hub: not cached
        return False


def load_options(model: str) -> dict[str, Any]:
    """Keyword arguments for SentenceTransformer / CrossEncoder: never touch the network for a
    local directory or a cached Hub model."""
    return {"local_files_only": os.path.isabs(model) or hub_offline() or cached(model)}


def quiet() -> None:
    """No progress bars or deprecation chatter from sentence-transformers in a batch job's log."""
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning, module="sentence_transformers")
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


class SentenceEmbedding:
    """A SentenceTransformer behind pymilvus-model's `encode_documents` / `encode_queries` / `dim`.

    Documents and queries go through the model's own `encode_document` / `encode_query`, so a
    model saved with prompts (e5's "passage: " / "query: ", bge's query instruction) gets them
    as its authors configured; vectors are L2-normalized for cosine search.
    """

    def __init__(self, model: Any, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = batch_size

    def encode_documents(self, texts: list[str]) -> Any:
        return self.model.encode_document(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                          show_progress_bar=False, convert_to_numpy=True)

    def encode_queries(self, texts: list[str]) -> Any:
        return self.model.encode_query(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                       show_progress_bar=False, convert_to_numpy=True)

    @property
    def dim(self) -> int:
        model = self.model
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get_dim())


def build_sentence_embedding(model: str, api_key: str, runtime: Any = None) -> object:
    """The embedding function of `st:MODEL` (`model` already resolved) on `runtime`'s device (a
    `situate.tasks.embedders.runtime.Runtime`; torch: fp16 on a GPU); runs in the model's
    process."""
    from situate.tasks.embedders.runtime import Runtime, batch_size, resolve

    options = load_options(model)
    if options["local_files_only"]:
        # A saved model may still name a Hub tokenizer or module: offline, that fails at once
        # instead of waiting on a connection. The model's process is its own (spawned).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    quiet()
    from sentence_transformers import SentenceTransformer

    from situate.tasks.embedders.spans import SpanPooled

    runtime = runtime or Runtime()
    chosen = resolve(runtime, "st")
    st = SentenceTransformer(model, device=chosen.device, **options)
    if chosen.precision == "fp16":
        st.half()
    named = getattr(st, "prompts", None) or {}
    prompts = [p for p in named.values() if p]
    reserve = max((len(st.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts),
                  default=0)
    # What `encode_query` puts in front of a query: the "query" prompt, else the default one.
    query_prompt = named.get("query", named.get(getattr(st, "default_prompt_name", None) or "", ""))
    batch = batch_size(chosen.device, asked=runtime.batch)
    wrapped = SpanPooled(SentenceEmbedding(st, batch), st, reserve=reserve,
                       query_prompt=query_prompt or "")
    wrapped.info = chosen.report(batch)
    return wrapped


def load_cross_encoder(model: str) -> Any:
    """The sentence-transformers CrossEncoder `model` (already resolved), on the CPU."""
    options = load_options(model)
    quiet()
    from sentence_transformers import CrossEncoder

    return CrossEncoder(model, device="cpu", **options)
