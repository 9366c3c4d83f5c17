"""The `situate` command: parses arguments into a command's options, runs it, prints its
result. The commands are declared where they live (`situate.cli.commands`): the search faces in
`situate.cli.search` (no Prefect), the runs in `situate.cli.runs` (a flow through
`situate.flows.launch`), the install's facts in `situate.cli.info`.

Every error a user can act on (SituateError) is printed as one line on stderr with exit code 2;
flags override `SITUATE_*` environment variables, which override the defaults. The flags, their
choices and help come from the options models (`situate.pipeline.options`, `situate.cli.options`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
import typing
from typing import Any

from situate.cli.commands import COMMANDS, Command, commands
from situate.core.fields import shown_default
from situate.core.version import version
from situate.flows import launch, logs, signals
from situate.pipeline.options import Options

# Each help ends with real commands, run from the repository's root (as `git` and `llm` do).
EXAMPLES = """\
examples:
  situate ingest data/sample/corpus --collection sample      # the sample corpus, offline
  situate evaluate data/sample/eval.jsonl --collection sample
  situate search "How is the retry delay computed?" --collection sample --k 5
  situate api --collection sample                             # the same search over HTTP

Run `situate COMMAND --help` for a command's options and examples."""


def _parser() -> argparse.ArgumentParser:
    """The CLI's parser: each command's flags, choices and help come from its options model, so
    they cannot drift from what the flows and the search faces take."""
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
    from situate.pipeline.options import fields

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
    default = shown_default(field, flag, setting)
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


def _starting(cmd: Command) -> Any:
    """What hears SIGTERM and Ctrl-C while a server starts (`situate.api.http.starting`)."""
    import contextlib

    if not cmd.server:
        return contextlib.nullcontext()
    from situate.api.http import starting

    return starting(f"situate {cmd.name}")


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
        from situate.cli.messages import user_message
        from situate.core.secrets import redact

        print(f"situate {args.command}: error: {redact(user_message(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"situate {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if restore is not None:
            restore()


if __name__ == "__main__":  # `python -m situate.cli.main`: the commands are the module's, not __main__'s
    from situate.cli.main import main as situate_main

    sys.exit(situate_main())
