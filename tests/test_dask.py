"""The ingest flow on Dask (prefect-dask's DaskTaskRunner on a LocalCluster of two worker processes,
reached by address as `--dask-address` would) writes exactly the rows of the default thread run."""

from __future__ import annotations

import os

import pytest

from tests.conftest import CODEBASE, SAMPLE_CORPUS
from tests.fakes.milvus_server import milvus_server, snapshot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _register_hash_embedder() -> int:
    """Runs in each Dask worker: the session fixture registered `hash` in this process only."""
    from situate.tasks.embedders.base import EMBEDDERS, EmbedderSpec
    from tests.fakes.hash_embedding import HashEmbedding

    EMBEDDERS.register("hash", EmbedderSpec("bow-64", "math", "", "", lambda model, key: HashEmbedding()))
    return os.getpid()


def _embedded_here() -> bool:
    """Whether this process (a worker) loaded the `hash` embedder: the pool a run's pool
    becomes when it is sent here."""
    from situate.tasks.embedders import base as embed

    return any(key.startswith("hash:") for pool in embed._PROCESS_POOL for key in pool._loaded)


def test_dask_ingest_matches_threads(prefect_harness, state, tmp_path):
    from distributed import Client, LocalCluster

    from situate.cli.main import main
    from tests.helpers import ingest

    common = {"corpus": str(CODEBASE / "codebase_chunks.json"), "collection": "dask_rows", "embedder": "hash",
              "context": "structural"}
    reference = ingest(**common)  # threads, Milvus Lite file
    with (milvus_server(tmp_path / "server") as uri,
          LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                       dashboard_address=None) as cluster,
          Client(cluster) as client):
        pids = client.run(_register_hash_embedder)
        assert len(set(pids.values()) - {os.getpid()}) == 2
        on_dask = ingest(**common, milvus_uri=uri, task_runner="dask",
                         dask_address=cluster.scheduler_address)
        # The embedding tasks really ran in the worker processes, not in this one.
        assert any(client.run(_embedded_here).values())
        rows = snapshot(uri, "dask_rows")
        # The CLI flags a user types for the same thing, on the small sample corpus.
        flags = ["--collection", "dask_cli", "--embedder", "hash", "--context", "structural"]
        assert main(["ingest", str(SAMPLE_CORPUS), *flags, "--milvus-uri", uri, "--task-runner", "dask",
                     "--dask-address", cluster.scheduler_address]) == 0
        cli_rows = snapshot(uri, "dask_cli")
    assert on_dask.rows == reference.rows == len(rows) > 0
    assert on_dask.chunks_written == reference.chunks_written
    assert rows == snapshot(state["milvus_uri"], "dask_rows")
    assert main(["ingest", str(SAMPLE_CORPUS), *flags]) == 0  # threads, Milvus Lite
    assert cli_rows == snapshot(state["milvus_uri"], "dask_cli") and cli_rows


def test_dask_refuses_a_store_its_workers_do_not_share():
    """Workers open the store again from its spec: a Milvus Lite file (one process at a time)
    and a store in this process's memory (another holds none of its rows) are refused before
    anything runs, and so is a URI with credentials, which a spec never carries."""
    from situate.core.errors import InputError
    from situate.pipeline.options import IngestOptions

    base = {"corpus": str(SAMPLE_CORPUS), "collection": "c", "embedder": "hash",
            "milvus_uri": "data/milvus.db"}
    with pytest.raises(InputError, match="'data/milvus.db' is a Milvus Lite file.*Milvus server"):
        IngestOptions.build(**base, task_runner="dask")
    with pytest.raises(InputError, match="needs --task-runner dask"):
        IngestOptions.build(**base, dask_address="tcp://127.0.0.1:8786")
    with pytest.raises(InputError, match="'memory://m' is held in this process's memory"):
        IngestOptions.build(**{**base, "milvus_uri": "memory://m"}, task_runner="dask")
    with pytest.raises(InputError, match="without user:password@") as refused:
        IngestOptions.build(**{**base, "milvus_uri": "http://root:pa55@127.0.0.1:19530"},
                            task_runner="dask")
    assert "pa55" not in str(refused.value)
    IngestOptions.build(**{**base, "milvus_uri": "http://127.0.0.1:19530"}, task_runner="dask")


def test_the_workers_of_a_cluster_the_run_starts_read_its_token_from_their_environment():
    """A worker opens the store from its spec, with the token of its own settings: the
    LocalCluster a run starts gets the run's token (`--milvus-token` is not in os.environ) in
    its workers' environment, and a cluster at an address gets nothing from the run."""
    from situate.core.settings import configured
    from situate.flows.ingest import make_task_runner
    from situate.pipeline.options import IngestOptions

    base = {"corpus": str(SAMPLE_CORPUS), "collection": "c", "embedder": "hash",
            "milvus_uri": "http://127.0.0.1:19530", "task_runner": "dask"}
    with configured(milvus_token="tok-for-the-workers"):
        runner = make_task_runner(IngestOptions.build(**base))
        assert runner.cluster_kwargs["env"] == {"SITUATE_MILVUS_TOKEN": "tok-for-the-workers"}
        at = make_task_runner(IngestOptions.build(**base, dask_address="tcp://127.0.0.1:8786"))
        assert "tok-for-the-workers" not in repr(vars(at))
    with configured(milvus_token=""):
        assert make_task_runner(IngestOptions.build(**base)).cluster_kwargs["env"] == {}
