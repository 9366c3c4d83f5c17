"""What an ingest run reports, as types: the summary of a run (`IngestSummary`) and the plan of a
dry run (`IngestPlan`: the same fields, expected, with the plan's extras beside them). The table
artifact, the JSON and the console print are views of them. Imports no Prefect."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from situate.core.output import write_json
from situate.core.records import Usage


class Counts(BaseModel):
    """What a run did (or would do) to the corpus and the collection."""

    model_config = ConfigDict(extra="forbid")

    collection: str
    corpus: str
    context: str
    embedder: str
    documents: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted_documents: int = 0
    skipped_empty: int = 0
    skipped_large_files: int = 0
    skipped_chunks: int = 0
    cleaned_chars: int = 0
    chunks_written: int = 0
    chunks_deleted: int = 0
    rows: int = 0
    drift_rows: int = 0  # rows written or deleted since the collection was built or rebuilt
    drift_share: float = 0.0  # drift_rows over rows
    rebuilt: bool = False  # rebuilt from its own rows after the run (no context, no embedding)
    # Document files read per format ("pdf": 3), the units read ("pages": 120), and document
    # files skipped by reason ("encrypted PDF": 1).
    formats: dict[str, int] = {}
    units: dict[str, int] = {}
    skipped: dict[str, int] = {}


class Bill(BaseModel):
    """What the contexts cost (or would cost), as the provider reports usage: `Usage`'s
    counters under their own names."""

    model_config = ConfigDict(extra="forbid")

    contexts_generated: int = 0
    contexts_from_cache: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    prompt_cache_hit_ratio: float = 0.0
    cost_usd: float = 0.0

    @staticmethod
    def of(usage: Usage) -> dict[str, int | float]:
        """A bill's fields from a contextualizer's `Usage`: its counters, by their names."""
        return usage.report(Bill.model_fields)


class IngestSummary(Bill, Counts):
    """The summary of an ingest run: counts, bill, where and how the embedder ran, and seconds
    per stage."""

    device: str = ""  # cpu, cuda, ... ("" for an API's embedder, or nothing embedded)
    backend: str = ""  # torch, openvino, onnx, ... (api: at its provider)
    precision: str = ""  # fp32, fp16, int8

    seconds: dict[str, float] = {}
    # A source's sync (situate.tasks.sources): documents listed, fetched, not fetched (same
    # change marker), deleted from the source, failed...; and the failed ones, id -> why (the
    # first 20). Empty for a local corpus.
    source: dict[str, int] = {}
    failed: dict[str, str] = {}
    source_revision: str = ""  # what the source was at (a git source: the commit synced)

    def metrics(self) -> list[tuple[str, str]]:
        """(metric, value) rows: every field but the nested ones, then the stages' seconds."""
        nested = ("seconds", "alternatives", "assumptions", "formats", "units", "skipped",
                  "source", "failed")
        # A field with nothing to say is left out (an API embedder has no device or backend here).
        rows = [(k, str(v)) for k, v in self.model_dump().items() if k not in nested and v != ""]
        rows += [(f"files {k}", str(v)) for k, v in self.formats.items()]
        rows += [(f"read {k}", str(v)) for k, v in self.units.items()]
        rows += [(f"skipped {k}", str(v)) for k, v in self.skipped.items()]
        rows += [(f"source {k}", str(v)) for k, v in self.source.items()]
        rows += [(f"failed {k}", v) for k, v in self.failed.items()]
        return rows + [(f"seconds {k}", f"{v:.2f}") for k, v in self.seconds.items()]

    def table(self) -> list[dict[str, str]]:
        """The rows of the `ingest-summary-<collection>` table artifact."""
        return [{"metric": k, "value": v} for k, v in self.metrics()]

    def text(self) -> str:
        """What `situate ingest` prints."""
        return f"ingested {self.corpus} into {self.collection}:\n" + _aligned(self.metrics())

    def write_json(self, out: str | None) -> None:
        """The summary as JSON at `out`, when given."""
        write_json(self.model_dump(mode="json"), out)


class Alternative(Bill):
    """The same run in another mode of the provider (`--group-chunks`, `--batch`, both)."""

    flags: str = ""
    changed: int = 0
    estimated_seconds: float = 0.0


class PlanAssumptions(BaseModel):
    """What an estimate cannot know, assumed (see `situate.tasks.contexts.cost.Assumptions`)."""

    model_config = ConfigDict(extra="forbid")

    chars_per_token: float | None = None
    context_tokens: int = 100
    request_seconds: float = 0.5
    output_tokens_per_second: float = 100.0
    batch_round_seconds: float = 3600.0
    concurrency: int = 8


class StoreCapacity(BaseModel):
    """What the collection would take in the store's memory (situate.pipeline.capacity), and the
    warning when a Milvus Lite file would not fit under the limit."""

    model_config = ConfigDict(extra="forbid")

    store: str = "lite"  # lite (a Milvus Lite file) | server
    rows: int = 0
    dim: int | None = None  # None: not known without loading the model (384 assumed)
    lite_bytes: int = 0  # Milvus Lite's memory, measured per row
    server_bytes: int = 0  # a Milvus server, segments loaded, no mmap (documented figures)
    server_mmap_bytes: int = 0  # a Milvus server, raw data memory-mapped (situate's setting)
    disk_bytes: int = 0
    limit_bytes: int = 0
    limit_source: str = ""
    warning: str = ""

    def line(self) -> str:
        """The estimate in one line, for the dry run's text."""
        from situate.storage.capacity import human

        dim = f"{self.dim}-d" if self.dim else "384-d assumed"
        return (f"store memory (estimate, {self.rows:,} rows, {dim}): Milvus Lite "
                f"{human(self.lite_bytes)}; a Milvus server {human(self.server_bytes)} loaded, "
                f"{human(self.server_mmap_bytes)} with raw data memory-mapped "
                f"(limit: {human(self.limit_bytes)} {self.limit_source})")


class IngestPlan(IngestSummary):
    """A dry run's plan: the summary's fields with the expected figures, the mode it prices, the
    time its requests should take, the other modes and the assumptions."""

    dry_run: bool = True
    mode: str = "free"
    estimated_seconds: float = 0.0
    alternatives: dict[str, Alternative] = {}
    assumptions: PlanAssumptions = PlanAssumptions()
    store_memory: StoreCapacity | None = None
    source_note: str = ""  # a source's: how it was listed, what its sync would fetch

    def metrics(self) -> list[tuple[str, str]]:
        """The summary's rows, then each other mode's bill and time, then the assumptions."""
        rows = [(k, v) for k, v in super().metrics()
                if not k.startswith("seconds ") and k not in ("store_memory", "source_note")]
        for mode, alt in self.alternatives.items():
            for key in ("requests", "cost_usd", "estimated_seconds"):
                rows.append((f"{key} {mode} ({alt.flags or 'no flag'})", str(getattr(alt, key))))
        rows += [(f"assumed {k}", str(v)) for k, v in self.assumptions.model_dump().items()]
        if self.store_memory is not None:
            rows += [(f"store {k}", str(v)) for k, v in self.store_memory.model_dump().items()
                     if k not in ("warning", "limit_source") or v]
        return rows

    def text(self) -> str:
        """What `situate ingest --dry-run` prints: what the run would do, what it would cost in
        each mode, how long its context requests would take, and on which assumptions."""
        shown = [(k, v) for k, v in super().metrics()
                 if k not in ("dry_run", "store_memory", "source_note")
                 and not k.startswith(("seconds ", "assumed ", "requests ", "cost_usd ",
                                       "estimated_seconds "))]
        lines = [f"plan of ingesting {self.corpus} into {self.collection} (dry run: nothing "
                 "written, no request made):", _aligned(shown)]
        if self.alternatives:
            lines.append(f"the same run in the other modes (now {self.mode}):")
            for mode, alt in self.alternatives.items():
                ratio = f", x{alt.cost_usd / self.cost_usd:.2f}" if self.cost_usd else ""
                lines.append(f"  {mode:<14} {alt.flags or '(no flag)':<24} {alt.requests} "
                             f"requests, ${alt.cost_usd:.4f}{ratio}, "
                             f"~{duration(alt.estimated_seconds)}")
        a = self.assumptions
        if a.chars_per_token:
            lines.append(
                f"estimates: {a.chars_per_token:g} characters per token, contexts of "
                f"{a.context_tokens} tokens; a live request {a.request_seconds:g} s plus "
                f"{a.output_tokens_per_second:g} output tokens/s, {a.concurrency} at once "
                f"(~{duration(self.estimated_seconds)} for this run's requests); a round of "
                f"Message Batches {duration(a.batch_round_seconds)}")
        if self.source_note:
            lines.append(self.source_note)
        if self.store_memory is not None:
            lines.append(self.store_memory.line())
            if self.store_memory.warning:
                lines.append(f"warning: {self.store_memory.warning}")
        return "\n".join(lines)


def _aligned(rows: list[tuple[str, str]]) -> str:
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
