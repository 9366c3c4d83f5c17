"""An ingest's windows embed and write in the order they were read (`situate.pipeline.order`), and a
window that fails holds back none of the others."""

from __future__ import annotations

import json
import threading
import time

import pytest

from situate.core.records import Chunk, Document
from situate.pipeline.order import WindowOrder
from situate.pipeline.plan import windows


def test_windows_enter_each_stage_in_order_whatever_order_they_arrive_in():
    order = WindowOrder()
    entered: list[int] = []

    def window(i: int) -> None:
        time.sleep(0.02 * (3 - i))  # the last arrives first
        with order.stage("write", i):
            entered.append(i)

    threads = [threading.Thread(target=window, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert entered == [0, 1, 2, 3]


def test_a_window_that_ends_early_holds_back_no_window_after_it():
    order = WindowOrder()
    order.done(1)  # failed before embedding: passes both stages, out of turn
    entered = threading.Event()

    def third() -> None:
        with order.stage("embed", 2):
            entered.set()

    thread = threading.Thread(target=third)
    thread.start()
    assert not entered.wait(0.2)  # window 0 has not passed yet
    with order.stage("embed", 0):
        pass
    assert entered.wait(5)  # 0 passed, 1 passed early: 2 goes on
    thread.join(5)


def test_unordered_windows_wait_for_nothing():
    """On Dask each window has its own order, starting at itself: window 5 enters at once."""
    entered = threading.Event()

    def fifth() -> None:
        with WindowOrder(first=5).stage("embed", 5):
            entered.set()

    threading.Thread(target=fifth, daemon=True).start()
    assert entered.wait(5)


def _docs(sizes: list[int]) -> list[Document]:
    return [Document(f"d{i}", "x", tuple(Chunk(f"d{i}", j, "x", 0) for j in range(n)), f"d{i}", {})
            for i, n in enumerate(sizes)]


def _cut(sizes: list[int], size: int, total: int | None) -> list[list[int]]:
    return [[len(d.chunks) for d in w] for w in windows(_docs(sizes), size, total)]


def test_the_last_window_of_a_run_is_cut_small():
    """The last `size` chunks go in windows that halve down to an eighth: the write after the last
    embedding, which nothing overlaps, is an eighth of a window."""
    ones = [1] * 2000 + [1] * 2000
    assert [sum(w) for w in _cut(ones, 2000, 4000)] == [2000, 1000, 500, 250, 250]
    assert [sum(w) for w in _cut(ones, 2000, None)] == [2000, 2000]
    assert [sum(w) for w in _cut([1] * 2000, 2000, 2000)] == [2000]  # one window: left whole
    assert [sum(w) for w in _cut([1] * 2001, 2000, 2001)] == [2000, 1]
    # whole documents, in order, never split, whatever the total says
    for total in (0, 7, 4000, 10**6):
        cut = _cut([3, 700, 1, 2500, 40, 40, 900, 5], 800, total)
        assert [n for w in cut for n in w] == [3, 700, 1, 2500, 40, 40, 900, 5]
        assert all(sum(w) <= 800 or len(w) == 1 for w in cut)


def _corpus(tmp_path, n: int):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": f"doc-{i}", "text": f"Document {i}. " + "word " * 60})
                            + "\n" for i in range(n)))
    return path


@pytest.mark.slow
def test_windows_are_written_in_the_order_read_when_a_later_one_is_ready_first(
        prefect_harness, state, tmp_path, monkeypatch):
    """The second window's contexts come slowly, so the third is ready to embed first: the
    collection is still written window by window in corpus order."""
    from situate.core.settings import get_settings
    from situate.flows import ingest as ingest_module
    from situate.storage.milvus import MilvusStore
    from tests.helpers import ingest

    situate = ingest_module.situate_documents

    def slow_second(contextualizer, docs, *args, **kwargs):
        if docs[0].id == "doc-1":
            time.sleep(1.0)
        return situate(contextualizer, docs, *args, **kwargs)

    writes: list[str] = []
    write = MilvusStore.write

    def recorded(self, collection, documents, *args, **kwargs):
        writes.extend(d.doc.id for d in documents)
        return write(self, collection, documents, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "situate_documents", slow_second)
    monkeypatch.setattr(MilvusStore, "write", recorded)
    monkeypatch.setenv("SITUATE_WINDOW", "1")  # a window a document
    get_settings.cache_clear()
    summary = ingest(corpus=str(_corpus(tmp_path, 5)), collection="ordered", embedder="hash")
    assert summary.new == 5
    assert writes == [f"doc-{i}" for i in range(5)]


@pytest.mark.slow
@pytest.mark.timeout(240)  # a window held back for ever by the failed one fails here, not hangs
def test_a_window_failing_before_it_embeds_fails_the_run_without_holding_the_others(
        prefect_harness, state, tmp_path, monkeypatch):
    from situate.core.settings import get_settings
    from situate.flows import ingest as ingest_module
    from tests.helpers import ingest

    situate = ingest_module.situate_documents

    def failing_second(contextualizer, docs, *args, **kwargs):
        if docs[0].id == "doc-1":
            raise RuntimeError("contexts failed")
        return situate(contextualizer, docs, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "situate_documents", failing_second)
    monkeypatch.setenv("SITUATE_WINDOW", "1")
    get_settings.cache_clear()
    with pytest.raises(RuntimeError, match="contexts failed"):
        ingest(corpus=str(_corpus(tmp_path, 4)), collection="failing", embedder="hash")


@pytest.mark.slow
def test_an_ingest_cuts_its_last_windows_small(prefect_harness, state, tmp_path, monkeypatch):
    from situate.core.settings import get_settings
    from situate.storage.milvus import MilvusStore
    from tests.helpers import ingest

    windows_written: list[int] = []
    write = MilvusStore.write

    def recorded(self, collection, documents, *args, **kwargs):
        documents = list(documents)
        windows_written.append(len(documents))
        return write(self, collection, documents, *args, **kwargs)

    monkeypatch.setattr(MilvusStore, "write", recorded)
    monkeypatch.setenv("SITUATE_WINDOW", "8")  # documents of one chunk each
    get_settings.cache_clear()
    summary = ingest(corpus=str(_corpus(tmp_path, 16)), collection="tapered", embedder="hash")
    assert summary.new == 16
    assert windows_written == [8, 4, 2, 1, 1]
