# The two commands a new user needs: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch first and pinned: the CPU build on this machine's disk; a plain `torch` pulls a CUDA build.
TORCH  := torch==2.13.0

.PHONY: setup demo test test-fast typecheck lint bench bench-codebase clean links docs docs-serve docs-generate

$(BIN)/situate: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/situate

setup: $(BIN)/situate

demo: setup
	$(BIN)/situate ingest data/sample/corpus --collection sample
	$(BIN)/situate evaluate data/sample/eval.jsonl --collection sample --json data/results/sample.json

# The UI test drives Debian's headless Chromium against a local Prefect server: install it if missing.
test: setup
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/ruff check core pipeline flows cli tasks storage api integrations testing tests benchmarks docs
	$(BIN)/lint-imports
	$(MAKE) typecheck
	$(MAKE) docs
	$(BIN)/pytest -q -m "not soak"

# What `make test` leaves out to stay within CI's budget: the soak tier (pyproject.toml's
# markers), and every error exit in a flow run 20 times instead of 4.
test-soak: setup
	$(BIN)/pytest -q -m soak
	SITUATE_EXIT_ROUNDS=20 $(BIN)/pytest -q tests/test_error_exits.py tests/test_error_exits_b.py

# mypy checks the package as it is installed (`situate.core`, ...): the folders (setup.py's
# FOLDERS), linked under .typecheck/situate/. Strict on core/ and storage/ (pyproject.toml).
FOLDERS := $(shell sed -n 's/^FOLDERS = (\(.*\))/\1/p' setup.py | tr -d '",')
links:
	mkdir -p .typecheck/situate
	for d in $(FOLDERS); do ln -sfn ../../$$d .typecheck/situate/$$d; done

typecheck: setup links
	$(BIN)/mypy -p situate

# The docs site (mkdocs.yml): built strictly (a warning or a broken link fails), its API pages read
# from the folders linked as situate.* (`links`). `docs-generate` rewrites the pages made from the
# code; tests/test_docs.py fails while a committed one differs, and runs every code block.
DOCS_ENV := NO_MKDOCS_2_WARNING=1
docs: setup links
	$(DOCS_ENV) $(BIN)/mkdocs build --strict

docs-serve: setup links
	$(DOCS_ENV) $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

docs-generate: setup
	$(BIN)/python -m docs.tools.generate

# No Prefect server, no flow run, no real model: tests/conftest.py checks that none started.
test-fast: setup
	SITUATE_TESTS_FAST=1 $(BIN)/pytest -q -m "not slow"

bench: setup
	$(BIN)/python benchmarks/bench_ingest.py

# The README's headline figure: the codebase benchmark committed under data/benchmarks/codebase
# (Anthropic's contextual-retrieval guide, MIT), ingested with the offline defaults and evaluated.
CODEBASE := data/benchmarks/codebase
bench-codebase: setup
	$(BIN)/situate ingest $(CODEBASE)/codebase_chunks.json --collection codebase
	$(BIN)/situate evaluate $(CODEBASE)/evaluation_set.jsonl --collection codebase --json data/results/codebase.json

clean:
	rm -rf data/milvus.db data/cache data/results
