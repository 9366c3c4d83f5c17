"""Deployments of the two flows, served by this process (`situate serve`): no work pool, no worker,
nothing that needs the internet. Prefect's scheduler creates runs from the cron schedules; this
process polls for them (and for runs triggered from the UI or `prefect deployment run`) and runs
each in a subprocess.

`prefect.yaml` describes the same two deployments for a process work pool and `prefect worker`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from situate.core.errors import InputError
from situate.core.secrets import redact
from situate.core.uri import is_lite
from situate.flows import prefect_internals
from situate.pipeline.options import EvaluateOptions, IngestOptions, ServeOptions
from situate.tasks.sources.base import is_source


def build_deployments(options: ServeOptions) -> list[Any]:
    """The ingest (and, given an evaluation set, evaluate) deployments with their schedules.

    Each takes its flow's options as its one parameter: the values given here, and nothing else,
    so each run resolves the rest from the settings where it runs. Ingest has a concurrency limit
    of 1: a slow run and the next scheduled one must not write the same collection at once (and
    a Milvus Lite file admits one process anyway).
    """
    from situate.flows.evaluate import evaluate_flow
    from situate.flows.ingest import ingest_flow

    tags = ["situate", f"collection:{options.collection}"]
    ingest, evaluate = deployment_options(options)
    out = [ingest_flow.to_deployment(
        name=options.name, cron=options.ingest_cron, paused=options.paused, concurrency_limit=1,
        tags=[*tags, "ingest"],
        description=f"Incremental ingest of {redact(options.corpus)} into {options.collection}",
        parameters={"options": ingest.given()})]
    if evaluate is not None:
        out.append(evaluate_flow.to_deployment(
            name=options.name, cron=options.evaluate_cron, paused=options.paused,
            tags=[*tags, "evaluate"],
            description=f"Pass@k of {options.collection} on {options.eval_set}",
            parameters={"options": evaluate.given()}))
    return out


def deployment_options(options: ServeOptions) -> tuple[IngestOptions, EvaluateOptions | None]:
    """The options each deployment's runs take, built (so checked) from what serve was given."""
    ingest = IngestOptions.build(corpus=options.corpus, collection=options.collection,
                                 context=options.context, embedder=options.embedder,
                                 milvus_uri=options.milvus_uri, prune=options.prune,
                                 credentials_block=options.credentials_block)
    evaluate = (EvaluateOptions.build(eval_set=options.eval_set, collection=options.collection,
                                      milvus_uri=options.milvus_uri)
                if options.eval_set else None)
    return ingest, evaluate


def resolve_paths(options: ServeOptions) -> ServeOptions:
    """Runs start in subprocesses, maybe from another directory: absolute paths (the Milvus URI
    a Lite file's)."""
    uri = options.milvus_uri
    return options.model_copy(update={
        "corpus": options.corpus if is_source(options.corpus) else str(Path(options.corpus).resolve()),
        "milvus_uri": str(Path(uri).resolve()) if is_lite(uri) else uri,
        "eval_set": str(Path(options.eval_set).resolve()) if options.eval_set else None})


def run_limit(options: ServeOptions) -> int | None:
    """How many flow runs `situate serve` runs at once: one on a Milvus Lite file, so that runs
    due at the same moment never open it together (the others stay scheduled until it is free,
    then run in order); no limit with a Milvus server, which takes many clients."""
    return 1 if is_lite(options.milvus_uri) else None


@dataclass(frozen=True)
class Stopped:
    """How `situate serve` ended: the signal, and the flow runs it stopped in progress."""

    signal: str
    runs: int


def serve_deployments(options: ServeOptions) -> Stopped | None:
    """Register the deployments with the Prefect API and run their flow runs until SIGTERM or
    Ctrl-C."""
    early = _EarlySignals()
    from prefect.settings import PREFECT_API_URL

    cfg = resolve_paths(options)
    check_serve_options(cfg)
    url = PREFECT_API_URL.value()  # from the environment or the active Prefect profile
    if not url:
        raise InputError("situate serve needs a running Prefect server: start one with `prefect "
                         "server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api")
    _check_api(url)
    if cfg.credentials_block:  # each run reads it where it runs; that it exists is checked now
        from situate.flows import read_block

        read_block(cfg.credentials_block, secrets=False)
    limit = run_limit(cfg)
    note = (f"runs use the Milvus Lite file {cfg.milvus_uri}, which admits one process at a "
            "time: they run one after another (with a Milvus server URI they run together)"
            if limit == 1 else None)
    return serve(build_deployments(cfg), limit=limit, note=note, received=early.received)


def check_serve_options(cfg: ServeOptions) -> None:
    """What every run would fail on, said once as `serve` starts rather than by each run: the
    corpus and evaluation set, the options both flows check (building them checks them), the
    schedules."""
    from prefect.client.schemas.schedules import CronSchedule

    from situate.tasks.retrieval.metrics import load_eval_set

    if not is_source(cfg.corpus) and not Path(cfg.corpus).exists():
        raise InputError(f"corpus not found: {cfg.corpus} (every ingest run re-reads it: give a "
                         "pre-chunked .json, a .jsonl of documents, or a directory)")
    deployment_options(cfg)
    if cfg.eval_set:
        load_eval_set(cfg.eval_set)
    for flag, cron in (("--ingest-cron", cfg.ingest_cron), ("--evaluate-cron", cfg.evaluate_cron)):
        try:
            CronSchedule(cron=cron)
        except ValueError:
            raise InputError(f"{flag} {cron!r} is not a cron schedule: give five fields, minute "
                             "hour day month weekday, e.g. '0 * * * *' (hourly)") from None


class _EarlySignals:
    """SIGTERM or Ctrl-C while `serve` starts (imports, registration: seconds) is noted, and the
    command then stops before running anything; a second one stops it at once."""

    def __init__(self) -> None:
        import signal
        import threading

        self.received: list[int] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if len(self.received) > 1:
            raise KeyboardInterrupt


def _check_api(url: str) -> None:
    """One line, not a traceback, when PREFECT_API_URL names no Prefect server."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        error = client.api_healthcheck()
    if error is not None:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"cannot reach the Prefect API at {url} ({reason}): start a server with "
                         "`prefect server start`, or set PREFECT_API_URL to a running one")


# --- serving until stopped ------------------------------------------------------------------------

# On SIGTERM or Ctrl-C. A run that has just finished gets FINISHING_SECONDS for its process to
# exit by itself (Prefect's runner would otherwise record it Cancelled over its Completed). The
# runner then cancels the others; their processes get KILL_AFTER_SECONDS to stop on its SIGTERM
# before they are killed; and the runner gets STOP_BUDGET_SECONDS in all to wind down, after which
# what is left of it is abandoned and the runs it held are recorded Crashed.
FINISHING_SECONDS = 1.5
KILL_AFTER_SECONDS = 2.5
STOP_BUDGET_SECONDS = 6.0
STOPPED_MESSAGE = ("situate serve stopped while this run was in progress; what it did is kept, "
                   "and the next run goes on from there")


def serve(deployments: list[Any], limit: int | None, note: str | None = None,
          received: list[int] | None = None) -> Stopped | None:
    """Prefect's `serve`, with a stop that is quick and leaves no run `Running`.

    Prefect 3.8.8's runner stops badly on a signal. On SIGTERM its handler calls the async
    `Runner.stop` without awaiting it and raises SystemExit inside the event loop: the process
    exits at once with a traceback, and the run in progress goes on without its runner, shown
    Running for good. On Ctrl-C the runner exits without cancelling its runs (the same, without
    the traceback). Here both signals set an event, and the runner is stopped with its own
    `astop`, which cancels each run in progress as a cancellation from the UI does: the run's
    process is told and terminated, and the run recorded Cancelled. Each step is bounded (see
    above); whatever a run left behind is killed with `situate serve`. `received`: signals
    that came before (then nothing is run).
    """
    import asyncio

    from prefect.runner import Runner

    runner = Runner(limit=limit, pause_on_shutdown=True)
    for deployment in deployments:
        runner.add_deployment(deployment)
    prefect_internals.display_serve_start(deployments)
    runner_log = logging.getLogger("prefect.runner")
    waiting = _SayWaitingOnce()
    runner_log.addFilter(waiting)
    if note:
        runner_log.info(note)
    try:
        return asyncio.run(_run_until_signal(runner, [] if received is None else received))
    finally:
        runner_log.removeFilter(waiting)


class _SayWaitingOnce(logging.Filter):
    """The runner logs 'N scheduled runs skipped (at capacity)' on every poll while a run waits
    for the one before it (every 10 s of a long ingest): said once per wait, and why."""

    def __init__(self) -> None:
        super().__init__()
        self.said = ""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "skipped (at capacity)" not in message:
            return True
        if message == self.said:
            return False
        self.said = message
        record.msg, record.args = "%s; each starts when the run before it ends", (message,)
        return True


async def _run_until_signal(runner: Any, received: list[int]) -> Stopped | None:
    import asyncio
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int, frame: object = None) -> None:
        received.append(signum)
        loop.call_soon_threadsafe(stop.set)

    prefect_internals.set_runner_sigterm(runner, on_signal)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if received:  # stopped while starting: nothing has run
            return Stopped(signal.Signals(received[0]).name, 0)
        serving = asyncio.create_task(runner.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():  # the runner ended by itself: its error, if any, is the command's
            stopping.cancel()
            serving.result()
            return None
        held = prefect_internals.runs_in_hand(runner)
        finished = await _let_finished_runs_exit(runner, held)
        killer = loop.call_later(KILL_AFTER_SECONDS, _kill_children)
        try:
            await asyncio.wait_for(_stop_runner(runner, serving), STOP_BUDGET_SECONDS)
        except TimeoutError:
            await _abandon(serving)
        finally:
            killer.cancel()
        held |= prefect_internals.runs_in_hand(runner)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _kill_children()
    await _close_records(held - finished)
    return Stopped(signal.Signals(received[0]).name, len(held - finished))


async def _finished(flow_run_ids: set[Any]) -> set[Any]:
    """Those of these runs in a final state (a run that cannot be read counts as in progress)."""
    from prefect.client.orchestration import get_client

    out = set()
    async with get_client() as client:
        for run_id in flow_run_ids:
            try:
                state = (await client.read_flow_run(run_id)).state
            except Exception:  # noqa: BLE001
                continue
            if state is not None and state.is_final():
                out.add(run_id)
    return out


async def _let_finished_runs_exit(runner: Any, held: set[Any]) -> set[Any]:
    """Wait (at most FINISHING_SECONDS) for the processes of runs that have already finished to
    exit: Prefect's runner cancels every run whose process is still there, and records it
    Cancelled with `force`, over a Completed state. Returns the ids of those finished runs."""
    import asyncio

    finished = await _finished(held) if held else set()
    deadline = asyncio.get_running_loop().time() + FINISHING_SECONDS
    while finished & prefect_internals.runs_in_hand(runner) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    return finished


async def _stop_runner(runner: Any, serving: Any) -> None:
    """Prefect's own stop: cancel the runs in progress, stop polling, pause the schedules."""
    import asyncio

    if not runner.started:  # stopped while registering: nothing runs yet
        await _abandon(serving)
        return
    await runner.astop()
    await asyncio.shield(serving)


async def _abandon(serving: Any) -> None:
    """The runner did not wind down within the budget: cancel what is left of it, quietly."""
    import asyncio

    serving.cancel()
    try:
        await asyncio.wait_for(serving, 2.0)
    except BaseException:  # noqa: BLE001 - cut off on purpose; runs are re-checked after
        pass


def _kill_children() -> None:
    """Whatever a run left behind (its process, a model process) ends with `situate serve`."""
    from situate.core.processes import stop_process_tree

    stop_process_tree(2.0)


async def _close_records(flow_run_ids: set[Any]) -> None:
    """Leave nothing of these runs shown in progress: a run not final by now (its process was
    killed before it or the runner could say so) is recorded Crashed, and the task runs a killed
    process left Running take their flow run's end (Cancelled or Crashed)."""
    if not flow_run_ids:
        return
    from prefect.client.orchestration import get_client
    from prefect.client.schemas import filters as f
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled, Crashed

    open_tasks = f.TaskRunFilter(state=f.TaskRunFilterState(type=f.TaskRunFilterStateType(
        any_=[StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING])))
    async with get_client() as client:
        for run_id in flow_run_ids:
            try:
                run = await client.read_flow_run(run_id)
                end = Cancelled if run.state is not None and run.state.is_cancelled() else Crashed
                if run.state is None or not run.state.is_final():
                    await client.set_flow_run_state(run_id, Crashed(message=STOPPED_MESSAGE),
                                                    force=True)
                tasks = await client.read_task_runs(
                    flow_run_filter=f.FlowRunFilter(id=f.FlowRunFilterId(any_=[run_id])),
                    task_run_filter=open_tasks)
                for task in tasks:
                    await client.set_task_run_state(task.id, end(message=STOPPED_MESSAGE),
                                                    force=True)
            except Exception:  # noqa: BLE001 - one run's record must not keep the others
                continue
