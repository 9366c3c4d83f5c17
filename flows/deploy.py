"""Deployments of the two flows, served by this process (`situate serve`): no work pool, no worker,
nothing that needs the internet. Prefect's scheduler creates runs from the cron schedules; this
process polls for them (and for runs triggered from the UI or `prefect deployment run`) and runs
each in a subprocess.

`prefect.yaml` describes the same two deployments for a process work pool and `prefect worker`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from situate.core.errors import InputError
from situate.core.uri import is_lite

DEPLOYMENT = "situate"
INGEST_CRON = "0 * * * *"
EVALUATE_CRON = "30 * * * *"


@dataclass(frozen=True)
class ServeConfig:
    """What the two deployments run with; the token stays in SITUATE_MILVUS_TOKEN, off the UI."""

    corpus: str
    collection: str
    eval_set: str | None = None
    context: str | None = None
    embedder: str | None = None
    milvus_uri: str | None = None
    prune: bool = True
    ingest_cron: str = INGEST_CRON
    evaluate_cron: str = EVALUATE_CRON
    name: str = DEPLOYMENT
    paused: bool = False


def _drop_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def build_deployments(cfg: ServeConfig) -> list[Any]:
    """The ingest (and, given an evaluation set, evaluate) deployments with their schedules.

    Ingest has a concurrency limit of 1: a slow run and the next scheduled one must not write the
    same collection at once (and a Milvus Lite file admits one process anyway).
    """
    from situate.flows.evaluate import evaluate_flow
    from situate.flows.ingest import ingest_flow
    from situate.storage.rows import validate_collection_name

    validate_collection_name(cfg.collection)
    tags = ["situate", f"collection:{cfg.collection}"]
    out = [ingest_flow.to_deployment(
        name=cfg.name, cron=cfg.ingest_cron, paused=cfg.paused, concurrency_limit=1,
        tags=[*tags, "ingest"],
        description=f"Incremental ingest of {cfg.corpus} into {cfg.collection}",
        parameters=_drop_none({"corpus": cfg.corpus, "collection": cfg.collection,
                               "context": cfg.context, "embedder": cfg.embedder,
                               "milvus_uri": cfg.milvus_uri, "prune": cfg.prune}))]
    if cfg.eval_set:
        out.append(evaluate_flow.to_deployment(
            name=cfg.name, cron=cfg.evaluate_cron, paused=cfg.paused, tags=[*tags, "evaluate"],
            description=f"Pass@k of {cfg.collection} on {cfg.eval_set}",
            parameters=_drop_none({"eval_set": cfg.eval_set, "collection": cfg.collection,
                                   "milvus_uri": cfg.milvus_uri})))
    return out


def resolve_paths(cfg: ServeConfig) -> ServeConfig:
    """Runs start in subprocesses, maybe from another directory: absolute paths, and the Milvus
    URI from settings when none is given."""
    from situate.core.settings import get_settings

    uri = cfg.milvus_uri or get_settings().milvus_uri
    if is_lite(uri):
        uri = str(Path(uri).resolve())
    return replace(cfg, corpus=str(Path(cfg.corpus).resolve()), milvus_uri=uri,
                   eval_set=str(Path(cfg.eval_set).resolve()) if cfg.eval_set else None)


def run_limit(cfg: ServeConfig) -> int | None:
    """How many flow runs `situate serve` runs at once: one on a Milvus Lite file, so that runs
    due at the same moment never open it together (the others stay scheduled until it is free,
    then run in order); no limit with a Milvus server, which takes many clients."""
    return 1 if is_lite(cfg.milvus_uri or "") else None


@dataclass(frozen=True)
class Stopped:
    """How `situate serve` ended: the signal, and the flow runs it stopped in progress."""

    signal: str
    runs: int


def serve_deployments(cfg: ServeConfig) -> Stopped | None:
    """Register the deployments with the Prefect API and run their flow runs until SIGTERM or
    Ctrl-C."""
    early = _EarlySignals()
    from prefect.settings import PREFECT_API_URL

    cfg = resolve_paths(cfg)
    check_serve_options(cfg)
    url = PREFECT_API_URL.value()  # from the environment or the active Prefect profile
    if not url:
        raise InputError("situate serve needs a running Prefect server: start one with `prefect "
                         "server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api")
    _check_api(url)
    limit = run_limit(cfg)
    note = (f"runs use the Milvus Lite file {cfg.milvus_uri}, which admits one process at a "
            "time: they run one after another (with a Milvus server URI they run together)"
            if limit == 1 else None)
    return serve(build_deployments(cfg), limit=limit, note=note, received=early.received)


def check_serve_options(cfg: ServeConfig) -> None:
    """What every run would fail on, said once as `serve` starts rather than by each run: the
    corpus and evaluation set, the options both flows check, the schedules."""
    from prefect.client.schemas.schedules import CronSchedule

    from situate.core.settings import get_settings
    from situate.flows.options import check_evaluate_options, check_ingest_options
    from situate.tasks.retrieval.metrics import load_eval_set

    if not Path(cfg.corpus).exists():
        raise InputError(f"corpus not found: {cfg.corpus} (every ingest run re-reads it: give a "
                         "pre-chunked .json, a .jsonl of documents, or a directory)")
    s = get_settings()
    check_ingest_options(cfg.collection, cfg.context or s.default_context(),
                         cfg.embedder or s.embedder, milvus_uri=cfg.milvus_uri or s.milvus_uri)
    if cfg.eval_set:
        check_evaluate_options(cfg.collection, "5,10,20", None)
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
    try:
        from prefect.flows import _display_serve_start_message

        _display_serve_start_message(*deployments)
    except ImportError:  # a Prefect release without it: the runner's own log says enough
        pass
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

    # Runner.start installs `self.handle_sigterm` for SIGTERM: ours, set on the instance.
    runner.handle_sigterm = on_signal
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
        held = _runs_in_hand(runner)
        finished = await _let_finished_runs_exit(runner, held)
        killer = loop.call_later(KILL_AFTER_SECONDS, _kill_children)
        try:
            await asyncio.wait_for(_stop_runner(runner, serving), STOP_BUDGET_SECONDS)
        except TimeoutError:
            await _abandon(serving)
        finally:
            killer.cancel()
        held |= _runs_in_hand(runner)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _kill_children()
    await _close_records(held - finished)
    return Stopped(signal.Signals(received[0]).name, len(held - finished))


def _runs_in_hand(runner: Any) -> set[Any]:
    """Ids of the flow runs this runner has started or is starting (Prefect 3.8's private
    bookkeeping, read defensively: if a release renames it, the runs are still cancelled by
    `astop`, only not re-checked afterwards)."""
    ids: set[Any] = set()
    manager = getattr(runner, "_process_manager", None)
    if manager is not None and hasattr(manager, "flow_run_ids"):
        ids |= set(manager.flow_run_ids())
    poller = getattr(runner, "_scheduled_run_poller", None)
    ids |= set(getattr(poller, "_submitting_flow_run_ids", ()) or ())
    return ids


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
    while finished & _runs_in_hand(runner) and asyncio.get_running_loop().time() < deadline:
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
    from situate.flows.startup import stop_process_tree

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
