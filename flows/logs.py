"""What a `situate` command's console shows of Prefect's logs: a user error said once (by the
CLI, as one line), and the per-task-run lines only with `--verbose`."""

from __future__ import annotations

import logging


class _DropUserErrors(logging.Filter):
    """Prefect logs a failing flow's exception with its traceback, and an ERROR line for every
    task left waiting on the failed one; for a SituateError the CLI prints the one-line message
    itself, so both are noise. (A task that failed of a bug still logs its own traceback.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        from situate.core.errors import SituateError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, SituateError):
            return False
        msg = record.getMessage()
        if "NotReady(" in msg and "Upstream task run" in msg:
            return False  # a task left waiting on the failed one: same failure, said once
        return not any(name in msg for name in _error_names(SituateError))


def _error_names(base: type) -> set[str]:
    """The names of `base` and of every class derived from it."""
    names = {base.__name__}
    sub: type
    for sub in base.__subclasses__():
        names |= _error_names(sub)
    return names


class _QuietTaskRuns(logging.Filter):
    """Prefect's task engine logs a line or more per task run ("Task run 'window-3' - Finished
    in state Completed()"): hundreds on a large corpus, burying what matters. Off the console
    unless `--verbose`; the run's logs (UI) keep them, and a failed task run's ERROR still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "prefect.task_runs" and record.levelno < logging.WARNING
                    and (record.module == "task_engine"
                         or record.getMessage().startswith("Finished in state")))


class _QuietConsoles(logging.Filter):
    """Puts `_QuietTaskRuns` on the root logger's handlers (Prefect's console) as task-run records
    pass: Prefect sets up its handlers when it is imported, after the CLI has parsed its
    arguments, and importing it sooner would delay the model's early load. Lets every record by."""

    def __init__(self) -> None:
        super().__init__()
        self.quiet = _QuietTaskRuns()

    def filter(self, record: logging.LogRecord) -> bool:
        for h in logging.getLogger().handlers:
            if self.quiet not in h.filters:
                h.addFilter(self.quiet)
        return True


def install_log_filter(verbose: bool = False) -> None:
    """Keep user errors out of Prefect's logs: the CLI says them once, as one line. Unless
    `verbose`, keep the per-task-run lines off the console too."""
    f = _DropUserErrors()
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs", "prefect.engine"):
        logging.getLogger(name).addFilter(f)
        for h in logging.getLogger(name).handlers:
            h.addFilter(f)
    # Called again in one process (the tests call `main` in turn): the last verbosity holds.
    task_runs = logging.getLogger("prefect.task_runs")
    for console in [x for x in task_runs.filters if isinstance(x, _QuietConsoles)]:
        task_runs.removeFilter(console)
    for h in logging.getLogger().handlers:
        for quiet in [x for x in h.filters if isinstance(x, _QuietTaskRuns)]:
            h.removeFilter(quiet)
    if not verbose:
        task_runs.addFilter(_QuietConsoles())
