"""Against a real Milvus server over gRPC (`milvus-lite server`), the client path of Milvus
Standalone, Distributed and Zilliz Cloud: the ChunkStore contract, and ingest and evaluate compared
with the default Milvus Lite run."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SAMPLE_CORPUS, SAMPLE_EVAL
from tests.fakes.milvus_server import milvus_server, snapshot
from tests.store_contract import MilvusContract

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def server_uri(tmp_path_factory):
    root = tmp_path_factory.mktemp("milvus-server")
    with milvus_server(root / "data") as uri:
        yield uri


class TestMilvusServer(MilvusContract):
    @pytest.fixture
    def store(self, server_uri):
        from situate.storage.milvus import MilvusStore

        s = MilvusStore(server_uri)

        def drop_contract_collections() -> None:
            for name in s.client.list_collections():
                if name.startswith("contract_"):
                    s.drop(name)

        drop_contract_collections()
        yield s
        drop_contract_collections()
        s.close()


def test_ingest_and_evaluate_on_server_match_lite(prefect_harness, state, server_uri, tmp_path):
    from tests.helpers import evaluate, ingest

    common = {"corpus": str(SAMPLE_CORPUS), "collection": "server_mode", "embedder": "hash",
              "context": "structural"}
    lite = ingest(**common)
    served = ingest(**common, milvus_uri=server_uri)
    assert served.rows == lite.rows > 0
    assert served.chunks_written == lite.chunks_written == lite.rows
    rows = snapshot(server_uri, "server_mode")
    assert rows == snapshot(state["milvus_uri"], "server_mode")
    assert len({r[0] for r in rows}) == len(rows)

    # A second run against the server reads the stored rows back (query iterator) and skips all.
    again = ingest(**common, milvus_uri=server_uri)
    assert (again.unchanged, again.new, again.changed, again.chunks_written) == (
        lite.documents, 0, 0, 0)

    lite_eval = evaluate(eval_set=str(SAMPLE_EVAL), collection="server_mode", modes="bm25,hybrid")
    served_eval = evaluate(eval_set=str(SAMPLE_EVAL), collection="server_mode",
                                modes="bm25,hybrid", milvus_uri=server_uri)
    assert served_eval.queries == lite_eval.queries == 21
    assert served_eval.only().pass_at_k == lite_eval.only().pass_at_k
    assert served_eval.only().pass_at_k["hybrid"]["20"] > 0


def test_cli_with_server_uri_and_token(prefect_harness, state, server_uri, tmp_path, monkeypatch, capsys):
    """The CLI flags a server user types, token included (it travels by environment, not parameter)."""
    from situate.cli.main import main

    monkeypatch.setenv("SITUATE_MILVUS_TOKEN", "")  # restored after main() sets it
    args = ["--collection", "cli_server", "--milvus-uri", server_uri, "--milvus-token", "root:Milvus"]
    assert main(["ingest", str(SAMPLE_CORPUS), *args, "--embedder", "hash",
                 "--context", "structural"]) == 0
    out = tmp_path / "eval.json"
    assert main(["evaluate", str(SAMPLE_EVAL), *args, "--modes", "bm25", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["collection"] == "cli_server" and result["queries"] == 21
    assert snapshot(server_uri, "cli_server", "root:Milvus")
    assert "ingested" in capsys.readouterr().out
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=["situate", "collection:cli_server"])))
    assert sorted(r.state_type.value for r in runs) == ["COMPLETED", "COMPLETED"]
    assert sorted(t for r in runs for t in r.tags if t in ("ingest", "evaluate")) == ["evaluate", "ingest"]
