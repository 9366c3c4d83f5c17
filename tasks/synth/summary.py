"""What `situate synth` reports, as a type: the plan (what it would ask, and pay) and the run
(what it wrote, what it dropped and why, what it paid). The console and `--json` are views."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from situate.core.output import write_json

# What a summary reports of the generator's `Usage` (situate.core.records), by its counters' names.
BILLED = ("requests", "input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens",
          "cost_usd")


class SynthSummary(BaseModel):
    """A synth run, or with `dry_run` its plan."""

    model_config = ConfigDict(extra="forbid")

    generator: str
    corpus: str
    out: str
    dry_run: bool = False
    n: int = 0
    seed: int = 0
    documents: int = 0
    sampled: int = 0  # chunks (LLM) or sentences (held-out) chosen
    queries: int = 0  # lines of eval.jsonl
    dropped: dict[str, int] = {}
    answers_from_cache: int = 0  # already paid: read from the cache, not asked again
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    model: str = ""
    files_copied: int = 0
    files_edited: int = 0
    ingest_path: str = ""  # held-out: the corpus to ingest (the queries' sentences removed)

    def text(self) -> str:
        """What `situate synth` prints."""
        if self.dry_run:
            head = (f"plan of synth {self.corpus} -> {self.out} with {self.generator} (dry run: "
                    "nothing written, no request made):")
        else:
            head = f"synth {self.corpus} -> {self.out}/eval.jsonl with {self.generator}:"
        skip = {"generator", "corpus", "out", "dry_run", "dropped"}
        rows = [(k, str(v)) for k, v in self.model_dump().items() if k not in skip and v != ""]
        rows += [(f"dropped {k}", str(v)) for k, v in self.dropped.items()]
        width = max(len(k) for k, _ in rows)
        lines = [head, *(f"  {k.ljust(width)}  {v}" for k, v in rows)]
        if self.ingest_path and not self.dry_run:
            lines.append(f"next: situate ingest {self.ingest_path} --collection NAME (a scratch "
                         f"collection per configuration), then situate evaluate "
                         f"{self.out}/eval.jsonl --collection NAME")
        return "\n".join(lines)

    def plan_line(self) -> str:
        """One line said before anything is paid."""
        tokens = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return (f"synth plan: {self.sampled} chunks from {self.documents} documents, "
                f"{self.answers_from_cache} answered before (cached), {self.requests} requests "
                f"to {self.model or self.generator}, ~{tokens} "
                f"input and ~{self.output_tokens} output tokens, ${self.cost_usd:.4f}")

    def write_json(self, out: str | None) -> None:
        """The summary as JSON at `out`, when given."""
        write_json(self.model_dump(mode="json"), out)
