"""The options models are the one source of every command's flags, help, flow parameters and the
configuration table of the docs (docs/reference/configuration.md): a field missing from any of
them, or a provider missing from the help's choices, fails here."""

from __future__ import annotations

import re

import pytest

from situate.cli.commands import COMMANDS as DECLARED
from situate.cli.configuration import models
from tests.conftest import ROOT, SAMPLE_CORPUS, SAMPLE_EVAL

COMMANDS = tuple(DECLARED)  # every command (test_help checks the parser has exactly these)


def _subparser(command: str):
    from situate.cli.main import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[command]


def _help(command: str) -> str:
    return " ".join(_subparser(command).format_help().split())  # lines unwrapped


@pytest.mark.parametrize("command", COMMANDS)
def test_every_field_is_a_flag_or_argument_in_the_help(command):
    """Each field is an argument the command's parser takes, and its help lists it (above the
    examples, which may name a flag the parser lacks)."""
    from situate.pipeline.options import fields

    sub = _subparser(command)
    taken = {s for a in sub._actions for s in a.option_strings} | \
        {a.dest for a in sub._actions if not a.option_strings}
    text = _help(command).split(" examples: ")[0]
    from situate.api.config import SET_BY_FACE

    for name, _, flag, _ in fields(models()[command]):
        if flag is None and name in SET_BY_FACE:  # the Retriever's, set by the face that opens it
            continue
        assert flag is not None, f"{command}: field {name} has no Flag"
        shown = flag.names[0] if flag.names else name
        assert shown in taken, (command, shown)
        assert re.search(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", text), (command, shown)


def test_every_registered_provider_is_among_the_helps_choices():
    from situate.tasks.contexts.base import CONTEXTUALIZERS
    from situate.tasks.embedders.base import EMBEDDERS
    from situate.tasks.rerankers.base import RERANKERS

    ingest, evaluate = _help("ingest"), _help("evaluate")
    for name in CONTEXTUALIZERS.names():
        assert re.search(rf"--context CONTEXT [^[]*\b{re.escape(name)}\b", ingest), name
    for name in EMBEDDERS.names():
        assert re.search(rf"--embedder EMBEDDER [^[]*\b{re.escape(name)}\b", ingest), name
    for name in RERANKERS.names():
        assert re.search(rf"--rerank RERANKER [^[]*\b{re.escape(name)}\b", evaluate), name


@pytest.mark.parametrize("command", ["ingest", "evaluate"])
def test_the_flows_one_parameter_is_the_options_model_with_every_field(command):
    """What a deployment's run form is built from: Prefect's parameter schema of the flow."""
    from prefect.utilities.callables import parameter_schema

    flow = {"ingest": "situate.flows.ingest:ingest_flow",
            "evaluate": "situate.flows.evaluate:evaluate_flow"}[command]
    module, _, attr = flow.partition(":")
    fn = getattr(__import__(module, fromlist=[attr]), attr).fn
    schema = parameter_schema(fn).model_dump_for_openapi()
    assert list(schema["properties"]) == ["options"]
    model = models()[command]
    properties = schema["definitions"][model.__name__]["properties"]
    assert list(properties) == list(model.model_fields)
    assert all(properties[name].get("description") for name in properties)


def test_the_docs_configuration_table_is_the_options_table():
    from situate.cli.configuration import options_table

    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    start, end = "<!-- generated: options-table -->", "<!-- end of generated: options-table -->"
    assert start in page and end in page, "docs/reference/configuration.md has no options table"
    table = page.split(start)[1].split(end)[0].strip()
    assert table == options_table(), ("the configuration table of the docs differs from the "
                                      "options: run `make docs-generate`")


def test_a_bad_value_names_its_flag_in_one_line():
    from situate.core.errors import InputError
    from situate.pipeline.options import EvaluateOptions, IngestOptions

    with pytest.raises(InputError, match=r"^--concurrency 0: Input should be greater than or equal to 1$"):
        IngestOptions.build(corpus=str(SAMPLE_CORPUS), collection="c", concurrency=0)
    with pytest.raises(InputError, match=r"^--k must be comma-separated positive integers, got 'x'$"):
        EvaluateOptions.build(eval_set=str(SAMPLE_EVAL), collection="c", k="x")


def test_fields_left_empty_are_filled_from_the_settings_once(monkeypatch):
    from situate.core.settings import get_settings
    from situate.pipeline.options import IngestOptions

    monkeypatch.setenv("SITUATE_CHUNK_SIZE", "321")
    monkeypatch.setenv("SITUATE_MILVUS_URI", "http://127.0.0.1:1")
    get_settings.cache_clear()
    try:
        opts = IngestOptions.build(corpus=str(SAMPLE_CORPUS), collection="c", embedder="hash",
                                   chunk_overlap=7)
        assert (opts.chunk_size, opts.chunk_overlap, opts.milvus_uri) == (321, 7, "http://127.0.0.1:1")
        assert opts.context == "structural"  # no Anthropic key in the tests' environment
        # what a deployment stores: only what was given
        assert opts.given() == {"corpus": str(SAMPLE_CORPUS), "collection": "c",
                                "embedder": "hash", "chunk_overlap": 7}
    finally:
        get_settings.cache_clear()


def test_workers_is_a_number_of_model_processes_said_in_one_line(monkeypatch):
    from situate.api.retriever import Retriever
    from situate.cli.options import ApiOptions, McpOptions
    from situate.core.errors import InputError
    from situate.core.settings import get_settings

    assert ApiOptions.build(collection="c", workers=3).workers == 3
    for value, said in ((0, "greater than or equal to 1"), (33, "less than or equal to 32"),
                        ("two", "a valid integer")):
        for options in (ApiOptions, McpOptions):
            with pytest.raises(InputError, match=rf"^--workers {value!r}: Input should be {said}"):
                options.build(collection="c", workers=value)
    for value in (0, 33, "2", True):
        with pytest.raises(InputError, match=r"^workers=.* give a whole number from 1 to 32$"):
            Retriever("c", "data/nowhere.db", workers=value)
    monkeypatch.setenv("SITUATE_WORKERS", "4")
    get_settings.cache_clear()
    try:
        assert ApiOptions.build(collection="c").workers == 4
        monkeypatch.setenv("SITUATE_WORKERS", "many")
        get_settings.cache_clear()
        with pytest.raises(InputError, match=r"^SITUATE_WORKERS 'many': Input should be a valid "
                                             r"integer.*; fix or unset it"):
            ApiOptions.build(collection="c")
    finally:
        get_settings.cache_clear()


def test_a_bad_workers_flag_is_one_line_and_exit_2():
    import subprocess
    import sys
    from pathlib import Path

    situate = str(Path(sys.executable).with_name("situate"))
    for command in ("api", "mcp"):
        done = subprocess.run([situate, command, "--collection", "c", "--workers", "0"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"situate {command}: error: --workers 0: Input should be greater than or equal to 1"]


def test_processes_of_situate_api_are_checked_and_need_a_milvus_server(monkeypatch, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from situate.api.http import auto_processes, server_processes
    from situate.cli.options import ApiOptions
    from situate.core.errors import InputError
    from situate.core.settings import AUTO_API_PROCESSES, AUTO_LITE_ROWS, get_settings

    assert ApiOptions.build(collection="c", processes=3).processes == 3
    assert ApiOptions.build(collection="c").processes == 0  # chosen: one per core, or one
    cores = len(os.sched_getaffinity(0))
    # on a server, decided once the first process serves: by the collection's size on Lite
    assert server_processes(0, "http://localhost:19530") == (0 if cores > 1 else 1)
    assert server_processes(0, "data/milvus.db") == 1  # a Lite file is one process's
    assert server_processes(3, "http://localhost:19530") == 3
    each = min(cores, AUTO_API_PROCESSES)
    assert auto_processes(737, lite=True) == auto_processes(AUTO_LITE_ROWS, lite=True) == each
    assert auto_processes(AUTO_LITE_ROWS + 1, lite=True) == 1
    assert auto_processes(10 * AUTO_LITE_ROWS, lite=False) == each
    for value, said in ((-1, "greater than or equal to 0"), (65, "less than or equal to 64")):
        with pytest.raises(InputError, match=rf"^--processes {value!r}: Input should be {said}"):
            ApiOptions.build(collection="c", processes=value)
    monkeypatch.setenv("SITUATE_API_PROCESSES", "2")
    get_settings.cache_clear()
    try:
        assert ApiOptions.build(collection="c").processes == 2
    finally:
        get_settings.cache_clear()
    situate = str(Path(sys.executable).with_name("situate"))
    lite = tmp_path / "one.db"
    done = subprocess.run([situate, "api", "--collection", "c", "--milvus-uri", str(lite),
                           "--processes", "2"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"situate api: error: --processes 2 needs a Milvus server: a Milvus Lite file ({lite}) "
        "is one process's at a time; serve it with `milvus-lite server` and give its http:// "
        "URI (--milvus-uri), or run one process"]
    assert not lite.exists()
