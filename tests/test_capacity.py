"""The store's capacity in the plan: `situate ingest --dry-run` estimates the memory the collection
will take in Milvus Lite, within 25% of what a `milvus-lite server` then holds once the same rows
are written (situate's store, structural contexts, a 384-d hash embedding); a limit set low
(SITUATE_STORE_MEMORY_LIMIT) brings the one-line warning that says what to do; a server URI gets
no warning; and a collection made on a server has the HNSW index and mmap settings."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import psutil
import pytest

from tests.fakes.hash_embedding import HashEmbedding

WORDS = ("lease queue worker retry backoff shard replica index vector segment commit flush compact "
         "schema field tensor batch token cache prompt context chunk document corpus embed search "
         "rank fusion score cluster node pool thread process signal timeout deadline budget window "
         "stream record offset cursor page table column row partition bucket hash digest").split()


class Hash384(HashEmbedding):
    """The tests' hash embedding at the default embedder's dimension."""

    dim = 384


@pytest.fixture
def hash384():
    from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec

    EMBEDDERS.register("hash384", EmbedderSpec("bow-384", "math", "", "", lambda m, k: Hash384()))
    yield "hash384"
    EMBEDDERS.unregister("hash384")


def _corpus(path: Path, documents: int, seed: int = 3) -> Path:
    """JSONL documents of 8 paragraphs of ~760 characters (one chunk each at the default size)."""
    rng = random.Random(seed)
    with path.open("w") as f:
        for d in range(documents):
            paragraphs = []
            for _ in range(8):
                words: list[str] = []
                while sum(len(w) + 1 for w in words) < 740:
                    words.append(rng.choice(WORDS))
                paragraphs.append(" ".join(words) + ".")
            f.write(json.dumps({"id": f"doc-{d:05d}", "text": "\n\n".join(paragraphs),
                                "metadata": {"title": f"document {d}"}}) + "\n")
    return path


def _dry_run(corpus: Path, embedder: str, *extra: str, json_out: Path,
             capsys: pytest.CaptureFixture[str]) -> tuple[str, dict]:
    from situate.cli.main import main

    assert main(["ingest", str(corpus), "--collection", "cap", "--context", "structural",
                 "--embedder", embedder, "--dry-run", "--json", str(json_out), *extra]) == 0
    return capsys.readouterr().out, json.loads(json_out.read_text())


def test_limit_set_low_warns_in_one_line_with_what_to_do(state, hash384, tmp_path, monkeypatch,
                                                         capsys):
    from situate.core.settings import get_settings

    corpus = _corpus(tmp_path / "corpus.jsonl", 50)
    out, plan = _dry_run(corpus, hash384, json_out=tmp_path / "plan.json", capsys=capsys)
    store = plan["store_memory"]
    assert store["rows"] == plan["chunks_written"] == 400
    assert store["dim"] == 384 and store["store"] == "lite"
    assert store["limit_source"] == "available on this machine" and not store["warning"]
    assert "warning" not in out and "store memory (estimate, 400 rows, 384-d)" in out
    # Per row, Milvus Lite's figure is above a loaded server's, which is above a mapped one's.
    assert store["lite_bytes"] > store["server_bytes"] > store["server_mmap_bytes"] > 0

    monkeypatch.setenv("SITUATE_STORE_MEMORY_LIMIT", "1MiB")
    get_settings.cache_clear()
    out, plan = _dry_run(corpus, hash384, json_out=tmp_path / "plan.json", capsys=capsys)
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "1.0 MiB SITUATE_STORE_MEMORY_LIMIT" in warnings[0]
    assert "--milvus-uri" in warnings[0] and "Milvus server" in warnings[0]
    assert plan["store_memory"]["limit_bytes"] == 2**20


def test_store_memory_limit_must_be_a_size(state, hash384, tmp_path, monkeypatch, capsys):
    from situate.cli.main import main
    from situate.core.settings import get_settings

    monkeypatch.setenv("SITUATE_STORE_MEMORY_LIMIT", "lots")
    get_settings.cache_clear()
    corpus = _corpus(tmp_path / "corpus.jsonl", 2)
    assert main(["ingest", str(corpus), "--collection", "cap", "--context", "structural",
                 "--embedder", hash384, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "SITUATE_STORE_MEMORY_LIMIT" in err and "8GiB" in err and "Traceback" not in err


def test_sizes_and_server_estimate_without_warning(monkeypatch):
    from situate.core.settings import get_settings
    from situate.pipeline.capacity import store_capacity
    from situate.storage.capacity import RowSizes, parse_bytes

    assert parse_bytes("512MiB") == 512 * 2**20 and parse_bytes("1.5 GiB") == int(1.5 * 2**30)
    assert parse_bytes("2g") == 2 * 2**30 and parse_bytes("1000") == 1000
    with pytest.raises(ValueError):
        parse_bytes("-1GB")
    monkeypatch.setenv("SITUATE_STORE_MEMORY_LIMIT", "1KiB")
    get_settings.cache_clear()
    try:
        sizes = RowSizes(rows=1, text=800, lexical=800, terms=70, metadata=40)
        lite = store_capacity("data/x.db", 1_000_000, 384, sizes)
        server = store_capacity("http://milvus:19530", 1_000_000, 384, sizes)
    finally:
        get_settings.cache_clear()
    assert lite.warning and not server.warning
    # A million 384-d rows: Lite needs gigabytes more than a server's memory-mapped collection.
    assert lite.lite_bytes > 5 * 2**30 > 3 * 2**30 > server.server_mmap_bytes


def test_server_collection_has_hnsw_and_search_asks_ef(tmp_path):
    """A collection made on a server gets HNSW (M=16, efConstruction=200); searches with more
    hits than the default ef still return them all (ef raised to the limit)."""
    from situate.core.records import Document, EmbeddedDocument, Situated
    from situate.storage.milvus import MilvusStore
    from situate.tasks.corpus.load import stream_corpus
    from tests.fakes.milvus_server import milvus_server

    corpus = _corpus(tmp_path / "c.jsonl", 20)
    emb = Hash384()
    docs: list[Document] = list(stream_corpus(str(corpus)))
    with milvus_server(tmp_path / "data") as uri, MilvusStore(uri) as store:
        store.ensure_collection("hnsw", emb.dim, "hash384:bow-384")
        store.write("hnsw", [EmbeddedDocument(d, "f", tuple(Situated(c, "", "none") for c in d.chunks),
                                              emb.encode_documents([c.text for c in d.chunks]))
                             for d in docs])
        store.flush("hnsw")
        index = store.client.describe_index("hnsw", "dense")
        assert index["index_type"] == "HNSW"
        assert int(index.get("M", 16)) == 16
        hits = store.leg_search("hnsw", "dense", "", emb.encode_queries(["lease queue"])[0], 150)
        assert len(hits) == 150 == len({h.id for h in hits})


@pytest.mark.slow
def test_dry_run_estimate_within_25_percent_of_what_milvus_lite_holds(state, hash384, tmp_path,
                                                                       capsys):
    """8,000 chunks: the dry run's Milvus Lite estimate against the peak RSS of a `milvus-lite
    server` (above its RSS when empty) while the same rows are written by situate's store."""
    from situate.core.records import EmbeddedDocument, grouped
    from situate.storage.milvus import MilvusStore
    from situate.tasks.contexts.base import ContextConfig, get_contextualizer
    from situate.tasks.corpus.load import stream_corpus
    from tests.fakes.milvus_server import MilvusServer

    corpus = _corpus(tmp_path / "corpus.jsonl", 1_000)
    _, plan = _dry_run(corpus, hash384, json_out=tmp_path / "plan.json", capsys=capsys)
    estimate = plan["store_memory"]["lite_bytes"]
    assert plan["store_memory"]["rows"] == 8_000

    server = MilvusServer(tmp_path / "data", timeout=180)
    server.start()
    try:
        assert server.proc is not None
        process = psutil.Process(server.proc.pid)
        base = process.memory_info().rss
        peak = [base]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], process.memory_info().rss)
                stop.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        contextualizer = get_contextualizer(ContextConfig(name="structural"))
        emb = Hash384()
        try:
            with MilvusStore(server.uri) as store:
                store.ensure_collection("cap", emb.dim, "hash384:bow-384")
                for docs in grouped(stream_corpus(str(corpus)), 2_000, lambda d: len(d.chunks)):
                    batch = []
                    for doc in docs:
                        situated = tuple(contextualizer.situate(doc, doc.chunks).situated)
                        batch.append(EmbeddedDocument(doc, "f", situated, emb.encode_documents(
                            [s.indexed_text for s in situated])))
                    store.write("cap", batch, absent={d.id for d in docs})
                store.flush("cap")
                assert store.count("cap") == 8_000
                stop.wait(3)  # background compaction after the last flush
        finally:
            stop.set()
            sampler.join()
    finally:
        server.stop()
    used = peak[0] - base
    assert 0.75 <= estimate / used <= 1.25, (estimate / 2**20, used / 2**20)


def test_a_run_starts_with_the_warning_when_its_lite_file_will_not_fit(state, hash384, tmp_path,
                                                                      monkeypatch):
    """The warning a real run logs before writing (from the scan's chunks): present under a low
    limit for a Lite file, absent for a server URI and under the machine's own memory."""
    from situate.core.settings import get_settings
    from situate.pipeline.options import IngestOptions
    from situate.pipeline.plan import gather_inputs, run_warning
    from situate.pipeline.resources import Resources

    corpus = _corpus(tmp_path / "corpus.jsonl", 20)
    options = IngestOptions.build(corpus=str(corpus), collection="cap", embedder=hash384,
                                  context="structural")
    resources = Resources()
    try:
        setup = gather_inputs(options, resources, dry_run=True)
        assert setup.scan.chunks == 160
        assert run_warning(options, setup) == ""
        monkeypatch.setenv("SITUATE_STORE_MEMORY_LIMIT", "100KiB")
        get_settings.cache_clear()
        warning = run_warning(options, setup)
        assert "160 rows" in warning and "--milvus-uri" in warning
        served = IngestOptions.build(corpus=str(corpus), collection="cap", embedder=hash384,
                                     context="structural", milvus_uri="http://127.0.0.1:19530")
        assert run_warning(served, setup) == ""
    finally:
        resources.close()
