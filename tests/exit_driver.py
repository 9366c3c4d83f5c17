"""`python -m tests.exit_driver ROUNDS ARG...`: the `situate ARG...` command, ROUNDS times in one
process (the CLI's own `main`), then the process ends as the command's does.

Every round's stderr starts with a line `@@ round N` and ends with `@@ exit CODE killed=K`, where K
says whether the temporary Prefect server would now be killed at exit rather than asked to shut
down (the command confirmed everything its run sent was recorded). The rounds share the one
temporary server the first round started; it stops when the process ends, after the last round.
"""

from __future__ import annotations

import sys


def main() -> None:
    from situate.flows import prefect_internals
    from situate.flows.cli import main as situate

    rounds, argv = int(sys.argv[1]), sys.argv[2:]
    for n in range(rounds):
        process = getattr(prefect_internals.temporary_server(), "server_process", None)
        if process is not None:
            process.without_shutdown = False  # each round must confirm it again
        print(f"@@ round {n}", file=sys.stderr, flush=True)
        code = situate(argv)
        process = getattr(prefect_internals.temporary_server(), "server_process", None)
        killed = getattr(process, "without_shutdown", None)
        sys.stdout.flush()
        print(f"@@ exit {code} killed={killed}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
