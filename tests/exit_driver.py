"""`python -m tests.exit_driver SPEC.json`: `situate` commands run in turn, round after round, in
one process (the CLI's own `main`), which then ends as a command's process does.

SPEC: {"rounds": N, "exits": [{"name": ..., "argv": [...], "env": {...}}, ...]}. Each round runs
every exit once, with its `env` set over the process's own (`{round}` in a value is the round's
number) and put back after. Each run's stderr starts with a line `@@ NAME round R` and ends with
`@@ exit CODE killed=K`: K says whether the temporary Prefect server would now be killed at exit
rather than asked to shut down (the command confirmed its run recorded). The runs share the one
temporary server the first flow run started; it stops when the process ends, after the last run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _run(exit_: dict[str, Any], n: int) -> None:
    from situate.cli.main import main as situate
    from situate.core.settings import get_settings
    from situate.flows import prefect_internals

    before = {key: os.environ.get(key) for key in exit_["env"]}
    os.environ.update({k: v.format(round=n) for k, v in exit_["env"].items()})
    get_settings.cache_clear()
    prefect_internals.kill_at_exit(False)  # each run must confirm its own record
    print(f"@@ {exit_['name']} round {n}", file=sys.stderr, flush=True)
    try:
        code = situate(exit_["argv"])
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    process = getattr(prefect_internals.temporary_server(), "server_process", None)
    sys.stdout.flush()
    print(f"@@ exit {code} killed={getattr(process, 'without_shutdown', None)}", file=sys.stderr,
          flush=True)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    for n in range(spec["rounds"]):
        for exit_ in spec["exits"]:
            _run(exit_, n)


if __name__ == "__main__":
    main()
