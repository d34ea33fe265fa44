# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 6006
LOGDIR ?= sample_logs

.PHONY: venv demo test lint typecheck unit bench clean

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

# The PyTorch Profiler tab (torch-tb-profiler) sits beside ours; it is optional: when it
# cannot be installed, the demo still starts, with our tab only.
demo: venv
	@$(PY) -c "import torch_tb_profiler" 2>/dev/null || $(PY) -m pip install -q torch-tb-profiler \
		|| echo "warning: torch-tb-profiler could not be installed; no PyTorch Profiler tab"
	@$(VENV)/bin/tb-kineto-insights doctor || true
	@echo "Open http://127.0.0.1:$(PORT)/#kineto_insights"
	$(VENV)/bin/tensorboard --logdir $(LOGDIR) --host 127.0.0.1 --port $(PORT)

lint: venv
	$(VENV)/bin/ruff check tb_kineto_insights tests scripts benchmarks
	$(VENV)/bin/ruff format --check tb_kineto_insights tests scripts benchmarks

typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(VENV)/bin/pytest -q

test: lint typecheck unit

bench: venv
	$(PY) benchmarks/bench_reader.py
	$(PY) benchmarks/bench_plugin.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
