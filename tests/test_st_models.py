"""`--embedder st:NAME_OR_PATH`: any sentence-transformers model, by saved directory or Hub name,
found without a download (tasks/embedders/sentence.py); tested with tiny models built here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from situate.core.errors import InputError, ProviderError
from tests.fakes.tiny_models import build_embedder

SITUATE = Path(sys.executable).parent / "situate"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Two tiny models of different sizes, and one saved with e5-style prompts."""
    root = tmp_path_factory.mktemp("st-models")
    return {"a": build_embedder(root / "tiny-a", seed=0, hidden=16),
            "b": build_embedder(root / "tiny-b", seed=1, hidden=24),
            "prompted": build_embedder(root / "tiny-prompted", seed=0, hidden=16,
                                       prompts={"query": "query: ", "document": "passage: "})}


def test_a_saved_model_embeds_in_its_own_process_with_an_absolute_id(models, monkeypatch,
                                                                      embedders):
    monkeypatch.chdir(models["a"].parent)
    emb = embedders.get("st:./tiny-a")  # relative: recorded absolute, valid from any directory
    assert emb.id == f"st:{models['a']}" and os.path.isabs(emb.model)
    assert emb.dim == 16
    texts = ["the worker leases a job", "full jitter backoff", "dead letter queue"]
    docs = np.asarray(emb.embed_documents(texts))
    assert docs.shape == (3, 16)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)  # normalized for cosine
    assert not np.allclose(docs[0], docs[1])
    # Saved without prompts, a text is the same vector as a query and as a document.
    assert np.allclose(emb.embed_queries(texts[:1])[0], docs[0], atol=1e-5)
    assert embedders.get(f"st:{models['a']}") is emb  # one model whichever way it is named


def test_different_models_get_different_ids(models, embedders):
    from situate.tasks.embedders.base import check_embedder

    ids = {":".join(check_embedder(f"st:{models[k]}")[:2]) for k in ("a", "b", "prompted")}
    assert len(ids) == 3


def test_the_models_own_prompts_prefix_queries_and_documents(models, embedders):
    from sentence_transformers import SentenceTransformer

    emb = embedders.get(f"st:{models['prompted']}")
    query, doc = emb.embed_queries(["lease"])[0], emb.embed_documents(["lease"])[0]
    assert not np.allclose(query, doc, atol=1e-4)
    plain = SentenceTransformer(str(models["a"]), device="cpu")  # same weights, no prompts
    expected = plain.encode(["query: lease", "passage: lease"], normalize_embeddings=True)
    assert np.allclose([query, doc], expected, atol=1e-5)


def test_missing_models_are_one_clear_error_before_anything_loads(tmp_path, monkeypatch, embedders):
    from situate.tasks.embedders.base import check_embedder

    with pytest.raises(ProviderError) as info:
        check_embedder(f"st:{tmp_path}/nope")
    assert str(info.value) == (f"embedder 'st': no model directory at {tmp_path}/nope: give the "
                               "directory a sentence-transformers model was saved to (model.save(DIR)), "
                               "or a model name from the Hugging Face Hub")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProviderError, match=rf"{tmp_path}/empty holds no model \(no modules.json"):
        check_embedder(f"st:{tmp_path}/empty")
    with pytest.raises(InputError, match=r"embedder 'st' needs a model: --embedder st:NAME_OR_PATH"):
        check_embedder("st")
    # A Hub name not in the cache, offline: what to do, at once, no connection attempted.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ProviderError, match=r"model 'BAAI/bge-small-en-v1.5' is not in the local Hugging "
                                            r"Face cache and HF_HUB_OFFLINE is set: download it once"):
        check_embedder("st:BAAI/bge-small-en-v1.5")


def test_a_model_that_will_not_load_is_one_provider_error(tmp_path, embedders):

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    emb = embedders.get(f"st:{broken}")
    with pytest.raises(ProviderError, match=rf"embedder st:{broken} could not be loaded: ") as info:
        emb.embed_documents(["x"])
    assert "\n" not in str(info.value)


# --- through the real CLI ------------------------------------------------------------------------

CORPUS = {
    "queue.md": "# Queue\n\nA worker leases a job for thirty seconds; two workers never lease the same "
                "job because the lease is taken in one transaction.\n",
    "backoff.md": "# Backoff\n\nRetries wait with full jitter: a random delay between zero and the "
                  "exponential cap, so that failed workers do not retry in step.\n",
    "dead.md": "# Dead letters\n\nA job that fails max_attempts times is moved to the dead-letter "
               "table, where an operator can requeue it.\n",
}
EVAL = [
    {"query": "how do workers lease a job",
     "golden_quotes": [{"doc_id": "queue.md", "quote": "leases a job"}]},
    {"query": "why full jitter", "golden_quotes": [{"doc_id": "backoff.md", "quote": "full jitter"}]},
    {"query": "requeue a dead-lettered job", "golden_quotes": [{"doc_id": "dead.md", "quote": "requeue"}]},
]


def _cli(*args: str, state: Path, cwd: Path) -> subprocess.CompletedProcess:
    """`situate ARGS` in a fresh process started in `cwd`, its state under `state`."""
    env = {**os.environ, "SITUATE_MILVUS_URI": str(state / "m.db"), "SITUATE_CACHE_DIR": str(state / "cache"),
           "SITUATE_RESULTS_DIR": str(state / "results"), "HF_HUB_OFFLINE": "1"}
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("COHERE_API_KEY", None)
    return subprocess.run([str(SITUATE), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.soak  # the soak tier (`make test-soak`): see README, Tests
def test_cli_ingests_evaluates_and_searches_with_a_saved_model(models, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in CORPUS.items():
        (corpus / name).write_text(text)
    eval_set = tmp_path / "eval.jsonl"
    eval_set.write_text("".join(json.dumps(q) + "\n" for q in EVAL))
    (tmp_path / "tiny-a").symlink_to(models["a"])  # named relative to the command's directory

    r = _cli("ingest", str(corpus), "--collection", "st", "--embedder", "st:./tiny-a", state=tmp_path,
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr

    # evaluate and search load the collection's own model, from another directory.
    r = _cli("evaluate", str(eval_set), "--collection", "st", "--json", "r.json", state=tmp_path,
             cwd=corpus)
    assert r.returncode == 0, r.stderr
    result = json.loads((corpus / "r.json").read_text())
    assert result["queries"] == 3 and set(result["pass_at_k"]) == {"dense", "bm25", "hybrid"}
    assert result["pass_at_k"]["bm25"]["5"] == 100.0  # every document is among 3 chunks
    # The collection recorded the model absolutely, through symlinks: its real directory.
    [history] = (tmp_path / "results").glob("evaluate-st-*.json")
    assert json.loads(history.read_text())["embedder"] == f"st:{models['a'].resolve()}"
    r = _cli("search", "requeue a dead-lettered job", "--collection", "st", "--mode", "dense", "--k", "3",
             state=tmp_path, cwd=corpus)
    assert r.returncode == 0, r.stderr
    assert all(name in r.stdout for name in CORPUS)

    # Another st model's vectors are refused by this collection, in one line, before any loading.
    r = _cli("ingest", str(corpus), "--collection", "st", "--embedder", f"st:{models['b']}",
             state=tmp_path, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    # situate's one line, among the log lines of Prefect and pymilvus (which, on a loaded machine,
    # may log a retried call's "RPC error:")
    [line] = [x for x in r.stderr.splitlines() if x.startswith("situate ingest: error:")]
    assert line == (f"situate ingest: error: collection 'st' at {tmp_path / 'm.db'} holds vectors from "
                    f"st:{models['a'].resolve()}, not st:{models['b'].resolve()}: use another --collection "
                    f"or --embedder st:{models['a'].resolve()}")

    # A path with no model: one line naming it, nothing written.
    r = _cli("ingest", str(corpus), "--collection", "other", "--embedder", "st:/no/such/model",
             state=corpus, cwd=corpus)
    assert _one_error_line(r).endswith("embedder 'st': no model directory at /no/such/model: give "
                                       "the directory a sentence-transformers model was saved to "
                                       "(model.save(DIR)), or a model name from the Hugging Face Hub")
    assert not (corpus / "m.db").exists()

