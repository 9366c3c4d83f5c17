"""How a `situate` command is declared and found: `@command` beside the function, the
`situate.commands` entry-point group naming it (situate's own exactly as another package's).
Imports no flow: `situate --help` and the search faces load only what they use."""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from situate.core.registry import Registry

if TYPE_CHECKING:
    from situate.pipeline.options import Options


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
        """The options model named by the function's parameter annotation, as the function's
        module names it (the module imports its models)."""
        annotation = self.run.__annotations__["options"]
        if not isinstance(annotation, str):
            return typing.cast("type[Options]", annotation)
        return typing.cast("type[Options]", getattr(sys.modules[self.run.__module__], annotation))

    @property
    def reaches_milvus(self) -> bool:
        """Whether the command opens a Milvus store (and so takes `--milvus-token`)."""
        return bool({"milvus_uri", "uri"} & set(self.options().model_fields))


def _declared(run: Any) -> Command:
    found = getattr(run, "situate_command", None)
    if not isinstance(found, Command):
        raise TypeError(f"{run!r} is not declared with situate.cli.commands.command")
    return found


# Every command, situate's own and other packages', by its name in the `situate.commands`
# entry-point group: each names a function declared with `@command`.
COMMANDS: Registry[Command] = Registry("command", group="situate.commands", adapt=_declared)
# situate's own commands' modules, in the order `situate --help` and the docs list them.
OWN_MODULES = ("situate.cli.runs", "situate.cli.search", "situate.cli.info")
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
    # situate's own as their modules declare them (the runs first, ingest first), then the others'.
    def place(name: str) -> tuple[int, int]:
        module = found[name].run.__module__
        at = OWN_MODULES.index(module) if module in OWN_MODULES else len(OWN_MODULES)
        return at, found[name].run.__code__.co_firstlineno

    ordered = sorted((n for n in found if n not in theirs), key=place)
    return {name: found[name] for name in ordered + ([] if own else sorted(theirs))}
