"""The measured pace of a server that costs nothing but time (a local OpenAI-compatible server,
Ollama): each run records how long its answers took, per server and model, and the next plan
times its requests with it (`situate ingest --dry-run`), where a paid service is timed by
assumptions. One small JSON file in the state directory; holds no key and no text."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from situate.tasks.contexts.engine.client import Timings
    from situate.tasks.contexts.engine.planning import Options

log = logging.getLogger("situate.contexts")
FILE = "llm-rates.json"


def _key(options: Options) -> str:
    return f"{options.provider}|{options.server}|{options.model}"


def record(state_dir: Path, options: Options, timings: Timings) -> None:
    """Keep a run's pace: answers per second of wall time (at the run's concurrency) and the
    mean latency of one answer. Runs of fewer than 4 answers say too little to keep."""
    if timings.requests < 4 or timings.ended <= timings.started:
        return
    path = state_dir / FILE
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        data = {}
    data[_key(options)] = {
        "requests": timings.requests,
        "wall_seconds": round(timings.ended - timings.started, 3),
        "seconds_per_request": round((timings.ended - timings.started) / timings.requests, 4),
        "latency_seconds": round(timings.seconds / timings.requests, 4),
    }
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    except OSError as e:  # a pace not kept costs a default estimate next time, nothing more
        log.warning("could not keep the measured rate in %s: %s", path, e)


def measured(state_dir: Path, options: Options) -> dict[str, Any] | None:
    """The last measured pace of this server and model; None when never measured here."""
    try:
        data = json.loads((state_dir / FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    entry = data.get(_key(options)) if isinstance(data, dict) else None
    return entry if isinstance(entry, dict) else None
