"""Starting a one-off `situate` command's flow run: each step here exists to make a run start
sooner, print less noise or end cleanly, and says which.

The CLI calls `configure_process` first, then `launch_ingest` or `launch_evaluate`; deployment
runs call the flows directly and need none of this. In order, because each step is slower than
the one before: the options (checked as they were built, before Prefect is imported), the input
(read once, here; the flow run takes it), the model's load (seconds, in its own process), then,
the input being good, Prefect's temporary server (started in a thread: the longest step) while
the store opens in the background.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from situate.core.errors import CollectionNotFound
from situate.core.uri import is_missing_lite_file
from situate.pipeline.ingest_report import IngestPlan, IngestSummary
from situate.pipeline.options import EvaluateOptions, IngestOptions, Options
from situate.pipeline.resources import Resources, provided
from situate.tasks.retrieval.evaluation import Evaluation

if TYPE_CHECKING:
    from situate.flows.prefect_internals import EarlyServer

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
    # The tokenizers' own thread pool warns when the process forks (Prefect's server does); the
    # model's process, which never forks, turns it on (`local.MODEL_TOKENIZERS_PARALLELISM`).
    "TOKENIZERS_PARALLELISM": "false",
    # No child interpreter puts the working directory first on its import path: Prefect starts
    # its temporary server as `python -m uvicorn`, which would import a `uvicorn.py` planted in
    # the folder the command runs in (often the corpus: `cd clone && situate ingest .`).
    "PYTHONSAFEPATH": "1",
    # gRPC (Milvus Lite's client, opening the store meanwhile) logs `Other threads are currently
    # calling into gRPC, skipping fork() handlers` when Prefect's server is forked; its fork
    # handlers are for children that go on using gRPC, and every child here runs a new program.
    "GRPC_ENABLE_FORK_SUPPORT": "false",
    # The temporary server writes the events it receives every this many seconds (Prefect's
    # default: 5; an empty queue costs nothing); the command waits for the last write before it
    # stops the server (`wait_until_recorded`).
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "0.2",
}

# How long to wait, after a flow, for the temporary server to record what the run sent (past it,
# the server is asked to shut down, Prefect's way, instead of being killed).
SETTLE_SECONDS = 10.0
# The event sent last, written once every event of the run before it is.
RECORDED_EVENT = "situate.run.recorded"


def configure_process() -> None:
    """Environment defaults before Prefect is imported, and the collector kept off the objects
    every command loads: a one-off command loads several hundred thousand long-lived objects,
    and the interpreter's final collections would walk them all for about a second after the
    work is done (frozen objects are left out; registered first, this runs after every other
    exit handler)."""
    import atexit

    from situate.tasks.embedders import local

    if "TOKENIZERS_PARALLELISM" not in os.environ:  # off here, on in the model's process
        local.MODEL_TOKENIZERS_PARALLELISM = "true"
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    atexit.register(gc.freeze)


def launch_ingest(options: IngestOptions) -> IngestSummary | IngestPlan:
    """Check, warm up, then run the ingest flow; returns its summary.

    A dry run is planned here, without a flow run (`plan.plan_run`): no Prefect server, no
    model, no store or cache created; it returns the plan (and writes it to `json_out`).
    """
    from situate.tasks.sources.base import is_source

    resources = Resources()
    server: TemporaryServerStart | None = None
    try:
        if options.credentials_block and is_source(options.corpus):
            # The block is read from the Prefect API: the temporary server's (PREFECT_HOME's
            # database) unless PREFECT_API_URL names one, so it starts first.
            server = TemporaryServerStart()
            server.started.wait()
        if options.dry_run:
            from situate.pipeline.plan import plan_run

            plan = plan_run(options, resources)
            plan.write_json(options.json_out)
            return plan
        if is_missing_lite_file(options.milvus_uri):  # surely a new collection: load the model
            resources.embedders.get(options.embedder, options.runtime())
        from situate.tasks.corpus.load import scan_corpus

        resources.scan = scan_corpus(options.corpus, options.chunk_size, options.chunk_overlap,
                                 code_chunks=options.code_chunks,
                                 follow_links=options.follow_links, cache_dir=options.cache_dir,
                                 credentials_block=options.credentials_block)
        if resources.scan.sync is not None:
            # A source, synced: the flow reads its mirror, so its run (parameters, UI, logs)
            # never holds the URL's credentials.
            from situate.tasks.sources.base import without_credentials

            options = options.model_copy(update={"corpus": without_credentials(options.corpus)})
        server = server or TemporaryServerStart()  # the input is good: the slowest step next
        server.imported.wait()
        from situate.flows.ingest import ingest_flow  # the rest of Prefect comes with it

        def warm(store: Any) -> None:  # an existing collection loads no model unless it must
            if not store.exists(options.collection):
                resources.embedders.get(options.embedder, options.runtime())

        resources.open_in_background(options.milvus_uri, then=warm, cache_dir=options.cache_dir)
        server.started.wait()
        summary: IngestSummary | IngestPlan = run_flow(
            ingest_flow, ("situate", "ingest", f"collection:{options.collection}"), options,
            resources)
        return summary
    finally:
        resources.close(kill_models=True)


def evaluation_text(result: Evaluation) -> str:
    """What `situate evaluate` prints: Pass@k and latency per mode, then what every mode missed
    (`situate.tasks.retrieval.report.summary_text`)."""
    from situate.tasks.retrieval.report import summary_text

    return summary_text(result)


def launch_evaluate(options: EvaluateOptions) -> Evaluation:
    """Check, warm up (the store and the first collection's own model), then run the evaluate
    flow. Several collections, comma-separated, are compared in one chart."""
    names = options.names
    resources = Resources()
    try:
        from situate.tasks.retrieval.metrics import load_eval_set

        resources.eval_set = load_eval_set(options.eval_set)  # read once; a bad one fails here
        # Nothing to evaluate: said before Prefect starts.
        CollectionNotFound.unless_lite_file(names[0], options.milvus_uri)
        server = TemporaryServerStart()
        server.imported.wait()
        from situate.core.settings import get_settings
        from situate.flows.evaluate import evaluate_flow  # the rest of Prefect comes with it

        def warm(store: Any) -> None:
            if options.modes != ["bm25"] and store.exists(names[0]):
                from situate.api.retriever import query_runtime

                info = store.describe(names[0])
                resources.embedders.get(info.embedder or get_settings().embedder,
                                        query_runtime(info, options.backend, options.device))

        resources.open_in_background(options.milvus_uri, then=warm)
        server.started.wait()
        evaluation: Evaluation = run_flow(
            evaluate_flow, ("situate", "evaluate", *(f"collection:{n}" for n in names)), options,
            resources)
        return evaluation
    finally:
        resources.close(kill_models=True)


def run_flow(flow: Any, tags: tuple[str, ...], options: Options, resources: Resources) -> Any:
    """Run `flow` on `options` with the command's `resources`, under the deployments' tags (so
    the UI filters CLI runs the same way), and return its result; its exception, if it failed,
    is raised after the temporary server has recorded the run (see `wait_until_recorded`)."""
    from prefect import tags as prefect_tags

    from situate.flows import prefect_internals
    from situate.flows.signals import take_over_flow_run_sigterm

    start_temporary_server()
    take_over_flow_run_sigterm()
    gc.freeze()  # what is loaded by now lives to the end: keep the collector off it
    with provided(resources), prefect_tags(*tags), without_heartbeats():
        state = flow(options, return_state=True)
    prefect_internals.kill_at_exit(wait_until_recorded(state.state_details.flow_run_id))
    return state.result()


@contextmanager
def without_heartbeats() -> Iterator[None]:
    """No flow-run heartbeats on the temporary server. Heartbeats let a server's automations mark
    a run whose process died as crashed; the temporary server runs no automations
    (`prefect_internals.TEMPORARY_SERVER_ENV`) and ends with the command. Prefect's heartbeat
    thread sleeps in steps of a second and the run waits for it to end: up to a second at the
    end of every command. A configured server keeps them."""
    from situate.flows import prefect_internals

    if prefect_internals.temporary_server() is None:
        yield
        return
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


class TemporaryServerStart:
    """Prefect's temporary server for a one-off run, started in a thread of its own once the
    command's input is checked: the longest step before a flow run can begin. Prefect's server
    module takes seconds to import here and its process seconds more to answer; meanwhile the
    command's own thread imports the flow, opens the store and the model loads.

    `imported` is set once Prefect's server module is imported (the command imports the rest of
    Prefect after it: two threads importing one package at once can each find a module of the
    other half-initialized), `started` once the server answers (or failed to start: the flow
    starts it again and reports the error). The thread then stays parked for good: the server's
    process is told to stop when the thread that started it ends (Linux's parent-death signal,
    `prefect_internals.start_temporary_server`), so that thread lives as long as the command."""

    def __init__(self) -> None:
        self.imported = threading.Event()
        self.started = threading.Event()
        threading.Thread(target=self._start, name="situate-temporary-server", daemon=True).start()

    def _start(self) -> None:
        from situate.flows import prefect_internals

        early = None
        try:
            needed = temporary_server_needed()
            if needed:
                # The server's process first: it imports Prefect's server while this one does.
                early = prefect_internals.EarlyServer()
                # Prefect's top level next: importing it sets up Prefect's logging, which then
                # says where the server starts, as when the flow starts it.
                from prefect import flow  # noqa: F401
                from prefect.server.api import server  # noqa: F401 - the slow import, here
        except Exception:  # noqa: BLE001 - the flow imports it again and reports any error
            needed = False
        finally:
            self.imported.set()
        try:
            if needed:
                start_temporary_server(early)
        finally:
            if early is not None:
                early.discard()
            self.started.set()
        if prefect_internals.temporary_server() is not None:
            threading.Event().wait()


def temporary_server_needed() -> bool:
    """Whether a flow run here would start Prefect's temporary server: no PREFECT_API_URL, and
    the temporary server allowed."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    return not PREFECT_API_URL.value() and bool(PREFECT_SERVER_EPHEMERAL_ENABLED.value())


def start_temporary_server(early: EarlyServer | None = None) -> None:
    """Start Prefect's temporary API server for a one-off run now (a flow run with no
    PREFECT_API_URL starts it on its first API call and waits for it), on the process `early`
    started for it if given. With a configured server: nothing."""
    from situate.flows import prefect_internals

    if prefect_internals.temporary_server() is not None or not temporary_server_needed():
        return
    try:
        prefect_internals.start_temporary_server(early)
    except Exception:  # noqa: BLE001 - the flow starts it again and reports any error properly
        pass


def wait_until_recorded(flow_run_id: Any, wait: Callable[[float], None] = time.sleep) -> bool:
    """Let the temporary server record everything the run sent before it stops at exit; True
    once it has (and the server may then be killed instead of shut down:
    `prefect_internals.kill_at_exit` says why).

    The client sends task-run states as events; the server's task-run recorder writes them as they
    arrive, and its event persister writes every event, in batches, in the order they came. So:
    send every pending event, wait (bounded) until the run's task runs stop changing in the
    database with none left Running (the recorder has caught up), then send one event more,
    `situate.run.recorded` (related to the flow run), and wait until the persister has written
    it: every event of the run came before it, so all are written too.
    """
    from situate.flows import prefect_internals

    if prefect_internals.temporary_server() is None or flow_run_id is None:
        return False
    try:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        deadline = time.monotonic() + SETTLE_SECONDS
        prefect_internals.send_events(SETTLE_SECONDS)
        previous = None
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                runs = client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
                snapshot = sorted((str(r.id), str(r.state_type), str(r.state and r.state.timestamp))
                                  for r in runs)
                running = any(str(r.state_type).endswith("RUNNING") for r in runs)
                if snapshot == previous and not running:
                    return _events_written(client, flow_run_id, deadline, wait)
                previous = snapshot
                wait(0.1)
    except Exception:  # noqa: BLE001 - not settled: the server stops Prefect's way; the run's outcome stands
        return False
    return False


def _events_written(client: Any, flow_run_id: Any, deadline: float,
                    wait: Callable[[float], None]) -> bool:
    """Send `RECORDED_EVENT` after the run's events and wait (until `deadline`) for the server to
    have written it."""
    from prefect.events import emit_event
    from prefect.events.filters import EventFilter, EventIDFilter

    from situate.flows import prefect_internals

    last = emit_event(RECORDED_EVENT, resource={"prefect.resource.id": f"situate.run.{flow_run_id}"},
                      related=[{"prefect.resource.id": f"prefect.flow-run.{flow_run_id}",
                                "prefect.resource.role": "flow-run"}])
    if last is None:
        return False
    prefect_internals.send_events(max(deadline - time.monotonic(), 0.0))
    written = EventFilter(id=EventIDFilter(id=[last.id]))
    while time.monotonic() < deadline:
        if client.read_events(filter=written, limit=1).events:
            return True
        wait(0.1)
    return False
