"""Where an unchanged corpus's time goes: `situate ingest` of a corpus already in the collection,
under pyinstrument, with another checkout of situate (today's code) and with this one.

A generated corpus (`bench_scale.write_corpus`) is ingested once into a `milvus-lite server`
with the loopback embeddings (384-d), then ingested again unchanged by each code under
`pyinstrument` (the command's own process: the scan, the flow run and its tasks; the store's
work shows as time waiting on its calls). Each profile is written as text beside the JSON.

    .venv/bin/python benchmarks/profile_noop.py 20000 --reference /tmp/ref35pkg \
        [--out benchmarks/results/profile-noop.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import _SITUATE_DIM, milvus, write_corpus  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("size", type=int, nargs="?", default=20_000)
    p.add_argument("--reference", required=True, help="a folder holding today's situate/")
    p.add_argument("--new", help="the same for the code measured (default: this checkout)")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "profile-noop.json"))
    args = p.parse_args()
    out = Path(args.out)
    result: dict = {"command": "benchmarks/profile_noop.py " + " ".join(sys.argv[1:]),
                    "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI(api_key="sk-profile") as fake:
        work = Path(tmp)
        corpus = work / "corpus.jsonl"
        write_corpus(corpus, args.size)
        script = work / "situate_dim.py"
        script.write_text(_SITUATE_DIM.format(dim=args.dim))
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "PYTHONPATH"))}
        base.update(OPENAI_API_KEY=fake.api_key, OPENAI_BASE_URL=fake.base_url + "/v1")
        for name, package in (("reference", args.reference), ("new", args.new)):
            env = {**base, **({"PYTHONPATH": package} if package else {})}
            with milvus(work / f"server-{name}", True) as (uri, _):
                env.update(SITUATE_MILVUS_URI=uri, SITUATE_CACHE_DIR=str(work / f"cache-{name}"),
                           PREFECT_HOME=str(work / f"prefect-{name}"))
                command = ["ingest", str(corpus), "--collection", "noop", "--context",
                           "structural", "--embedder", f"openai{args.dim}"]
                subprocess.run([sys.executable, str(script), *command], env=env, check=True,
                               capture_output=True)
                text = out.with_name(f"{out.stem}-{name}.txt")
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "pyinstrument", "-o",
                                str(text), str(script), *command], env=env, check=True,
                               capture_output=True)
                result["runs"][name] = {"wall_seconds": round(time.perf_counter() - t, 1),
                                        "profile": text.name}
                print(name, result["runs"][name], flush=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
