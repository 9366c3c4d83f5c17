#!/usr/bin/env bash
# Codebase Pass@k through the product's commands, for one tree: ./compare_quality.sh TREE OUTDIR
set -euo pipefail
tree=$1; out=$2
mkdir -p "$out"; rm -rf "$out/state"
export SITUATE_MILVUS_URI=$out/state/m.db SITUATE_CACHE_DIR=$out/state/cache SITUATE_RESULTS_DIR=$out/state/results
export PREFECT_HOME=$out/state/prefect
cd "$tree"
/usr/bin/time -f "%e s ingest" .venv/bin/situate ingest data/benchmarks/codebase/codebase_chunks.json --collection codebase > "$out/ingest.txt" 2> "$out/ingest.err"
/usr/bin/time -f "%e s evaluate" .venv/bin/situate evaluate data/benchmarks/codebase/evaluation_set.jsonl --collection codebase --json "$out/eval.json" > "$out/eval.txt" 2> "$out/eval.err"
tail -1 "$out/ingest.err"; tail -1 "$out/eval.err"
python3 -c "import json;d=json.load(open('$out/eval.json'));print(json.dumps(d['pass_at_k']))"
