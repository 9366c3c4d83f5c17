"""Start-up and shut-down plumbing of a one-off `situate` command: each step here exists to make a
run start sooner, print less noise or end cleanly, and says which.

The CLI calls `prepare_process` first, then one `launch_*` function per command; deployments run
the flows directly and need none of this.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# Quiet, offline one-off runs: set before Prefect is imported (a user's own values win).
PREFECT_DEFAULTS = {
    # No telemetry: the machine may have no network, and a failed send prints a warning.
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # A fresh PREFECT_HOME migrates its database on the first start (~20 s on 2 cores).
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    # The temporary server of a one-off run is never browsed: no UI build to serve.
    "PREFECT_UI_ENABLED": "false",
    # Block-type registration imports every installed Prefect collection (Dask's among them);
    # situate's one-off runs use no blocks, and `prefect server start` registers them for the UI.
    "PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
    "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
    "DO_NOT_TRACK": "1",
    # Models come from installed packages; a hub lookup would only time out.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # The tokenizers' own thread pool warns when the process forks (Prefect's server does).
    "TOKENIZERS_PARALLELISM": "false",
}

# How long to wait, after a flow, for the temporary server to record the task runs' last states
# (it is stopped right after, and a recorder cut off mid-write prints a traceback).
SETTLE_SECONDS = 10.0


def prepare_process() -> None:
    """Environment defaults before Prefect is imported, and the collector kept off the objects
    every command loads (see `_at_exit`)."""
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    _at_exit()


# After SIGTERM or Ctrl-C: how long the processes a run started get to end before they are killed,
# and how long a flow run gets to record itself as crashed before the process stops regardless.
STOP_GRACE_SECONDS = 2.0
STOP_DEADLINE_SECONDS = 3.0
_stopping = threading.Lock()
_command = ["situate"]  # the command being run, for the one line said on a stop


def install_stop_handlers(command: str) -> Callable[[], None]:
    """SIGTERM and Ctrl-C stop the command within seconds, with every process it started.

    Left alone, Ctrl-C raises in the main thread only, and Prefect turns a SIGTERM during a flow
    run into an exception that first waits for the run's worker threads: either way the
    embedding and writes already queued go on (minutes on a large corpus), and once the process
    ends, Prefect's temporary server and the model's process live on as orphans. Nothing a run
    has done is lost by stopping it at any point: every context is cached as its answer arrives,
    a document's rows are written in one upsert under deterministic ids, and the next run
    re-plans against what the collection holds. So: one line saying so, the process tree ended
    (terminate, then kill after a grace period) and an exit with 128 + the signal's number. During
    a flow run Prefect's own SIGTERM handling still runs first, so the run is recorded as crashed,
    but for at most STOP_DEADLINE_SECONDS (see `_bound_prefect_sigterm`). Returns what puts the
    previous handlers back (for callers of `main` inside another program, such as the tests).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.signal(sig, lambda signum, frame: _stop_now(command, signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    _command[0] = command

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _stop_now(command: str, signum: int) -> None:
    """Say it once, end the process tree, exit. Safe to call from any thread, more than once."""
    if not _stopping.acquire(blocking=False):
        return
    try:
        from situate.flows import progress

        progress.abandon()  # bars down first: the terminal gets its cursor back
        sys.stdout.flush()
        sys.stderr.write(f"situate {command}: interrupted ({signal.Signals(signum).name}); what was "
                         "done is kept: run the same command again to go on from there\n")
        sys.stderr.flush()
        stop_process_tree(STOP_GRACE_SECONDS)
    finally:
        os._exit(128 + signum)


def _bound_prefect_sigterm() -> None:
    """Give Prefect's SIGTERM handling of a flow run a deadline.

    Inside a flow run Prefect swaps SIGTERM for a handler that raises in the main thread, marks
    the run crashed and re-sends the signal to the previous handler (ours) once the run's task
    runner has let its worker threads finish. That last wait is unbounded. Wrapping Prefect's
    handler (a module attribute its engine reads when a run starts) starts a timer that stops
    the process after STOP_DEADLINE_SECONDS whatever the threads are doing. If a Prefect release
    renames it, runs still stop through Prefect, only without the deadline.
    """
    try:
        from prefect.utilities import engine as prefect_engine
    except ImportError:
        return
    original = getattr(prefect_engine, "_prefect_sigterm_handler", None)
    if original is None or getattr(original, "_situate_deadline", False):
        return

    def with_deadline(signum: int, frame: object) -> None:
        timer = threading.Timer(STOP_DEADLINE_SECONDS, _stop_now, args=(_command[0], signum))
        timer.daemon = True
        timer.start()
        original(signum, frame)

    with_deadline._situate_deadline = True  # type: ignore[attr-defined]
    prefect_engine._prefect_sigterm_handler = with_deadline


def stop_process_tree(grace: float) -> None:
    """End every descendant of this process: SIGKILL, since a terminated Prefect server prints
    tracebacks of the writes it was cut off in (its SQLite database survives a kill, as it must
    survive a power cut), and a model process or Dask worker holds nothing to save. `grace`
    bounds the wait for them to be gone."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=grace)


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
    return {base.__name__}.union(*(_error_names(sub) for sub in base.__subclasses__()))


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
    for x in [x for x in task_runs.filters if isinstance(x, _QuietConsoles)]:
        task_runs.removeFilter(x)
    for h in logging.getLogger().handlers:
        for x in [x for x in h.filters if isinstance(x, _QuietTaskRuns)]:
            h.removeFilter(x)
    if not verbose:
        task_runs.addFilter(_QuietConsoles())


def settings_from_flags(milvus_token: str | None = None, results_dir: str | None = None,
                        cache_dir: str | None = None) -> Any:
    """Flags that say where state lives or carry a secret go through settings (the environment),
    never flow parameters, which the Prefect UI shows."""
    from situate.core.settings import get_settings

    for value, var in ((milvus_token, "SITUATE_MILVUS_TOKEN"), (results_dir, "SITUATE_RESULTS_DIR"),
                       (cache_dir, "SITUATE_CACHE_DIR")):
        if value:
            os.environ[var] = value
    get_settings.cache_clear()
    return get_settings()


# --- starting sooner ------------------------------------------------------------------------------

def load_model_early(milvus_uri: str, embedder: str) -> None:
    """Start loading the embedding model now when the collection is surely new (no Milvus Lite
    file yet): a local model loads in a process of its own, so the load overlaps Prefect's
    import, the temporary server's start and the first contexts. Call before importing Prefect."""
    from situate.core.uri import is_missing_lite_file
    from situate.tasks.embedders.base import get_embedder

    if is_missing_lite_file(milvus_uri):
        get_embedder(embedder)


def open_store_early(milvus_uri: str, token: str, embedder_for: Callable[[Any], str | None],
                     create: bool = False) -> None:
    """Open the store in a background thread (it takes a second; the flow finds it open) and
    start loading the model `embedder_for(store)` names, if any.

    Call once the input is validated (bad input must not create a Milvus Lite file); a file that
    does not exist yet is opened, so created, only with `create` (ingest).
    """
    from situate.core.uri import is_missing_lite_file
    from situate.storage.milvus import open_store
    from situate.tasks.embedders.base import get_embedder

    if not create and is_missing_lite_file(milvus_uri):
        return

    def run() -> None:
        try:
            spec = embedder_for(open_store(milvus_uri, token))
            if spec:
                get_embedder(spec)
        except Exception:  # the flow opens it again and reports any error properly
            pass

    threading.Thread(target=run, daemon=True).start()


def start_temporary_server() -> None:
    """Start Prefect's temporary API server for a one-off run, while the model loads.

    A flow run with no PREFECT_API_URL starts Prefect's `SubprocessASGIServer` on its first API
    call and waits for it (seconds). Starting that same singleton here, before the flow, overlaps
    its start with the embedding model's load. With a configured server: nothing.
    """
    if _temporary_server() is not None:
        return
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return
    try:
        from prefect.server.api.server import SubprocessASGIServer

        SubprocessASGIServer().start()
    except Exception:  # the flow starts it again and reports any error properly
        pass


def _temporary_server() -> Any:
    """The running temporary server of this process, if Prefect started one."""
    import sys

    server_module = sys.modules.get("prefect.server.api.server")
    if server_module is None:
        return None
    instances = getattr(server_module.SubprocessASGIServer, "_instances", {})
    return next((s for s in instances.values() if getattr(s, "running", False)), None)


# --- running a flow -------------------------------------------------------------------------------

def run_flow(flow: Any, tags: tuple[str, ...], **parameters: Any) -> Any:
    """Run `flow` with `parameters` under the deployments' tags (so the UI filters CLI runs the
    same way) and return its result; its exception, if it failed, is raised after the temporary
    server has recorded the run (see `_settle`)."""
    from prefect import tags as prefect_tags

    _bound_prefect_sigterm()
    gc.freeze()  # what is loaded by now lives to the end: keep the collector off it
    with prefect_tags(*tags):
        state = flow(**parameters, return_state=True)
    _settle(state.state_details.flow_run_id)
    return state.result()


def _settle(flow_run_id: Any) -> None:
    """Let the temporary server record the run's last events before it stops at exit.

    The client sends task-run states as events; the server's task-run recorder writes them as they
    arrive. At exit the server is stopped (SIGTERM) right after the client's last events leave,
    and a recorder cut off in the middle of a write logs `Error flushing N events` with a
    CancelledError traceback. So: send every pending event now, then wait (bounded) until the
    run's task runs stop changing in the database, i.e. the recorder has caught up.
    """
    if _temporary_server() is None or flow_run_id is None:
        return
    try:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
        from prefect.events.worker import EventsWorker

        EventsWorker.drain_all(timeout=SETTLE_SECONDS)
        deadline = time.monotonic() + SETTLE_SECONDS
        previous = None
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                runs = client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
                snapshot = sorted((str(r.id), str(r.state_type), str(r.state and r.state.timestamp))
                                  for r in runs)
                running = any(str(r.state_type).endswith("RUNNING") for r in runs)
                if snapshot == previous and not running:
                    return
                previous = snapshot
                time.sleep(0.2)
    except Exception:  # noqa: BLE001 - settling is a courtesy; the run's outcome stands
        return


def stop_models() -> None:
    """The command is over: no local model is needed any more, and a failed run must not wait at
    exit for one to finish loading."""
    from situate.tasks.embedders.base import release_embedders

    release_embedders(kill=True)


def _at_exit() -> None:
    """Skip the collector's passes over Prefect's, Milvus's and the libraries' objects at exit.

    A one-off command loads several hundred thousand long-lived objects; the interpreter's final
    collections walk them all for about a second after the work is done. Frozen objects are left
    out of those walks (registered first, this runs after every other exit handler: logs are
    flushed and the temporary server stopped by then). Stores are closed explicitly.
    """
    import atexit

    from situate.storage.milvus import close_stores

    atexit.register(gc.freeze)
    atexit.register(close_stores)


# --- the commands -------------------------------------------------------------------------------

def launch_ingest(corpus: str, collection: str, *, task_runner: str = "threads",
                  dask_address: str | None = None, dry_run: bool = False,
                  **options: Any) -> dict[str, Any]:
    """Check, warm up, then run the ingest flow; returns its summary.

    In this order because each step is slower than the one before: options (instant, before
    Prefect is imported), the model's load (seconds, in its own process, started before Prefect's
    import), the corpus (parsed once, here; the flow takes it), the store and Prefect's server
    (opened in the background and started while the model loads).

    A dry run is planned here, without a flow run (`plan.plan_run`): no Prefect server, no
    model, no store or cache created; it returns the plan (and writes it to `json_out`).
    """
    from situate.core.settings import get_settings

    s = get_settings()
    uri = options.get("milvus_uri") or s.milvus_uri
    embedder = options.get("embedder") or s.embedder
    context = options.get("context") or s.default_context()
    from situate.flows.options import check_ingest_options

    check_ingest_options(collection, context, embedder, task_runner, dask_address, uri)
    if dry_run:
        from situate.flows.plan import plan_run, write_json

        json_out = options.pop("json_out", None)
        plan = plan_run(corpus, collection, **options)
        write_json(plan, json_out)
        return plan
    load_model_early(uri, embedder)

    from situate.flows.ingest import ingest_flow, make_task_runner, prepare_corpus

    runner = make_task_runner(task_runner, dask_address, uri)
    prepare_corpus(corpus, options.get("chunk_size") or s.chunk_size,
                   options.get("chunk_overlap") or s.chunk_overlap)
    # An existing collection skips the model unless documents changed: not warmed for it.
    open_store_early(uri, s.milvus_token.get_secret_value(),
                     lambda store: None if store.exists(collection) else embedder, create=True)
    start_temporary_server()
    return run_flow(ingest_flow.with_options(task_runner=runner),
                    ("situate", "ingest", f"collection:{collection}"),
                    corpus=corpus, collection=collection, **options)


def launch_evaluate(eval_set: str, collection: str, **options: Any) -> dict[str, Any]:
    """Check, warm up (the store and the first collection's own model), then run the evaluate
    flow. `collection` may name several, comma-separated: they are compared in one chart."""
    from situate.core.settings import get_settings
    from situate.flows.options import check_evaluate_options, split_collections

    names = split_collections(collection)  # an empty or repeated name is refused here
    for name in names:
        check_evaluate_options(name, options.get("k", "5,10,20"), options.get("modes"),
                               options.get("reranker") or get_settings().reranker)
    # Prefect comes with it (seconds): only once the options are found good.
    from situate.flows.evaluate import evaluate_flow, prepare_eval_set

    prepare_eval_set(eval_set)  # a bad one fails before any flow run starts; the flow takes it
    s = get_settings()
    uri = options.get("milvus_uri") or s.milvus_uri
    from situate.core.uri import is_missing_lite_file
    from situate.storage.milvus import open_existing_store

    if is_missing_lite_file(uri):  # nothing to evaluate: say so before Prefect starts a server
        open_existing_store(uri, names[0])  # raises the store's "run situate ingest first"
    open_store_early(uri, s.milvus_token.get_secret_value(),
                     lambda store: store.exists(names[0])
                     and (store.describe(names[0]).embedder or s.embedder))
    start_temporary_server()
    return run_flow(evaluate_flow, ("situate", "evaluate", *(f"collection:{n}" for n in names)),
                    eval_set=eval_set, collection=collection, **options)
