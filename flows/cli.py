"""The `situate` command: parses arguments into a command's options, runs it (a flow through
`situate.flows.launch`), prints its result.

Every error a user can act on (SituateError) is printed as one line on stderr with exit code 2;
flags override `SITUATE_*` environment variables, which override the defaults. The flags, their
choices and help come from the options models (`situate.flows.options`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import Field

from situate.core.fields import describe_default
from situate.core.registry import Registry
from situate.core.version import version
from situate.flows import launch, logs, signals
from situate.flows.options import Flag, Options

if TYPE_CHECKING:
    from situate.flows.options import (
        ApiOptions,
        EvaluateOptions,
        IngestOptions,
        McpOptions,
        SearchOptions,
        ServeOptions,
        SynthOptions,
    )

# Each help ends with real commands, run from the repository's root (as `git` and `llm` do).
EXAMPLES = """\
examples:
  situate ingest data/sample/corpus --collection sample      # the sample corpus, offline
  situate evaluate data/sample/eval.jsonl --collection sample
  situate search "How is the retry delay computed?" --collection sample --k 5
  situate api --collection sample                             # the same search over HTTP

Run `situate COMMAND --help` for a command's options and examples."""


@dataclass(frozen=True)
class Command:
    """One `situate` command, all of it declared where its function is (`@command`): the options
    model its function takes (its flags, help and checks), its one-line summary, the examples
    closing its help, and how it stops."""

    name: str
    run: Callable[[Any], int]
    summary: str
    examples: str
    # `-v` after the command too: the commands that run a flow in this process.
    verbose: bool = False
    # Servers: `--new-token`; SIGTERM heard while starting (`situate.api.http.starting`).
    server: bool = False
    # Stops on its own terms (servers, `serve`), not through the run's stop handlers.
    own_stop: bool = False

    def options(self) -> type[Options]:
        """The options model named by the function's parameter annotation: a model of
        `situate.flows.options` (imported only here: help needs no more), or one declared beside
        the function."""
        from situate.flows import options

        annotation = self.run.__annotations__["options"]
        if not isinstance(annotation, str):
            return typing.cast("type[Options]", annotation)
        found = getattr(sys.modules[self.run.__module__], annotation, None)
        return typing.cast("type[Options]", found or getattr(options, annotation))

    @property
    def reaches_milvus(self) -> bool:
        """Whether the command opens a Milvus store (and so takes `--milvus-token`)."""
        return bool({"milvus_uri", "uri"} & set(self.options().model_fields))


def _declared(run: Any) -> Command:
    found = getattr(run, "situate_command", None)
    if not isinstance(found, Command):
        raise TypeError(f"{run!r} is not declared with situate.flows.cli.command")
    return found


# Every command, situate's own and other packages', by its name in the `situate.commands`
# entry-point group: each names a function declared with `@command`.
COMMANDS: Registry[Command] = Registry("command", group="situate.commands", adapt=_declared)
F = TypeVar("F", bound=Callable[..., int])


def command(summary: str, examples: str, *, verbose: bool = False, server: bool = False,
            own_stop: bool = False) -> Callable[[F], F]:
    """Declare `cmd_NAME(options: NameOptions) -> int` as a `situate` command; it is
    `situate NAME` where an entry point of `situate.commands` names it."""
    def declare(run: F) -> F:
        name = run.__name__.removeprefix("cmd_")
        run.situate_command = Command(  # type: ignore[attr-defined]
            name, run, summary, "examples:\n" + examples.strip("\n"), verbose, server,
            own_stop or server)
        return run
    return declare


def commands(*, own: bool = False) -> dict[str, Command]:
    """Every command that loads (`own`: situate's own only, as its documentation lists them);
    one whose plugin fails to load is one line on stderr."""
    from situate.core.plugins import OWN, PluginError

    problems: list[str] = []
    try:
        found = COMMANDS.loaded(problems)
    except PluginError as e:  # none registered: an install older than its entry points
        print(f"situate: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for problem in problems:
        print(f"situate: warning: {problem}", file=sys.stderr)
    theirs = {name for name in found if getattr(COMMANDS.origin(name), "dist", OWN) != OWN}
    # situate's own in the order this module declares them (ingest first), then the others'.
    ordered = sorted(found, key=lambda n: (n in theirs, 0 if n in theirs else
                                           found[n].run.__code__.co_firstlineno, n))
    return {name: found[name] for name in ordered if not (own and name in theirs)}


def _parser() -> argparse.ArgumentParser:
    """The CLI's parser: each command's flags, choices and help come from its options model
    (`situate.flows.options`), so they cannot drift from what the flows take."""
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="situate", description="Contextual retrieval, offline batch "
                                "pipeline:\ningest a corpus into Milvus, evaluate Pass@k, search.",
                                epilog=EXAMPLES, formatter_class=raw)
    p.add_argument("--version", action="version", version=f"situate {version()}")
    verbose_help = ("show Prefect's line for every task run too (on the console; the run's logs "
                    "always have them)")
    p.add_argument("-v", "--verbose", action="store_true", help=verbose_help)
    sub = p.add_subparsers(dest="command", required=True)
    for name, cmd in commands().items():
        about = cmd.summary
        sp = sub.add_parser(name, help=about, description=textwrap.fill(
            about[0].upper() + about[1:] + ".", 79), epilog=cmd.examples, formatter_class=raw)
        if cmd.verbose:
            # Also after the command; SUPPRESS keeps a `situate -v ingest ...` from being undone.
            sp.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                            help=verbose_help)
        add_options(sp, cmd.options())
        if cmd.server:
            sp.add_argument("--new-token", action=_NewToken, nargs=0,
                            help="print a new random token for SITUATE_API_TOKEN and exit")
        if cmd.reaches_milvus:
            sp.add_argument("--milvus-token", help="token for a Milvus server or Zilliz Cloud "
                            "[SITUATE_MILVUS_TOKEN]; prefer the variable, flags show in `ps`")
    return p


class _NewToken(argparse.Action):
    """`--new-token`: a token no one can guess (256 bits, URL-safe), printed alone, then exit."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import secrets

        print(secrets.token_urlsafe(32))
        parser.exit(0)


def add_options(sp: argparse.ArgumentParser, model: type[Options]) -> None:
    """One argument per field of `model` that has a `Flag`; a value left out is None (the
    model's default, or its setting, then applies)."""
    from situate.flows.options import fields

    for name, field, flag, setting in fields(model):
        if flag is None:
            continue
        text = help_text(field, flag, setting)
        if not flag.names:
            sp.add_argument(name, help=text)
            continue
        kind = _value_type(field.annotation)
        if kind is bool:
            sp.add_argument(*flag.names, dest=name, default=None, help=text,
                            action="store_false" if flag.negate else "store_true")
            continue
        sp.add_argument(*flag.names, dest=name, metavar=flag.metavar, help=text,
                        required=field.is_required(), type=kind,
                        choices=list(flag.choices()) if flag.strict and flag.choices else None)


def help_text(field: Any, flag: Any, setting: Any) -> str:
    """A field's help: what it is, the names it takes (from their registry), its variable and
    default."""
    text = field.description or ""
    if flag.choices and not flag.strict:
        names = " | ".join(flag.choices())
        text += f": {names}" + (f" ({flag.hint})" if flag.hint else "")
    elif flag.hint:
        text += f" ({flag.hint})"
    default = describe_default(field, flag, setting)
    if setting is not None:
        text += f" [{setting.env}, default {default}]"
    elif flag.names and not field.is_required() and default not in ("none", "false", "true"):
        text += f" (default {default})"
    return text.replace("%", "%%")


def _value_type(annotation: Any) -> type:
    """int, float, bool or str: what argparse converts a flag's value to (lists stay strings:
    the model parses them)."""
    if typing.get_origin(annotation) is list:
        return str
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    first = args[0]
    return first if first in (int, float, bool) else str


@command("load, situate, embed and index a corpus",
         """\
  # the sample corpus: structural contexts and MiniLM, offline, about a minute
  situate ingest data/sample/corpus --collection sample
  # the codebase benchmark (pre-chunked JSON, committed under data/benchmarks)
  situate ingest data/benchmarks/codebase/codebase_chunks.json --collection codebase
  # Claude contexts (ANTHROPIC_API_KEY): see the requests and the bill first, then run
  situate ingest data/sample/corpus --collection sample_claude --context anthropic --dry-run
  situate ingest data/sample/corpus --collection sample_claude --context anthropic""", verbose=True)
def cmd_ingest(options: IngestOptions) -> int:
    result = launch.launch_ingest(options)
    print(result.text())
    if options.json_out:
        print(f"wrote {options.json_out}")
    return 0


@command("measure Pass@k of a collection on an evaluation set",
         """\
  # Pass@k of the sample corpus (after `situate ingest data/sample/corpus --collection sample`)
  situate evaluate data/sample/eval.jsonl --collection sample
  # the codebase benchmark (after ingesting its codebase_chunks.json)
  situate evaluate data/benchmarks/codebase/evaluation_set.jsonl --collection codebase
  # hybrid only, at k = 1 and 5, the results also as JSON
  situate evaluate data/sample/eval.jsonl --collection sample --modes hybrid --k 1,5 --json r.json""",
         verbose=True)
def cmd_evaluate(options: EvaluateOptions) -> int:
    result = launch.launch_evaluate(options)
    print(launch.evaluation_text(result))
    if options.json_out:
        print(f"wrote {options.json_out}")
    return 0


@command("print the top chunks for a query",
         """\
  situate search "How is the retry delay computed?" --collection sample --k 5
  situate search "dead letter queue" --collection sample --mode bm25
  situate search "how does the differential executor run both executors" --collection codebase
  # the reply of POST /search, as JSON; the first hit's whole text
  situate search "dead letter queue" --collection sample --json
  situate search "dead letter queue" --collection sample --k 1 --full""")
def cmd_search(options: SearchOptions) -> int:
    from situate.flows.search import respond

    reply = respond(options)
    for warning in reply.warnings:  # a long query cut: said where, as the servers say it
        print(f"situate search: warning: {warning}", file=sys.stderr)
    if options.json_out:
        print(reply.model_dump_json())  # the bytes `situate api` sends (`situate.api.http`)
        return 0
    if not reply.hits:
        print("no results")
    for rank, h in enumerate(reply.hits, start=1):
        print(f"{rank:>3}. {h.score:.4f}  {h.doc_id} #{h.index}")
        if options.full:
            if h.context:
                print(textwrap.indent(f"context: {h.context}", "     "))
            print(textwrap.indent(h.text, "     "))
            continue
        if h.context:
            print(f"     context: {_one_line(h.context, 200)}")
        print(f"     {_one_line(h.text, 300)}")
    return 0


@command("serve the ingest and evaluate deployments on cron schedules (needs a Prefect server: "
         "PREFECT_API_URL)",
         """\
  # a Prefect server first (`prefect server start`), then:
  export PREFECT_API_URL=http://127.0.0.1:4200/api
  situate serve data/sample/corpus --collection sample --eval-set data/sample/eval.jsonl
  # registered paused: runs only when triggered (`prefect deployment run ingest/situate`)
  situate serve data/sample/corpus --collection sample --paused""", own_stop=True)
def cmd_serve(options: ServeOptions) -> int:
    from situate.flows.deploy import serve_deployments

    stopped = serve_deployments(options)
    if stopped is not None:
        runs = ("no run was in progress" if not stopped.runs else
                f"{stopped.runs} run(s) in progress cancelled; what they did is kept, and the "
                "next run goes on from there")
        print(f"situate serve: stopped ({stopped.signal}); {runs}", file=sys.stderr)
    return 0


@command("make an evaluation set from a corpus: held-out sentences (offline) or an LLM's questions",
         """\
  # offline and free: held-out sentences become queries, removed from out/corpus
  situate synth data/sample/corpus --out heldout --generator held-out
  situate ingest heldout/corpus --collection heldout
  situate evaluate heldout/eval.jsonl --collection heldout
  # an LLM's questions (see the plan and the price first, then run; resumable)
  situate synth data/sample/corpus --out synth --generator openai --n 100 --dry-run
  situate synth data/sample/corpus --out synth --generator openai --n 100""")
def cmd_synth(options: SynthOptions) -> int:
    from situate.flows.synth import run_synth

    summary = run_synth(options)
    summary.write_json(options.json_out)
    print(summary.text())
    if options.json_out:
        print(f"wrote {options.json_out}")
    return 0


@command("serve search over HTTP (POST /search), warm: ranked as evaluate ranks",
         """\
  # POST /search on http://127.0.0.1:8000 (OpenAPI page: /docs)
  situate api --collection sample
  curl -s localhost:8000/search -H 'content-type: application/json' \\
       -d '{"query": "How is the retry delay computed?", "k": 5}'
  # beyond loopback: a token (clients send Authorization: Bearer <TOKEN>) and the names it serves
  export SITUATE_API_TOKEN=$(situate api --new-token)
  situate api --collection sample --host 0.0.0.0 --allowed-host search.example.com""", server=True)
def cmd_api(options: ApiOptions) -> int:
    from situate.api.http import serve

    _said_stopped("api", serve(options.config(), host=options.host, port=options.port,
                               policy=options.policy(_api_token())))
    return 0


@command("serve search as an MCP server (stdio or streamable HTTP), warm",
         """\
  # an agent starts it and speaks MCP on its stdin/stdout (tools: search, describe_collection)
  situate mcp --collection sample
  # over streamable HTTP on http://127.0.0.1:8000/mcp
  situate mcp --collection sample --transport streamable-http""", server=True)
def cmd_mcp(options: McpOptions) -> int:
    from situate.api.mcp import serve

    _said_stopped("mcp", serve(options.config(), transport=options.transport, host=options.host,
                               port=options.port, policy=options.policy(_api_token())))
    return 0


class VersionOptions(Options):
    """`situate version`."""

    json_out: Annotated[bool, Flag(("--json",))] = Field(False, description="print them as JSON")


# What a bug report needs beside situate's own version: the engines situate runs on.
ENGINES = ("prefect", "pymilvus", "milvus-lite", "onnxruntime", "torch", "sentence-transformers",
           "anthropic", "cohere")


@command("print the versions of situate, Python and the engines it runs on (for a bug report)",
         """\
  situate version
  situate version --json""")
def cmd_version(options: VersionOptions) -> int:
    import json
    import platform
    from importlib import metadata

    found = {"situate": version(), "python": platform.python_version()}
    for name in ENGINES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    print(json.dumps(found, indent=2) if options.json_out else
          "\n".join(f"{name:<22} {v}" for name, v in found.items()))
    return 0


class PluginsOptions(Options):
    """`situate plugins`."""

    check: Annotated[bool, Flag(("--check",))] = Field(
        False, description="import every entry too, and say in one line each why one fails")
    json_out: Annotated[bool, Flag(("--json",))] = Field(False, description="print them as JSON")


@command("list the readers, embedders, context providers, rerankers, stores, sources and commands "
         "installed, and the package each comes from",
         """\
  situate plugins
  situate plugins --check --json""")
def cmd_plugins(options: PluginsOptions) -> int:
    import json

    from situate.core.plugins import GROUPS, PluginError, groups

    found: dict[str, list[dict[str, str]]] = {}
    for group, entries in groups().items():
        found[group] = []
        for entry in entries:
            row = {"name": entry.name, "from": entry.origin, "value": entry.value}
            if options.check:
                try:
                    entry.load()
                except PluginError as e:
                    row["error"] = str(e)
            found[group].append(row)
    if options.json_out:
        print(json.dumps(found, indent=2))
    else:
        lines = []
        for group, rows in found.items():
            lines.append(f"{group}: {GROUPS.get(group, 'entries of another package')}")
            lines += [f"  {r['name']:<12} {r['from']:<20} {r['value']}" for r in rows] or ["  (none)"]
        print("\n".join(lines))
    failed = [row["error"] for rows in found.values() for row in rows if "error" in row]
    for line in failed:
        print(f"situate plugins: {line}", file=sys.stderr)
    return 1 if failed else 0


def _api_token() -> str:
    from situate.core.settings import get_settings

    return get_settings().api_token.get_secret_value()


def _said_stopped(command: str, signal_name: str | None) -> None:
    if signal_name is not None:
        print(f"situate {command}: stopped ({signal_name})", file=sys.stderr)


def _starting(cmd: Command) -> Any:
    """What hears SIGTERM and Ctrl-C while a server starts (`situate.api.http.starting`)."""
    import contextlib

    if not cmd.server:
        return contextlib.nullcontext()
    from situate.api.http import starting

    return starting(f"situate {cmd.name}")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# The status of a process ended by SIGPIPE (128 + 13), as a shell reports `git log | head -1`.
BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """`situate`: a command's exit status. A reader that stops reading (`| head -1`) ends the
    command quietly with BROKEN_PIPE: Python ignores SIGPIPE, so the write raises instead."""
    try:
        try:
            return _main(argv)
        finally:  # what is still buffered is written here, not at exit, where it cannot be caught
            sys.stdout.flush()
    except BrokenPipeError:
        import os

        # Nothing more reaches the closed pipe, not even the interpreter's flush at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    from situate.core.secrets import install_log_redaction

    install_log_redaction()  # no secret in any log line of this process, whoever writes it
    launch.configure_process()
    args = _parser().parse_args(argv)
    from situate.core.errors import SituateError
    from situate.core.settings import configured

    logs.install_log_filter(verbose=args.verbose)
    # A model prepared for this user (once, seconds) is news, not a warning: an INFO line, shown.
    logging.getLogger("situate.embed").setLevel(logging.INFO)
    # `situate serve` stops on its own terms (flows.deploy.serve: cancels its runs, exits 0);
    # the servers until they serve (`situate.api.http.starting`), then as uvicorn or MCP does.
    cmd = COMMANDS.get(args.command)
    restore = signals.install_stop_handlers(args.command) if not cmd.own_stop else None
    starting = _starting(cmd)
    try:
        values = {k: v for k, v in vars(args).items()
                  if k not in ("command", "verbose", "milvus_token")}
        token = getattr(args, "milvus_token", None)
        with starting, configured(milvus_token=token):  # a secret: no parameter
            return cmd.run(cmd.options().build(**values))
    except SituateError as e:
        from situate.core.secrets import redact
        from situate.flows.messages import user_message

        print(f"situate {args.command}: error: {redact(user_message(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"situate {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if restore is not None:
            restore()


if __name__ == "__main__":  # `python -m situate.flows.cli`: the commands are the module's, not __main__'s
    from situate.flows.cli import main as situate_main

    sys.exit(situate_main())
