"""`situate --version`, and every help ending with examples that are real commands: each parses
with the CLI's own parser and names inputs that exist."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from situate.cli.commands import COMMANDS as DECLARED
from tests.conftest import ROOT

SITUATE = Path(sys.executable).with_name("situate")
COMMANDS = list(DECLARED)  # every command the CLI has: the parser's are checked against it below


def test_the_commands_checked_here_are_the_parsers():
    from situate.cli.main import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SITUATE), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "100"})


def test_version_is_the_installed_distributions():
    r = _run("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"situate {version('situate')}"


def _examples(help_text: str) -> list[str]:
    """The commands of the help's closing `examples:` section, comments left out."""
    head, sep, tail = help_text.rpartition("\nexamples:\n")
    assert sep, f"no examples section at the end of:\n{help_text}"
    lines = [x.strip() for x in tail.splitlines()]
    # The section is the last thing in the help: at most a closing sentence after it.
    commands = [x for x in lines if x.startswith("situate ")]
    assert commands, tail
    last = [x for x in lines if x][-1]
    assert last.startswith(("situate ", "Run `situate")), last
    return commands


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_ends_with_real_examples(command):
    from situate.cli.main import _parser

    r = _run(*([command] if command else []), "--help")
    assert r.returncode == 0, r.stderr
    examples = _examples(r.stdout)
    assert 2 <= len(examples) <= 5, examples
    if command:  # its own first; then maybe the commands around it (synth's: ingest, evaluate)
        assert examples[0].split()[1] == command, examples
    for example in examples:
        args = _parser().parse_args(shlex.split(example, comments=True)[1:])  # exits (fails the test) if not
        for name in ("corpus", "eval_set"):
            path = getattr(args, name, None)
            if path and path.startswith("data/"):
                assert (ROOT / path).exists(), example
    # Flag help stays wrapped to the terminal: only an example line may run wider.
    assert all(len(x) <= 100 for x in r.stdout.splitlines()), r.stdout


def test_ingest_examples_show_claude_with_a_dry_run_first():
    examples = _examples(_run("ingest", "--help").stdout)
    claude = [x for x in examples if "--context anthropic" in x]
    assert claude and "--dry-run" in claude[0], examples


def test_verbose_goes_before_or_after_the_command():
    from situate.cli.main import _parser

    p = _parser()
    assert p.parse_args(["-v", "ingest", "c", "--collection", "x"]).verbose is True
    assert p.parse_args(["evaluate", "e.jsonl", "--collection", "x", "--verbose"]).verbose is True
    assert p.parse_args(["ingest", "c", "--collection", "x"]).verbose is False
    assert p.parse_args(["search", "q", "--collection", "x"]).verbose is False
