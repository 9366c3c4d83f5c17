"""End to end: the ingest and evaluate flows on the sample corpus with the real MiniLM model, and
the CLI's handling of bad input (one line, non-zero exit, nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_CORPUS, SAMPLE_EVAL


def _artifact(key: str) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                                      sort=ArtifactSort.CREATED_DESC)
    assert found, f"no artifact {key}"
    return found[0]


# A name with an underscore, which an artifact key cannot hold (docs/how-to/schedules.md).
COLLECTION = "sample_eval"


@pytest.mark.slow
def test_ingest_twice_then_evaluate_with_minilm(prefect_harness, state):
    from situate.tasks.corpus.load import load_corpus
    from tests.helpers import evaluate, ingest, open_store

    corpus = load_corpus(SAMPLE_CORPUS)
    first = ingest(corpus=str(SAMPLE_CORPUS), collection=COLLECTION, context="structural")
    assert first.new == len(corpus.documents)
    assert first.chunks_written == first.rows == corpus.chunk_count
    assert first.contexts_generated == corpus.chunk_count

    again = ingest(corpus=str(SAMPLE_CORPUS), collection=COLLECTION, context="structural")
    assert again.unchanged == len(corpus.documents)
    assert again.chunks_written == 0
    assert again.rows == corpus.chunk_count

    store = open_store(state["milvus_uri"])
    rows = list(store.rows(COLLECTION))
    assert sorted(r["id"] for r in rows) == sorted(c.id for d in corpus.documents for c in d.chunks)
    queue_rows = [r for r in rows if r["doc_id"] == "harbor/queue.py"]
    assert any("Inside: class JobQueue" in r["context"] for r in queue_rows)

    out = Path(state["results_dir"]) / "r.json"
    result = evaluate(eval_set=str(SAMPLE_EVAL), collection=COLLECTION, json_out=str(out))
    saved = json.loads(out.read_text())
    assert saved["queries"] == 21 and set(saved["pass_at_k"]) == {"dense", "bm25", "hybrid"}
    assert saved["pass_at_k"] == result.only().pass_at_k
    # Real retrieval on a tiny corpus: every golden chunk is within the first 10 for BM25/hybrid.
    assert saved["pass_at_k"]["hybrid"]["10"] >= 90.0
    assert saved["pass_at_k"]["bm25"]["10"] >= 90.0

    table = _artifact("pass-at-k-sample-eval")
    assert table.type == "table" and "hybrid" in str(table.data)
    assert _artifact("ingest-summary-sample-eval").type == "table"
    report = _artifact("evaluation-report-sample-eval")
    assert "First evaluation" in report.data
    _the_artifacts_are_named_as_the_docs_say()

    evaluate(eval_set=str(SAMPLE_EVAL), collection=COLLECTION)
    assert "change since the previous run" in _artifact("evaluation-report-sample-eval").data


def _the_artifacts_are_named_as_the_docs_say() -> None:
    """Every artifact key docs/how-to/schedules.md names, read as it says (`<collection>` in
    lowercase, other characters dashes, as its `mine_eval` example), is one this run made."""
    import re

    from prefect.client.orchestration import get_client

    page = " ".join((ROOT / "docs" / "how-to" / "schedules.md").read_text().split())
    named = re.findall(r"`([a-z-]+)-<collection>`", page)
    assert len(named) >= 4, named
    example = re.search(r"`([a-z_]+)` becomes `([a-z-]+)`", page)
    assert example and f"pass-at-k-{example.group(1).replace('_', '-')}" == example.group(2)
    with get_client(sync_client=True) as client:
        made = {a.key for a in client.read_artifacts()}
    key = COLLECTION.lower().replace("_", "-")
    assert {f"{prefix}-{key}" for prefix in named} <= made, sorted(made)


def test_ingest_prunes_and_replaces_changed_documents(prefect_harness, state, tmp_path):
    from tests.helpers import ingest, open_store

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "keep.md").write_text("# Keep\n\nThis stays the same.\n")
    (corpus / "edit.md").write_text("\n\n".join(f"Paragraph {i} " + "x" * 150 for i in range(8)))
    (corpus / "gone.md").write_text("# Gone\n\nSoon deleted.\n")
    first = ingest(corpus=str(corpus), collection="inc", embedder="hash", chunk_size=400)
    assert first.new == 3
    (corpus / "edit.md").write_text("A much shorter document now.")
    (corpus / "gone.md").unlink()
    second = ingest(corpus=str(corpus), collection="inc", embedder="hash", chunk_size=400,
                         prune=True)
    assert (second.unchanged, second.changed, second.deleted_documents) == (1, 1, 1)
    rows = list(open_store(state["milvus_uri"]).rows("inc"))
    assert sorted((r["doc_id"], r["chunk_index"]) for r in rows) == [("edit.md", 0), ("keep.md", 0)]
    assert second.rows == 2


def test_a_runs_cache_dir_keeps_its_manifest_and_lexical_index_together(prefect_harness, state,
                                                                       tmp_path):
    """`--cache-dir` other than SITUATE_CACHE_DIR: the run's store keeps the lexical index in the
    run's cache dir, beside the manifest the run writes there, so the ingest's end finds its
    manifest and the next run loads the index instead of rebuilding it from the rows."""
    from situate.storage.milvus import MilvusStore
    from tests.helpers import ingest

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Alpha\n\nThe walrus hauls out on sea ice.\n")
    elsewhere = tmp_path / "elsewhere"
    ingest(corpus=str(corpus), collection="cd", embedder="hash", cache_dir=str(elsewhere))
    assert list((elsewhere / "lexical").glob("*.npz"))
    assert not (Path(state["cache_dir"]) / "lexical").exists()
    store = MilvusStore(state["milvus_uri"], cache_dir=str(elsewhere))
    try:
        assert store.leg_search("cd", "bm25", "walrus", None, 1)[0].doc_id == "a.md"
        assert store._lexical_leg("cd").last == "loaded"
    finally:
        store.close()


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`situate ARGS` in a fresh process, state under `cwd`, no Anthropic key unless `env` sets one."""
    base = {**os.environ, "SITUATE_MILVUS_URI": str(cwd / "m.db"),
            "SITUATE_CACHE_DIR": str(cwd / "cache"), "SITUATE_RESULTS_DIR": str(cwd / "results")}
    base.pop("ANTHROPIC_API_KEY", None)
    env = {**base, **(env or {})}
    return subprocess.run([sys.executable, "-m", "situate.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "{tmp}/missing.json", "--collection", "c"], "corpus not found"),
        (["ingest", "{tmp}/bad.jsonl", "--collection", "c"], "bad JSON at line 2"),
        (["ingest", "{tmp}/empty.json", "--collection", "c"], "the file is empty"),
        (["ingest", "{tmp}/notes.pdf", "--collection", "c"], "notes.pdf: not a PDF"),
        (["ingest", "{tmp}/notes.xyz", "--collection", "c"], "unknown corpus form '.xyz'"),
        (["ingest", "{tmp}/old.doc", "--collection", "c"], "legacy Word .doc: save it as .docx"),
        (["ingest", "{tmp}/bomb.docx", "--collection", "c"], "zip bomb"),
        (["ingest", str(SAMPLE_CORPUS), "--collection", "c", "--context", "gpt"],
         "unknown context provider 'gpt'"),
        (["ingest", str(SAMPLE_CORPUS), "--collection", "c", "--embedder", "nope"], "unknown embedder"),
        (["ingest", str(SAMPLE_CORPUS), "--collection", "bad-name"], "invalid collection name"),
        (["evaluate", "{tmp}/bad.jsonl", "--collection", "c"], "has no 'query'"),
        (["evaluate", str(SAMPLE_EVAL), "--collection", "c", "--k", "x"], "--k must be"),
        (["evaluate", str(SAMPLE_EVAL), "--collection", "c", "--modes", "sparse"], "unknown retrieval mode"),
        # Every other row of the README's bad-input table that needs no provider.
        (["ingest", "{tmp}/notext.jsonl", "--collection", "c"], "line 1 (a) has no 'text' string"),
        (["ingest", "{tmp}/dup.jsonl", "--collection", "c"], "line 2: duplicate id 'a' (first on line 1)"),
        (["ingest", "{tmp}/shape.json", "--collection", "c"], "expected a JSON list of documents"),
        (["ingest", "{tmp}/nothing", "--collection", "c"], "no documents, text, Markdown or source files"),
        (["evaluate", "{tmp}/missing.jsonl", "--collection", "c"], "missing.jsonl"),
        (["evaluate", str(SAMPLE_EVAL), "--collection", "c", "--modes", "rerank"],
         "reranker 'cohere' needs an API key"),
        (["evaluate", str(SAMPLE_EVAL), "--collection", "c"], "collection 'c' not found"),
        (["search", "lease", "--collection", "c"], "collection 'c' not found"),
        (["search", "  ", "--collection", "c"], "empty query"),
        (["ingest", str(SAMPLE_CORPUS), "--collection", "c", "--rebuild-at", "-1"],
         "--rebuild-at -1.0: Input should be greater than or equal to 0"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    from tests.helpers import write_bad_inputs

    write_bad_inputs(tmp_path, with_zip_bomb=any("bomb" in a for a in args))
    r = _cli(*[a.format(tmp=tmp_path) for a in args], cwd=tmp_path, env={"COHERE_API_KEY": ""})
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert message in lines[0] and lines[0].startswith("situate ")
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("SITUATE_REBUILD_AT", "-2", "SITUATE_REBUILD_AT '-2': Input should be greater than or equal "
                                 "to 0; fix or unset it"),
    ("SITUATE_CONCURRENCY", "zero", "SITUATE_CONCURRENCY 'zero': Input should be a valid integer"),
    ("SITUATE_MILVUS_TOKEN", "", ""),  # a secret's value, even empty, is accepted
])
def test_a_bad_setting_is_one_line_naming_the_variable(tmp_path, variable, value, message):
    r = _cli("ingest", str(SAMPLE_CORPUS), "--collection", "c", "--dry-run", cwd=tmp_path,
             env={variable: value})
    assert "Traceback" not in r.stderr + r.stdout
    if not message:
        assert r.returncode == 0, r.stderr
        return
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--k", "0,x"], "--k must be"),
    (["--collection", "a,bad-name"], "invalid collection name 'bad-name'"),
    (["--collection", "a,a"], "names 'a' twice"),
    (["--modes", "sparse"], "unknown retrieval mode"),
])
def test_evaluate_refuses_bad_options_before_importing_prefect(tmp_path, args, message):
    """Prefect's import takes seconds: a bad option is refused before it (what the CLI checks
    options with imports no Prefect)."""
    argv = ["evaluate", str(SAMPLE_EVAL), "--collection", "c", *args]
    code = ("import sys\nfrom situate.cli.main import main\n"
            f"rc = main({argv!r})\nprint(rc, 'prefect' in sys.modules)")
    env = {**os.environ, "SITUATE_MILVUS_URI": str(tmp_path / "m.db")}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.stdout.split() == ["2", "False"], r.stdout + r.stderr
    assert message in r.stderr


@pytest.mark.parametrize("flow", ["situate.flows.ingest", "situate.flows.evaluate"])
def test_a_flow_imports_milvus_client_before_any_run_the_command_line_does_not(flow):
    """pymilvus configures logging when first imported, flushing and closing every handler under
    the logging lock; during a flow run, Prefect's API log handler's flush waits for its log
    worker, which waits for that lock. A `situate evaluate` against a running Prefect server hung
    so for good: its store, opened in a background thread as the run began, imported pymilvus
    first. The flows import it when they are imported, before any run; the command line's own
    modules do not (`situate --help` stays quick)."""
    code = (f"import sys\nimport situate.cli.main\nbefore = 'pymilvus' in sys.modules\n"
            f"import {flow}\nprint(before, 'pymilvus' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.split() == ["False", "True"], r.stdout + r.stderr


@pytest.mark.slow
def test_launch_evaluate_reads_the_evaluation_set_once(prefect_harness, state, monkeypatch):
    """The command checks the evaluation set before the flow run starts; the flow run takes that
    reading instead of reading the file again."""
    from situate.flows.launch import launch_evaluate
    from situate.pipeline.options import EvaluateOptions
    from situate.tasks.retrieval import metrics
    from situate.tasks.retrieval.metrics import load_eval_set
    from tests.helpers import ingest

    ingest(corpus=str(SAMPLE_CORPUS), collection="once", context="none", embedder="hash")
    reads: list[str] = []
    read = metrics.iter_jsonl
    monkeypatch.setattr(metrics, "iter_jsonl", lambda path: reads.append(str(path)) or read(path))
    result = launch_evaluate(EvaluateOptions.build(eval_set=str(SAMPLE_EVAL), collection="once",
                                                   modes="bm25"))
    assert reads == [str(SAMPLE_EVAL)]
    assert result.queries == len(load_eval_set(SAMPLE_EVAL)) == len(result.only().per_query)


@pytest.mark.slow
def test_cli_failure_inside_a_flow_is_one_clean_line_and_writes_nothing(tmp_path):
    from situate.storage.milvus import MilvusStore

    r = _cli("evaluate", str(SAMPLE_EVAL), "--collection", "never_ingested", cwd=tmp_path)
    assert r.returncode == 2
    assert "collection 'never_ingested' not found" in r.stderr
    assert "Traceback" not in r.stderr and "| ERROR" not in r.stderr
    assert not (tmp_path / "m.db").exists()  # reading never creates a Milvus Lite file
    s = MilvusStore(str(tmp_path / "m.db"))
    assert not s.exists("never_ingested")
    s.close()
