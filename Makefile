# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv/ on first use. CI and tests pin versions with
# constraints-ci.txt (a CPU torch); on a GPU machine `pip install -e .[ray]`
# gets the CUDA build instead.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.simeval-installed

export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER = 0
export RAY_USAGE_STATS_ENABLED = 0

.PHONY: demo test lint bench bench-native clean

$(STAMP): pyproject.toml constraints-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints-ci.txt torch
	$(PY) -m pip install --quiet -c constraints-ci.txt -e ".[test]"
	touch $@

demo: $(STAMP)
	$(PY) -m simeval.launch.demo

test: $(STAMP) lint
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check simeval tests benchmarks examples

bench: $(STAMP)
	$(PY) benchmarks/bench_evaluator.py

bench-native: $(STAMP)
	$(PY) benchmarks/bench_native.py

clean:
	rm -rf $(VENV) .pytest_cache
