# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv/ on first use. CI and tests pin versions with
# constraints-ci.txt (a CPU torch); on a GPU machine `pip install -e .[ray]`
# gets the CUDA build instead.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.simeval-installed
# Isaac Lab 3.0 needs Python 3.12: its own venv, beside the 3.11 one (make isaaclab).
ISAAC_VENV  ?= .venv-isaaclab
ISAAC_PY    := $(ISAAC_VENV)/bin/python
ISAAC_STAMP := $(ISAAC_VENV)/.simeval-installed

export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER = 0
export RAY_USAGE_STATS_ENABLED = 0

.PHONY: demo test test-core test-isaaclab isaaclab lint bench bench-native bench-isaaclab clean

$(STAMP): pyproject.toml constraints-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints-ci.txt torch
	$(PY) -m pip install --quiet -c constraints-ci.txt -e ".[test,libs]"
	touch $@

# pyenv's Python 3.12 (else python3.12 on PATH); isaaclab==3.0.0 brings torch 2.11 (PyPI's CUDA build, ~7 GB).
$(ISAAC_STAMP): pyproject.toml constraints-isaaclab.txt
	rm -rf $(ISAAC_VENV)
	PY312=$$(tools/find-python312) && $$PY312 -m venv $(ISAAC_VENV)
	$(ISAAC_PY) -m pip install --quiet --upgrade pip
	$(ISAAC_PY) -m pip install --quiet -c constraints-isaaclab.txt "isaaclab==3.0.0" -e ".[test]"
	touch $@

isaaclab: $(ISAAC_STAMP)

demo: $(STAMP)
	$(PY) -m simeval.launch.demo

# Two jobs at once: the Isaac Lab venv (mostly downloads and unpacking) builds beside the core venv,
# then tests/isaac_lab runs beside the core suite (which waits on Docker builds and Slurm jobs much of
# the time). Their progress lines interleave in the log; each prints its own summary.
test:
	$(MAKE) -j2 test-core test-isaaclab

test-core: $(STAMP) lint
	$(PY) -m pytest -q --durations=15

# RAY_ADDRESS=local: its Ray backend starts a cluster of its own, never joins one that a `ray start` of the
# core suite (beside it in `make test`) or of anyone else on the machine left in /tmp/ray/ray_current_cluster.
test-isaaclab: $(ISAAC_STAMP)
	RAY_ADDRESS=local $(ISAAC_PY) -m pytest -q --durations=5 tests/isaac_lab

lint: $(STAMP)
	$(VENV)/bin/ruff check simeval tests benchmarks examples

bench: $(STAMP)
	$(PY) benchmarks/bench_evaluator.py

bench-native: $(STAMP)
	$(PY) benchmarks/bench_native.py

bench-isaaclab: $(ISAAC_STAMP)
	$(ISAAC_PY) benchmarks/bench_isaaclab.py

clean:
	rm -rf $(VENV) $(ISAAC_VENV) .pytest_cache
