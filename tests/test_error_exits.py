"""Every error exit of the README's bad-input table ends the same way, every time: one line on
stderr that names what and where, exit code 2, and after it nothing but Prefect's own line
stopping its temporary server: no traceback, no ERROR line from any library.

The race this guards against: Prefect's temporary server, asked to shut down as a command
ended, sometimes printed SQLAlchemy's `Exception during reset or similar` and a traceback after
the command's one line (its shutdown cancels the background services wherever they are: see
`prefect_internals.kill_at_exit`). It was rare on an idle machine and came more often
under load, hence rounds: each exit here runs several times (SITUATE_EXIT_ROUNDS sets how many).

- Exits refused before Prefect is involved (most of the table) run in this process, in a loop
  (milliseconds a round, 20 rounds): no server starts for them, in the CLI or here.
- Exits raised inside a flow run (or at Prefect's API: `serve`, a Secret block looked up) run
  in `situate` processes of their own (tests/exit_driver.py): two share out the exits in a flow
  run (this file's and test_error_exits_b.py's, on the two xdist workers), `serve` has one;
  each runs its exits in turn, round after round (4 rounds; SITUATE_EXIT_ROUNDS=20 for 20),
  each run from an empty context cache. A process's runs share the temporary server its first
  run started: each run must end with the command having confirmed its flow run recorded (so
  the server is killed at exit, not shut down), and the process's end, where the server stops,
  must print nothing but Prefect's stop line. The stop is the same for every exit and every
  round (a kill); what differs between runs is the flow run, and each has one.
- `test_a_server_caught_mid_commit_by_the_end_prints_nothing` sets up that race on
  purpose (tests/fakes/held_commit) and checks the command's end prints nothing of it.

Left out, each tested where it belongs: exits that are not errors (skips and cleaning, exit 0),
waits that are the point of the exit (a Milvus server or an LLM server staying unreachable is
retried for 30-60 s first: test_milvus_faults, test_openai_contexts, test_ollama_contexts,
tests/claude), stops by signal (test_stop), a CPU without AVX2, and `--group-chunks` against a
server without JSON-schema output (no fake server models one).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_CORPUS, SAMPLE_EVAL

# Rounds of each exit: 20 before Prefect (milliseconds each); 4 with a flow run (about 1 s of
# CPU each, on top of a temporary server per process), to keep CI's cost near its budget.
# SITUATE_EXIT_ROUNDS=20 runs 20 of everything (about 90 s more on CI's two cores).
ROUNDS = int(os.environ.get("SITUATE_EXIT_ROUNDS", "20"))
RUN_ROUNDS = int(os.environ.get("SITUATE_EXIT_ROUNDS", "4"))
HELD_COMMIT = Path(__file__).parent / "fakes" / "held_commit"
KEY = "sk-test-error-exits-secret"
_PREFECT_STOP = re.compile(r"\| INFO +\| prefect - Stopping temporary server on http://")


def one_clean_line(stderr: str, command: str, words: str) -> str:
    """The exit's one line: no traceback and no ERROR line anywhere, one `situate COMMAND: error:`
    line holding `words`, and after it nothing but Prefect's line stopping its server."""
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert "Traceback" not in stderr, stderr
    assert not [x for x in lines if "ERROR" in x], stderr
    errors = [i for i, x in enumerate(lines) if x.startswith(f"situate {command}: error: ")]
    assert len(errors) == 1 and words in lines[errors[0]], stderr
    assert all(_PREFECT_STOP.search(x) for x in lines[errors[0] + 1:]), stderr
    return lines[errors[0]]


# --- exits before Prefect is involved: in this process, ROUNDS times each --------------------

@dataclass
class Exit:
    """One error exit: the command's arguments (`{tmp}` is the test's folder), the words its line
    holds, and the environment it runs with."""

    name: str
    argv: list[str]
    words: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def command(self) -> str:
        return self.argv[0]


def _ingest(corpus: str, *more: str) -> list[str]:
    return ["ingest", corpus, "--collection", "c", *more]


def _evaluate(eval_set: str, *more: str) -> list[str]:
    return ["evaluate", eval_set, "--collection", "c", *more]


SAMPLE = str(SAMPLE_CORPUS)
EVAL = str(SAMPLE_EVAL)
BEFORE_PREFECT = [
    Exit("corpus-missing", _ingest("{tmp}/missing.json"), "corpus not found"),
    Exit("empty-file", _ingest("{tmp}/empty.json"), "the file is empty"),
    Exit("malformed-json", _ingest("{tmp}/bad.jsonl"), "bad JSON at line 2"),
    Exit("no-text", _ingest("{tmp}/notext.jsonl"), "line 1 (a) has no 'text' string"),
    Exit("duplicate-id", _ingest("{tmp}/dup.jsonl"), "line 2: duplicate id 'a' (first on line 1)"),
    Exit("wrong-shape", _ingest("{tmp}/shape.json"), "expected a JSON list of documents"),
    Exit("unknown-form", _ingest("{tmp}/notes.xyz"), "unknown corpus form '.xyz'"),
    Exit("legacy-doc", _ingest("{tmp}/old.doc"), "legacy Word .doc: save it as .docx"),
    Exit("not-a-pdf", _ingest("{tmp}/notes.pdf"), "notes.pdf: not a PDF"),
    Exit("zip-bomb", _ingest("{tmp}/bomb.docx"), "zip bomb"),
    Exit("nothing-readable", _ingest("{tmp}/nothing"), "no documents, text, Markdown or source"),
    Exit("file-over-limit", _ingest("{tmp}/big.txt"), "over the 100-byte limit for one file",
         {"SITUATE_MAX_FILE_BYTES": "100"}),
    Exit("not-utf8", _ingest("{tmp}/latin1.jsonl"), "line 1 is not UTF-8 text"),
    Exit("nul-in-id", _ingest("{tmp}/nulid.jsonl"), "contains a NUL byte"),
    Exit("empty-query", ["search", "  ", "--collection", "c"], "empty query"),
    Exit("empty-query-in-eval-set", _evaluate("{tmp}/emptyq.jsonl"), "empty query"),
    Exit("rerank-without-key", _evaluate(EVAL, "--modes", "rerank"),
         "reranker 'cohere' needs an API key", {"COHERE_API_KEY": ""}),
    Exit("unknown-context", _ingest(SAMPLE, "--context", "gpt"), "unknown context provider 'gpt'"),
    Exit("unknown-embedder", _ingest(SAMPLE, "--embedder", "nope"), "unknown embedder"),
    Exit("unknown-mode", _evaluate(EVAL, "--modes", "sparse"), "unknown retrieval mode"),
    Exit("bad-k", _evaluate(EVAL, "--k", "x"), "--k must be"),
    Exit("embedder-key-missing", _ingest(SAMPLE, "--embedder", "openai"),
         "embedder 'openai' needs an API key", {"OPENAI_API_KEY": ""}),
    Exit("eval-set-missing", _evaluate("{tmp}/missing.jsonl"), "missing.jsonl"),
    Exit("eval-set-malformed", _evaluate("{tmp}/bad.jsonl"), "has no 'query'"),
    Exit("eval-set-no-golden", _evaluate("{tmp}/nogolden.jsonl"), "has no golden chunks"),
    Exit("collection-not-ingested", _evaluate(EVAL), "collection 'c' not found"),
    Exit("search-collection-not-ingested", ["search", "lease", "--collection", "c"],
         "collection 'c' not found"),
    Exit("invalid-collection-name", ["ingest", SAMPLE, "--collection", "bad-name"],
         "invalid collection name"),
    Exit("option-out-of-range", _ingest(SAMPLE, "--rebuild-at", "-1"),
         "--rebuild-at -1.0: Input should be greater than or equal to 0"),
    Exit("bad-setting", _ingest(SAMPLE, "--dry-run"), "SITUATE_REBUILD_AT '-2'",
         {"SITUATE_REBUILD_AT": "-2"}),
    Exit("st-no-model-dir", _ingest(SAMPLE, "--embedder", "st:/no/such/dir"),
         "no model directory at /no/such/dir"),
    Exit("st-not-cached", _ingest(SAMPLE, "--embedder", "st:nobody/no-such-model"),
         "is not in the local Hugging Face cache", {"HF_HUB_OFFLINE": "1"}),
    Exit("bad-fusion", _evaluate(EVAL), "SITUATE_FUSION='max' is not a fusion",
         {"SITUATE_FUSION": "max"}),
    Exit("collection-twice", ["evaluate", EVAL, "--collection", "a,a"], "names 'a' twice"),
    Exit("dry-run-bad-corpus", _ingest("{tmp}/missing.json", "--dry-run"), "corpus not found"),
    Exit("context-nope", _ingest(SAMPLE, "--context", "nope"), "unknown context provider 'nope'"),
    Exit("synth-generator-nope", ["synth", SAMPLE, "--out", "{tmp}/out", "--generator", "nope"],
         "unknown generator 'nope'"),
    Exit("synth-held-out-jsonl", ["synth", "{tmp}/one.jsonl", "--out", "{tmp}/out",
                                  "--generator", "held-out"], "cannot rewrite a JSONL corpus"),
    Exit("synth-corpus-missing", ["synth", "{tmp}/missing.json", "--out", "{tmp}/out"],
         "corpus not found"),
]


@pytest.fixture(scope="module", autouse=True)
def prefect_logging_set_up_outside_capfd() -> None:
    """Prefect sets up its logging (console handlers on the stream stderr is then) when it is
    first imported. Imported first inside a test's `capfd` (`situate search` imports it), its
    handlers would keep that test's stream, closed after it, and every later test of the worker
    that logs through them would print `--- Logging error ---`: import it here, outside."""
    import situate.flows.evaluate  # noqa: F401


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory) -> Path:
    from tests.helpers import write_bad_inputs

    folder = tmp_path_factory.mktemp("bad-inputs")
    write_bad_inputs(folder)
    return folder


@pytest.mark.parametrize("exit_", BEFORE_PREFECT, ids=lambda e: e.name)
def test_each_exit_before_prefect_is_one_line_every_time(exit_, bad_inputs, tmp_path,
                                                            monkeypatch, capfd, caplog):
    from situate.cli.main import main
    from situate.core.settings import get_settings

    for key, value in {"SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
                       "SITUATE_CACHE_DIR": str(tmp_path / "cache"),
                       "SITUATE_RESULTS_DIR": str(tmp_path / "results"),
                       "ANTHROPIC_API_KEY": "", **exit_.env}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    argv = [a.format(tmp=bad_inputs) for a in exit_.argv]
    caplog.set_level(logging.WARNING)
    for n in range(ROUNDS):
        get_settings.cache_clear()
        code = main(argv)
        err = capfd.readouterr().err
        assert code == 2, f"round {n}: {err}"
        one_clean_line(err, exit_.command, exit_.words)
        assert [x for x in err.splitlines() if x.strip()] == [err.strip()], err
        loud = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not loud, f"round {n}: {loud}"
    assert not (tmp_path / "m.db").exists()
    get_settings.cache_clear()


# --- exits in a flow run, or at Prefect's API: three `situate` processes, RUN_ROUNDS rounds ----

Setup = Callable[[ExitStack, Path], dict[str, str]]


@dataclass
class RunExit(Exit):
    """An exit raised inside a flow run (or, for `serve`, against Prefect's API): `setup` starts
    the fakes it talks to (closed by the stack) and returns the environment that points at them."""

    setup: Setup | None = None


def _anthropic(context_window: int | None = None, **fake: object) -> Setup:
    """FakeAnthropic; with `context_window`, Haiku 4.5 reads no more than that many tokens."""
    def setup(stack: ExitStack, tmp: Path) -> dict[str, str]:
        from tests.fakes.anthropic_server import DEFAULT_MODELS, FakeAnthropic, ModelSpec

        if context_window is not None:
            fake["models"] = {**DEFAULT_MODELS, "claude-haiku-4-5": ModelSpec(
                4096, context_window=context_window)}
        server = stack.enter_context(FakeAnthropic(api_key=KEY, **fake))  # type: ignore[arg-type]
        return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.base_url}
    return setup


def _openai_chat(**fake: object) -> Setup:
    def setup(stack: ExitStack, tmp: Path) -> dict[str, str]:
        from tests.fakes.openai_chat_server import FakeOpenAIChat

        server = stack.enter_context(FakeOpenAIChat(api_key=KEY, **fake))  # type: ignore[arg-type]
        return {"OPENAI_API_KEY": KEY, "SITUATE_LLM_BASE_URL": server.base_url + "/v1"}
    return setup


def _ollama(**fake: object) -> Setup:
    def setup(stack: ExitStack, tmp: Path) -> dict[str, str]:
        from tests.fakes.ollama_server import FakeOllama

        server = stack.enter_context(FakeOllama(**fake))  # type: ignore[arg-type]
        return {"OLLAMA_HOST": server.base_url}
    return setup


def _with(setup: Setup, **env: str) -> Setup:
    return lambda stack, tmp: {**setup(stack, tmp), **env}


def _holding_the_lite_file(stack: ExitStack, tmp: Path) -> dict[str, str]:
    from situate.storage.milvus import MilvusStore

    stack.callback(MilvusStore(str(tmp / "m.db")).close)  # this process holds it meanwhile
    return {}


def _kept(*more: str) -> list[str]:
    """Ingest into `kept`, a collection that exists (with MiniLM's vectors: no model loads)."""
    return ["ingest", SAMPLE, "--collection", "kept", *more]


WITH_PREFECT = [
    RunExit("collection-not-ingested", ["evaluate", EVAL, "--collection", "never_ingested"],
            "collection 'never_ingested' not found"),
    RunExit("another-embedder", _kept("--embedder", "openai"), "holds vectors from minilm",
            {"OPENAI_API_KEY": KEY}),
    RunExit("lite-file-held", _kept(), "Milvus Lite allows one process per file",
            setup=_holding_the_lite_file),
    RunExit("context-without-key", _kept("--context", "openai"),
            "context provider 'openai' needs an API key", {"OPENAI_API_KEY": ""}),
    RunExit("openai-key-refused", _kept("--context", "openai"), "rejected the API key",
            setup=_with(_openai_chat(), OPENAI_API_KEY="sk-wrong-key-77")),
    RunExit("openai-unknown-model", _kept("--context", "openai:no-such-model"),
            "does not serve model 'no-such-model'", setup=_openai_chat()),
    RunExit("openai-window-too-small", ["ingest", "{tmp}/huge", "--collection", "kept",
                                        "--context", "openai:tiny-window"],
            "longer than the model's context window",
            setup=_with(_openai_chat(models={"tiny-window": 1000}),
                        SITUATE_LLM_CONTEXT_WINDOW="4096")),
    RunExit("anthropic-key-refused", _kept("--context", "anthropic"), "rejected the API key",
            setup=_with(_anthropic(), ANTHROPIC_API_KEY="sk-ant-wrong-key-123")),
    RunExit("anthropic-document-refused", ["ingest", "{tmp}/huge", "--collection", "kept",
                                           "--context", "anthropic", "--concurrency", "4"],
            "Anthropic refused the request for document a_huge.md",
            setup=_anthropic(context_window=3000, latency=0.3)),
    RunExit("ollama-model-missing", _kept("--context", "ollama:missing"), "ollama pull missing",
            setup=_ollama()),
    RunExit("ollama-window-too-small", _kept("--context", "ollama:short"),
            "SITUATE_LLM_CONTEXT_WINDOW=4096", setup=_ollama(models={"short": 4096})),
    RunExit("ollama-prompt-cut", ["ingest", "{tmp}/huge", "--collection", "kept", "--context",
                                  "ollama"], "Ollama cut the prompt of document",
            setup=_with(_ollama(chars_per_token=2), SITUATE_LLM_CONTEXT_WINDOW="4096")),
    RunExit("serve-without-server", ["serve", SAMPLE, "--collection", "c"],
            "cannot reach the Prefect API", {"PREFECT_API_URL": "http://127.0.0.1:9/api"}),
    # No flow run, but the key is looked up in Prefect's Secret blocks too.
    RunExit("synth-llm-without-key", ["synth", SAMPLE, "--out", "{tmp}/out", "--generator",
                                      "openai", "--n", "3"],
            "context provider 'openai' needs an API key", {"OPENAI_API_KEY": ""}),
]


def make_lite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Milvus Lite file holding `kept`, an empty collection of MiniLM's vectors."""
    from situate.storage.milvus import MilvusStore
    from situate.tasks.embedders.base import check_embedder

    path = tmp_path_factory.mktemp("lite") / "m.db"
    name, model, _ = check_embedder("minilm")
    store = MilvusStore(str(path))
    store.ensure_collection("kept", 384, f"{name}:{model}")
    store.close()
    return path


@pytest.fixture(scope="module")
def lite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_lite_template(tmp_path_factory)


# The exits in three `situate` processes: two share the flow runs out between them (one
# temporary server each), and `serve` talks to a Prefect API of its own.
GROUPS = {"runs-a": [e for e in WITH_PREFECT if e.command != "serve"][0::2],
          "runs-b": [e for e in WITH_PREFECT if e.command != "serve"][1::2],
          "serve": [e for e in WITH_PREFECT if e.command == "serve"]}


def _runs(stderr: str) -> tuple[str, list[tuple[str, int, int, str, str]], str]:
    """(what came before the first run, [(exit, round, code, killed, its stderr)], what came
    after the last)."""
    parts = re.split(r"^@@ (\S+) round (\d+)\n", stderr, flags=re.M)
    runs, after = [], ""
    for name, n, part in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        body, _, tail = part.partition("@@ exit ")
        code, _, rest = tail.partition(" killed=")
        killed, _, after = rest.partition("\n")
        runs.append((name, int(n), int(code), killed, body))
    return parts[0], runs, after


def run_group(group: str, lite_template: Path, tmp_path: Path) -> None:
    """The exits of `group`, RUN_ROUNDS rounds, in one `situate` process, each run checked."""
    import json
    import shutil

    from tests.helpers import huge_and_small

    exits, spec = {e.name: e for e in GROUPS[group]}, []
    with ExitStack() as stack:
        for exit_ in exits.values():
            folder = tmp_path / exit_.name
            folder.mkdir()
            shutil.copytree(lite_template, folder / "m.db")
            huge_and_small(folder / "huge")
            env = {"SITUATE_MILVUS_URI": str(folder / "m.db"),
                   "SITUATE_CACHE_DIR": str(folder / "cache-{round}"),  # each run from scratch
                   "SITUATE_RESULTS_DIR": str(folder / "results"), **exit_.env}
            if exit_.setup is not None:
                env.update(exit_.setup(stack, folder))
            spec.append({"name": exit_.name, "env": env,
                         "argv": [a.format(tmp=folder) for a in exit_.argv]})
        (tmp_path / "spec.json").write_text(json.dumps({"rounds": RUN_ROUNDS, "exits": spec}))
        # tests/ is imported from ROOT by path: a command run in this process may have set
        # PYTHONSAFEPATH (flows/launch.py), which keeps the working directory off sys.path.
        env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        r = subprocess.run([sys.executable, "-m", "tests.exit_driver", str(tmp_path / "spec.json")],
                           cwd=ROOT, env=env,
                           capture_output=True, text=True,
                           timeout=300 + 20 * RUN_ROUNDS * len(spec))
    before, runs, after = _runs(r.stderr)
    assert r.returncode == 0 and len(runs) == RUN_ROUNDS * len(spec), r.stderr[-5000:]
    assert "Traceback" not in before and "ERROR" not in before, before
    for name, n, code, killed, err in runs:
        exit_ = exits[name]
        assert code == 2, f"{name}, round {n}: {err}"
        line = one_clean_line(err, exit_.command, exit_.words)
        assert KEY not in line and "wrong-key" not in line
        if exit_.command in ("ingest", "evaluate"):  # the run was recorded: the temporary
            assert killed == "True", f"{name}, round {n}: {err}"  # server is killed at exit
    assert all(_PREFECT_STOP.search(x) for x in after.splitlines() if x.strip()), after


@pytest.mark.slow  # a temporary Prefect server, then RUN_ROUNDS flow runs of each exit
def test_each_exit_in_a_flow_run_is_one_line_every_time_first_half(lite_template, tmp_path):
    run_group("runs-a", lite_template, tmp_path)


@pytest.mark.slow  # one command with a temporary Prefect server, each way
@pytest.mark.parametrize("automations", ["default", "on"])
def test_a_server_caught_mid_commit_by_the_end_prints_nothing(lite_template, tmp_path, automations):
    """The shutdown race, set up on purpose: when the command ends, the server's periodic
    evaluation of automations (every 5 s, automations or not) is still returning the connection
    of its commit (tests/fakes/held_commit holds it there). A server asked to shut down cancels it
    there, and SQLAlchemy printed `Exception during reset or similar` and a traceback after the
    command's line; killed once the command has seen its run recorded, it prints nothing.

    By default the temporary server runs no automation service at all
    (`prefect_internals.TEMPORARY_SERVER_ENV`): the evaluation never runs, so the hold never
    begins. A user who turns the service on (PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED=true) gets
    it, and the race: the command's end still prints nothing."""
    import shutil

    shutil.copytree(lite_template, tmp_path / "m.db")
    held = tmp_path / "held.txt"
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED")}
    env.update({"SITUATE_MILVUS_URI": str(tmp_path / "m.db"),
                "SITUATE_CACHE_DIR": str(tmp_path / "cache"),
                "SITUATE_RESULTS_DIR": str(tmp_path / "results"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(HELD_COMMIT),
                                                            env.get("PYTHONPATH")])),
                "SITUATE_TEST_HELD_COMMIT": str(held)})
    if automations == "on":
        env["PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED"] = "true"
    r = subprocess.run([sys.executable, "-m", "situate.cli.main", "evaluate", EVAL,
                        "--collection", "never_ingested"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    if automations == "on":
        assert held.exists(), "the hold never began: the race was not set up"
    else:
        assert not held.exists(), "the temporary server evaluated automations"
    assert r.returncode == 2, r.stderr
    one_clean_line(r.stderr, "evaluate", "collection 'never_ingested' not found")
