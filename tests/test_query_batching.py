"""Concurrent queries share the model (tasks/embedders/batching.py, local.py, spans.py): the
batcher coalesces the requests that wait, gives each caller its own vector, tells every waiter
of a failing batch, and wakes its waiters when closed; a model process has its next batch sent
while it embeds one; a batch changes no query's vector; a model process leaves when the process
that started it dies."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from situate.core.errors import ProviderError
from situate.tasks.embedders.batching import QueryBatcher

# How long a test waits for something that should happen at once before it fails (never a
# measure of speed: a loaded machine may take its time).
PATIENCE = 60


class GatedLane:
    """A lane whose calls wait for `gate` and are recorded; a text "bad" fails its batch."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> list[list[str]]:
        self.calls.append(list(texts))
        self.entered.release()
        assert self.gate.wait(PATIENCE)
        if "bad" in texts:
            raise OSError("the model failed on this batch")
        return [[f"vector of {t}"] for t in texts]


def _waiting(batcher: QueryBatcher, n: int) -> None:
    """Until `n` requests wait in `batcher` (requests are queued by other threads)."""
    deadline = time.monotonic() + PATIENCE
    while len(batcher._pending) < n:
        assert time.monotonic() < deadline, "the requests never arrived"
        time.sleep(0.01)


class OneAtATime:
    """A model process as the batcher sees it (`local.ModelProcess`): calls run one at a time, in
    the order they were made; the first waits for `gate`. Records each call as it is made."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.made: list[list[str]] = []
        self._turn = threading.Lock()

    def wait_loaded(self) -> None:
        pass

    def encode_queries(self, texts: list[str]) -> list[list[str]]:
        self.made.append(list(texts))
        first = len(self.made) == 1
        with self._turn:
            if first:
                assert self.gate.wait(PATIENCE)
            return [[f"vector of {t}"] for t in texts]


def test_a_model_process_has_its_next_batch_sent_while_it_embeds_one():
    """`base._add_lane`: each model process is a lane taking CALLS_PER_PROCESS batches at once,
    so the queries that arrive while it embeds a batch are already sent to it (it takes them when
    it is done) instead of waiting in this process for the batch's answer."""
    from situate.tasks.embedders.base import CALLS_PER_PROCESS, _add_lane

    assert CALLS_PER_PROCESS == 2
    process = OneAtATime()
    batcher = QueryBatcher()
    _add_lane(batcher, process)  # type: ignore[arg-type]
    assert batcher.lanes == 1 and len(batcher._threads) == 2
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(batcher.embed, ["q0"])
        deadline = time.monotonic() + PATIENCE
        while not process.made:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        second = pool.submit(batcher.embed, ["q1"])
        while len(process.made) < 2:  # sent while the first is still being embedded
            assert time.monotonic() < deadline, "the next batch was not sent"
            time.sleep(0.01)
        assert not first.done()
        process.gate.set()
        assert first.result(PATIENCE) == [["vector of q0"]]
        assert second.result(PATIENCE) == [["vector of q1"]]
    assert process.made == [["q0"], ["q1"]]
    batcher.close()


def test_requests_that_wait_for_a_busy_lane_go_through_it_as_one_batch():
    lane = GatedLane()
    batcher = QueryBatcher([lane])
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(batcher.embed, ["q0"])
        assert lane.entered.acquire(timeout=PATIENCE)  # the lane is busy with q0
        rest = [pool.submit(batcher.embed, [f"q{i}"]) for i in range(1, 6)]
        _waiting(batcher, 5)
        lane.gate.set()
        assert first.result(PATIENCE) == [["vector of q0"]]
        # Each caller gets its own vector, although five were embedded in one call.
        assert [f.result(PATIENCE) for f in rest] == [[[f"vector of q{i}"]] for i in range(1, 6)]
    assert lane.calls[0] == ["q0"] and sorted(lane.calls[1]) == [f"q{i}" for i in range(1, 6)]
    assert list(batcher.batches) == [1, 5]
    batcher.close()


def test_a_lone_request_goes_through_at_once_and_a_batch_holds_at_most_max_batch():
    lane = GatedLane()
    lane.gate.set()
    batcher = QueryBatcher([lane], max_batch=3)
    assert batcher.embed(["alone"]) == [["vector of alone"]]
    texts = [f"t{i}" for i in range(8)]  # one caller's many texts, in batches of 3 at most
    assert batcher.embed(texts) == [[f"vector of {t}"] for t in texts]
    assert max(len(c) for c in lane.calls) <= 3
    assert [t for c in lane.calls[1:] for t in c] == texts
    batcher.close()


def test_linger_holds_a_batch_open_until_it_is_full():
    lane = GatedLane()
    lane.gate.set()
    # Lingering up to a minute, but the batch is full at two: nothing waits for the minute.
    batcher = QueryBatcher([lane], max_batch=2, linger=PATIENCE)
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(batcher.embed, ["a"])
        _waiting(batcher, 1)
        b = pool.submit(batcher.embed, ["b"])
        assert (a.result(PATIENCE), b.result(PATIENCE)) == ([["vector of a"]], [["vector of b"]])
    assert lane.calls == [["a", "b"]]
    batcher.close()


def test_an_error_reaches_every_waiter_of_the_failing_batch_and_no_one_else():
    lane = GatedLane()
    batcher = QueryBatcher([lane])
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(batcher.embed, ["fine"])
        assert lane.entered.acquire(timeout=PATIENCE)
        failing = [pool.submit(batcher.embed, [t]) for t in ("x", "bad", "y")]
        _waiting(batcher, 3)
        lane.gate.set()
        assert first.result(PATIENCE) == [["vector of fine"]]
        for f in failing:
            with pytest.raises(OSError, match="the model failed on this batch"):
                f.result(PATIENCE)
    assert batcher.embed(["after"]) == [["vector of after"]]  # the lane goes on
    batcher.close()


def test_closing_wakes_every_waiter_with_a_clear_error():
    lane = GatedLane()
    batcher = QueryBatcher([lane])
    with ThreadPoolExecutor(4) as pool:
        busy = pool.submit(batcher.embed, ["in the model"])
        assert lane.entered.acquire(timeout=PATIENCE)
        waiting = [pool.submit(batcher.embed, [f"w{i}"]) for i in range(3)]
        _waiting(batcher, 3)
        batcher.close()
        for f in waiting:
            with pytest.raises(ProviderError, match="closed before this query was embedded"):
                f.result(PATIENCE)
        lane.gate.set()
        assert busy.result(PATIENCE) == [["vector of in the model"]]  # its batch was running
    with pytest.raises(ProviderError, match="closed"):
        batcher.embed(["later"])


def test_a_lane_takes_nothing_before_it_is_ready():
    ready = threading.Event()
    slow, quick = GatedLane(), GatedLane()
    slow.gate.set()
    quick.gate.set()
    batcher = QueryBatcher()
    batcher.add_lane(slow, ready=lambda: ready.wait(PATIENCE))
    batcher.add_lane(quick)
    assert [batcher.embed([f"q{i}"]) for i in range(5)] == [[[f"vector of q{i}"]] for i in range(5)]
    assert slow.calls == [] and len(quick.calls) == 5
    ready.set()
    batcher.close()


def test_a_lane_that_cannot_start_leaves_the_others_serving(caplog):
    """A lane of two calls at once whose process cannot load is said once in the log."""
    def broken() -> None:
        raise OSError("no weights")

    lane = GatedLane()
    lane.gate.set()
    batcher = QueryBatcher()
    with caplog.at_level(logging.WARNING, logger="situate.embed"):
        batcher.add_lane(GatedLane(), ready=broken, calls=2)
        batcher.add_lane(lane)
        assert batcher.embed(["q"]) == [["vector of q"]]
        for thread in batcher._threads[:2]:
            thread.join(PATIENCE)
    said = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert said == ["a queries lane could not start: OSError: no weights"]
    batcher.close()


def test_many_threads_each_get_their_own_vectors():
    lanes = [GatedLane(), GatedLane()]
    for lane in lanes:
        lane.gate.set()
    batcher = QueryBatcher(lanes)
    texts = [f"text {i}" for i in range(200)]
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda t: batcher.embed([t, t + "!"]), texts))
    assert got == [[[f"vector of {t}"], [f"vector of {t}!"]] for t in texts]
    assert sum(batcher.batches) == 400
    batcher.close()


# --- the model process's side ---------------------------------------------------------------

class Recorder:
    """A model that says, per call, which texts it was given (its query vectors: [length])."""

    batch_invariant = False

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode_queries(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[float(len(t))] for t in texts]


def test_a_model_that_cannot_batch_exactly_embeds_each_query_alone(monkeypatch):
    from situate.tasks.embedders import local

    model = Recorder()
    monkeypatch.setattr(local, "_MODEL", model)
    assert local._worker_queries(["a", "bb", "ccc"]).tolist() == [[1.0], [2.0], [3.0]]
    assert model.calls == [["a"], ["bb"], ["ccc"]]
    model.batch_invariant = True
    local._worker_queries(["a", "bb"])
    assert model.calls[-1] == ["a", "bb"]


def test_span_pooled_queries_of_equal_length_share_a_call_and_none_is_padded():
    from situate.tasks.embedders.spans import SpanPooled

    class Tokenizer:  # a word piece per character
        def __call__(self, texts, **kw):
            if isinstance(texts, str):
                return {"input_ids": list(texts), "offset_mapping": [(i, i + 1) for i in range(len(texts))]}
            return {"input_ids": [[0, *t, 0] for t in texts]}

    class Model:
        tokenizer = Tokenizer()
        max_seq_length = 64

    inner = Recorder()
    pooled = SpanPooled(inner, Model(), query_prompt="q: ")
    out = pooled.encode_queries(["ab", "cd", "xyz", "ef"])
    assert out.tolist() == [[2.0], [2.0], [3.0], [2.0]]
    assert sorted(map(sorted, inner.calls)) == [["ab", "cd", "ef"], ["xyz"]]


# --- a model process outlives no parent -------------------------------------------------------

PARENT = """
import sys, time
sys.path[:0] = {path!r}
from situate.tasks.embedders.base import EMBEDDERS, Embedders, EmbedderSpec
from tests.test_local_models import build_pid_model
EMBEDDERS.register("pid", EmbedderSpec("pid-1", "math", "", "", build_pid_model, local=True))
embedder = Embedders().get("pid")
embedder.use_lanes(2)
embedder.warm_lanes("x")
pids = [p for lane in embedder._lanes for p in lane._pool._processes]
print(" ".join(map(str, pids)), flush=True)
time.sleep(600)
"""


def test_model_processes_leave_when_their_parent_is_killed(tmp_path):
    """SIGKILL gives a parent no chance to stop its children: they notice it gone and leave."""
    import psutil

    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(path=sys.path)],
                              stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        line = parent.stdout.readline()
        children = [int(p) for p in line.split()]
        assert len(children) == 2, line
        assert all(psutil.Process(c).ppid() == parent.pid for c in children)
    finally:
        os.kill(parent.pid, signal.SIGKILL)  # this process only: not its children
        parent.wait(PATIENCE)
    deadline = time.monotonic() + PATIENCE
    while alive := [c for c in children if _running(c)]:
        assert time.monotonic() < deadline, f"model processes {alive} outlived their parent"
        time.sleep(0.1)


def test_a_model_process_whose_parent_died_while_it_started_leaves():
    """A worker told its parent's pid leaves once its parent is another process: one whose
    parent died before its initializer ran has init for a parent already, and must not take
    init for the parent it should outlive."""
    code = ("import time; from situate.tasks.embedders.local import _worker_init; "
            "_worker_init(None, parent=1 << 30); time.sleep(60)")  # a pid no process has
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=PATIENCE)
    assert done.returncode == 0 and time.monotonic() - started < 30, done.stderr


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_batch_changes_no_query_vector_bit_for_bit(tmp_path):
    """A sentence-transformers model's queries, one intra-op thread (as the model process embeds
    them): embedded together, in any company, each is bitwise the vector it gets alone, a query
    longer than the model's length included."""
    import numpy as np
    import torch

    from situate.tasks.embedders.sentence import build_sentence_embedding
    from tests.fakes.tiny_models import build_embedder

    path = build_embedder(tmp_path / "tiny", hidden=32, prompts={"query": "query: "})
    model = build_sentence_embedding(str(path), "")
    queries = ["job", "delete a job", "how is a job deleted", "retry the job", "queue", "x" * 300,
               "where are tasks retried after a failure", "abc", "jobs", "a b c d e f g h"]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = np.stack([model.encode_queries([q])[0] for q in queries])
        assert np.array_equal(model.encode_queries(queries), alone)
        order = np.random.default_rng(0).permutation(len(queries))
        shuffled = model.encode_queries([queries[i] for i in order])
        assert np.array_equal(shuffled, alone[order])
        assert np.array_equal(model.encode_queries(queries[3:7]), alone[3:7])
    finally:
        torch.set_num_threads(before)
