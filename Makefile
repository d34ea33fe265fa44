# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 6006
LOGDIR ?= sample_logs

NODE ?= node
NPM ?= npm
# The Chromium the browser tests drive: yours when given (CHROMIUM=/path/to/chromium),
# else the first chromium / chromium-browser on PATH, else Debian's path (installed by
# browser-deps with apt-get when missing, after saying so).
CHROMIUM ?= $(or $(shell command -v chromium 2>/dev/null),$(shell command -v chromium-browser 2>/dev/null),/usr/bin/chromium)
FRONTEND_DEPS := frontend/node_modules/.package-lock.json

.PHONY: venv demo test test-plan lint typecheck unit quick capture-test bench bench-setup bench-peers clean frontend frontend-test browser-deps schema

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

# The demo needs the package and its runtime dependencies only (no test tools): a venv
# that `make test` later completes with the [dev] extra, or one it already made.
$(VENV)/.runtime: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

# A busy port is said in one line before anything is installed or started (TensorBoard
# would print a traceback per plugin loader after its own error). Checked when make reads
# this file, so that make's own "Error 1" line does not follow it; not under `make -n`.
ifneq ($(filter demo,$(MAKECMDGOALS)),)
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
ifeq ($(shell $(PYTHON) -c "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', $(PORT)))" 2>/dev/null || echo busy),busy)
$(error port $(PORT) on 127.0.0.1 is in use (another TensorBoard?): stop it, or run make demo PORT=6007)
endif
endif
endif

# The PyTorch Profiler tab (torch-tb-profiler) sits beside ours; it is optional: when it
# cannot be installed, the demo still starts, with our tab only. Its log is turned down
# to errors and its runs load PROFILER_LOADERS at a time (scripts/demo.py: all at once,
# on sample_logs, kept TensorBoard from answering for about a minute). The address is
# printed once TensorBoard answers it, last and framed.
PROFILER_LOADERS ?= 2
demo: $(VENV)/.runtime
	@$(PY) -c "import torch_tb_profiler" 2>/dev/null || $(PY) -m pip install -q torch-tb-profiler \
		|| echo "warning: torch-tb-profiler could not be installed; no PyTorch Profiler tab"
	@$(VENV)/bin/tb-kineto-insights doctor || true
	@$(PY) scripts/demo.py --logdir $(LOGDIR) --host 127.0.0.1 --port $(PORT) --profiler-loaders $(PROFILER_LOADERS)

lint: venv
	$(VENV)/bin/ruff check tb_kineto_insights tests scripts benchmarks
	$(VENV)/bin/ruff format --check tb_kineto_insights tests scripts benchmarks
	$(VENV)/bin/lint-imports

typecheck: venv
	$(VENV)/bin/mypy

# The whole suite, in parallel (pytest-xdist, one process per core); the 10 slowest tests
# are printed at the end.
PYTEST_WORKERS ?= auto
unit: venv
	KINETO_INSIGHTS_CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --durations=10

# The edit-test loop: lint, mypy and the unit tests on tiny hand-written traces (no real
# traces, browser or torch); about a minute.
quick: lint typecheck
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) -m "not real and not slow" -p no:cacheprovider

# Before `unit`: the frontend's own tests, and what the browser tests need. test-plan
# first says what will be installed (before anything is).
test: test-plan lint typecheck frontend-test browser-deps unit capture-test

test-plan:
	@echo "make test installs what is missing, then runs lint, mypy and the tests:"
	@echo "  - $(VENV)/: this package and its test tools (pip, from PyPI)"
	@echo "  - frontend/node_modules/: the frontend's build and test tools (npm ci), when node and npm are found"
	@echo "  - playwright for Python (pip), for the browser tests (not its browser download)"
	@echo "  - $(TORCH_VENV)/: $(TORCH_SPEC) (CPU build, about 1.1 GB installed) and this package, for the capture tests"
	@if [ -x "$(CHROMIUM)" ]; then \
		echo "  - Chromium: uses $(CHROMIUM) (nothing to install)"; \
	else \
		echo "  - Chromium: $(CHROMIUM) is missing: Debian's chromium package with apt-get"; \
		echo "    --no-install-recommends, as root or through sudo (its dependencies only, no"; \
		echo "    recommended packages). To use a Chromium you have instead:"; \
		echo "    make test CHROMIUM=/path/to/chromium"; \
	fi

# tb_kineto_insights.capture records with torch, which the package does not depend on:
# its tests run in a separate venv with the CPU build of torch (about 1.1 GB), where a
# missing torch fails them (KINETO_INSIGHTS_TORCH_TESTS=1) instead of skipping.
TORCH_VENV ?= .venv-torch
TORCH_SPEC ?= torch==2.13.0
# Where PyPI would give the CUDA build: TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_PIP_ARGS ?=
$(TORCH_VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(TORCH_VENV)/bin/python -m pip install -q $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	$(TORCH_VENV)/bin/python -m pip install -q -e . 'pytest>=7'
	touch $@

# Also the recording scripts' CPU runs (gloo, 2 ranks), which need torch as well.
capture-test: $(TORCH_VENV)/.installed
	KINETO_INSIGHTS_TORCH_TESTS=1 $(TORCH_VENV)/bin/pytest -q tests/test_capture.py
	KINETO_INSIGHTS_TORCH_TESTS=1 $(TORCH_VENV)/bin/pytest -q tests/test_record_scripts.py \
		-k "parses_without_gpu or cpu_gloo"

# ---------------------------------------------------------------- schema (docs/schema/)
# The JSON Schema of the summary, run view, diff and report, generated from the Structs
# of tb_kineto_insights/schema/ (committed; tests/test_schema.py checks it is current).
# frontend/src/types.ts is generated from it by `make frontend` (frontend/gen_types.mjs).
schema: venv
	$(PY) scripts/gen_schema.py

# ---------------------------------------------------------------- frontend (frontend/)
# The built files in tb_kineto_insights/static/ are committed (a pip install needs no
# Node); `make frontend` rebuilds them after a change in frontend/, and
# tests/test_frontend_build.py checks that they match a fresh build.

$(FRONTEND_DEPS): frontend/package.json frontend/package-lock.json
	cd frontend && $(NPM) ci --no-audit --no-fund
	touch $@

frontend: $(FRONTEND_DEPS)
	cd frontend && $(NODE) gen_types.mjs && $(NODE) build.mjs

# Type check and unit tests (Node's test runner on esbuild-compiled tests). Without
# Node it is skipped with a note, except under CI (KINETO_INSIGHTS_REQUIRE_SHARED=1).
# The $(MAKE) line runs even under `make -n` (as make does for recursive calls); the
# tools it would install are then absent, so it stays apart from the line that uses them.
frontend-test:
	@if command -v $(NODE) >/dev/null 2>&1 && command -v $(NPM) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory $(FRONTEND_DEPS); \
	fi
	@if command -v $(NODE) >/dev/null 2>&1 && command -v $(NPM) >/dev/null 2>&1; then \
		cd frontend && $(NODE) gen_types.mjs --check && ./node_modules/.bin/tsc -p tsconfig.json && $(NODE) build.mjs test; \
	elif [ "$$KINETO_INSIGHTS_REQUIRE_SHARED" = 1 ]; then \
		echo "frontend-test: node and npm are required (KINETO_INSIGHTS_REQUIRE_SHARED=1)" >&2; exit 1; \
	else \
		echo "frontend-test: skipped, node/npm not found (the committed bundle is used)"; \
	fi

# The browser tests (tests/browser/) drive Debian's Chromium with Playwright for Python;
# Playwright's own browser download is not used. Installs what is missing.
browser-deps: venv
	@$(PY) -c "import playwright" 2>/dev/null || $(PY) -m pip install -q 'playwright>=1.40'
	@if [ ! -x "$(CHROMIUM)" ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; \
		else echo "browser-deps: $(CHROMIUM) is missing and apt-get needs root: apt-get install chromium, or CHROMIUM=/path/to/chromium" >&2; exit 0; fi; \
		echo "browser-deps: $(CHROMIUM) is missing: installing Debian's chromium with apt-get --no-install-recommends (CHROMIUM=/path/to/chromium uses yours)"; \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; \
	fi

bench: venv
	$(PY) benchmarks/bench_reader.py
	$(PY) benchmarks/bench_plugin.py
	$(PY) benchmarks/bench_ranks.py
	$(PY) benchmarks/bench_runs.py

# ---------------------------------------------------------------- peers (benchmarks/compare_peers.py)
# HTA and the old PyTorch Profiler plugin live in their own environment, never in ours
# (setup.py). Pinned to the versions RESULTS.md was measured with; neither imports torch.
BENCH_VENV ?= .bench-venv
BENCH_PEERS := HolisticTraceAnalysis==0.5.0 torch-tb-profiler==0.4.3
BENCH_DATA ?= benchmarks/data

$(BENCH_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q $(BENCH_PEERS)
	touch $@

bench-setup: $(BENCH_VENV)/.installed

# Ours against both peers, median of 3 runs each, on the real GPT trace in $(BENCH_DATA)
# and the scaled traces made there; rewrites benchmarks/RESULTS.md.
bench-peers: venv bench-setup
	$(PY) benchmarks/compare_peers.py --repeat 3 --data-dir $(BENCH_DATA)

clean:
	rm -rf $(VENV) $(TORCH_VENV) $(BENCH_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache frontend/node_modules frontend/build
