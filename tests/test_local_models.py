"""Local embedding models run in a process of their own (tasks/embedders/local.py)."""

from __future__ import annotations

import multiprocessing
import os

import pytest


class PidModel:
    """Vectors that say which process computed them: [pid, len(text)]."""

    dim = 2

    def encode_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(os.getpid()), float(len(t))] for t in texts]

    def encode_queries(self, texts: list[str]) -> list[list[float]]:
        return [[float(os.getpid()), -float(len(t))] for t in texts]


def build_pid_model(model: str, api_key: str) -> object:
    return PidModel()


class EnvModel(PidModel):
    """Reports the TOKENIZERS_PARALLELISM its process has."""

    def __init__(self) -> None:
        self.info = {"tokenizers": os.environ.get("TOKENIZERS_PARALLELISM")}


def build_env_model(model: str, api_key: str) -> object:
    return EnvModel()


def build_broken_model(model: str, api_key: str) -> object:
    raise OSError(f"no weights for {model} in this package")


@pytest.fixture
def local_specs(monkeypatch, embedders):
    from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec

    EMBEDDERS.register("pid", EmbedderSpec("pid-1", "math", "", "", build_pid_model, local=True))
    EMBEDDERS.register("broken", EmbedderSpec("broken-1", "math", "", "", build_broken_model,
                                              local=True))
    EMBEDDERS.register("env", EmbedderSpec("env-1", "math", "", "", build_env_model, local=True))
    yield
    embedders.release()
    EMBEDDERS.unregister("pid")
    EMBEDDERS.unregister("broken")
    EMBEDDERS.unregister("env")


def test_local_model_embeds_in_another_process_and_exits_when_released(local_specs, embedders):

    emb = embedders.get("pid")
    assert emb.dim == 2
    texts = ["a", "bb", "ccc"] * 30  # two batches of the default size
    vectors = emb.embed_documents(texts)
    pids = {v[0] for v in vectors}
    assert len(pids) == 1 and pids != {float(os.getpid())}
    assert [v[1] for v in vectors] == [float(len(t)) for t in texts]
    assert emb.embed_queries(["dddd"])[0][1] == -4.0
    assert embedders.get("pid") is emb  # loaded once per pool

    pool = emb._function._pool
    workers, manager = list(pool._processes.values()), pool._executor_manager_thread
    embedders.release()
    # The executor's manager thread sends the workers their stop and reaps them (waitpid). Joining
    # a worker from here as well races it for the waitpid: the loser sees ECHILD and an exitcode
    # of None although the worker exited cleanly. So wait for the reaper, then read the codes.
    manager.join(timeout=30)
    assert not manager.is_alive()
    assert [p.exitcode for p in workers] == [0] * len(workers)
    again = embedders.get("pid")
    assert again is not emb and again.embed_documents(["x"])[0][0] not in pids


def test_killed_model_leaves_no_thread_for_the_exit_hook(local_specs, embedders):
    """A failed command releases its models with kill=True and exits. On Python 3.11 the exit
    hook of concurrent.futures wakes every live pool's manager thread through a pipe which that
    thread may be closing at the same moment (EBADF, a traceback after the command's last line).
    So killing must leave no manager thread and no open wake-up pipe behind."""
    import concurrent.futures.process as cfp

    emb = embedders.get("pid")
    assert emb.dim == 2
    pool = emb._function._pool
    workers, manager = list(pool._processes.values()), pool._executor_manager_thread
    wakeup = cfp._threads_wakeups[manager]
    embedders.release(kill=True)
    assert not manager.is_alive() and wakeup._closed  # the exit hook's wakeup() is a no-op
    assert all(p.exitcode is not None for p in workers)


def test_failed_load_is_one_provider_error(local_specs, embedders):
    from situate.core.errors import ProviderError

    emb = embedders.get("broken")  # returns at once: the load runs in the other process
    with pytest.raises(ProviderError, match=r"embedder broken:broken-1 could not be loaded: "
                                            r"OSError: no weights for broken-1"):
        emb.embed_documents(["x"])
    with pytest.raises(ProviderError, match="could not be loaded"):
        assert embedders.get("broken").dim


def _pid_in_daemon(queue) -> None:
    from situate.tasks.embedders.base import EMBEDDERS, Embedders, EmbedderSpec

    EMBEDDERS.register("pid", EmbedderSpec("pid-1", "math", "", "", build_pid_model, local=True))
    queue.put((os.getpid(), Embedders().get("pid").embed_documents(["x"])[0][0]))


def test_daemonic_process_embeds_in_process():
    """Dask's worker processes are daemonic and may not start children: the model stays inside."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_pid_in_daemon, args=(queue,), daemon=True)
    p.start()
    pid, computed_by = queue.get(timeout=120)
    p.join(timeout=30)
    assert computed_by == float(pid)


def test_queries_from_many_threads_are_shared_by_the_query_processes(local_specs, embedders):
    """`use_lanes(2)`: two processes of the model embed queries; each caller gets its own vector
    whichever embedded it; releasing the pool stops both."""
    from concurrent.futures import ThreadPoolExecutor

    emb = embedders.get("pid")
    emb.use_lanes(2)
    emb.use_lanes(1)  # at least: never fewer
    assert emb.lanes == 2
    emb.warm_lanes("warm")
    lanes = [p for lane in emb._lanes for p in lane._pool._processes.values()]
    managers = [lane._pool._executor_manager_thread for lane in emb._lanes]
    texts = ["x" * n for n in range(1, 200)]
    with ThreadPoolExecutor(12) as pool:
        vectors = list(pool.map(lambda t: emb.embed_queries([t])[0], texts))
    assert [v[1] for v in vectors] == [-float(len(t)) for t in texts]
    assert {v[0] for v in vectors} <= {float(p.pid) for p in lanes}
    embedders.release()
    for manager in managers:  # it reaps its worker (see the first test of this file)
        manager.join(timeout=30)
        assert not manager.is_alive()
    assert [p.exitcode for p in lanes] == [0, 0]


def test_the_model_process_tokenizes_on_its_threads_unless_the_user_said_otherwise(
        local_specs, embedders, monkeypatch):
    """The command keeps the tokenizers' thread pool off in its own process (it forks), and
    turns it on in the model's process, which never forks, unless the user's environment set
    TOKENIZERS_PARALLELISM: then the user's value holds in both."""
    import subprocess
    import sys

    from situate.tasks.embedders import local

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setattr(local, "MODEL_TOKENIZERS_PARALLELISM", "true")
    assert embedders.get("env")._function.info["tokenizers"] == "true"
    embedders.release()
    monkeypatch.setattr(local, "MODEL_TOKENIZERS_PARALLELISM", None)
    assert embedders.get("env")._function.info["tokenizers"] == "false"

    code = ("import os; from situate.flows import launch; launch.configure_process(); "
            "from situate.tasks.embedders import local; "
            "print(os.environ['TOKENIZERS_PARALLELISM'], local.MODEL_TOKENIZERS_PARALLELISM)")
    for given, printed in ((None, "false true"), ("false", "false None"), ("true", "true None")):
        env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
        if given is not None:
            env["TOKENIZERS_PARALLELISM"] = given
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.split("\n")[-2]
        assert out == printed, (given, out)
