#!/usr/bin/env python3
"""Mutation testing of the code that produces simeval's numbers (``make mutate``, ``make mutate-full``).

A mutant is the package with one small change (``<`` for ``<=``, ``-`` for ``+``, a number plus one,
``not`` added, a loop that never runs ...); the tests should fail on it (kill it). A mutant they pass
(a survivor) is a change to a number, or to a refusal, that no test notices. cosmic-ray makes the
mutants; this script decides where they run and which tests judge them:

1. **A copy.** The working tree (``git ls-files -co --exclude-standard``: tracked files and untracked
   files that git does not ignore) is copied to ``SCRATCH/tree`` (``.mutation/`` by default,
   gitignored). Mutants are written to the copy's file, one at a time, and the file restored after each;
   nothing in the working tree is ever written, so tests that others run against it are untouched.
2. **Where the tests import the mutant.** Each module's tests run from a script
   (``SCRATCH/tests/<module>.sh``) with cwd and ``PYTHONPATH`` the copy, so every process that imports
   simeval imports the copy ahead of the editable install: pytest, the launcher subprocesses tests
   start (``PYTHONPATH=REPO``, the copy's), process-backend children (``python -m simeval.backends.child``
   in the parent's cwd and environment, then ``sys.path`` set to the parent's: ``backends/host.py``) and
   Ray workers (of a cluster the test starts: ``RAY_ADDRESS=local``, never another session's). A canary
   checks it before any mutant runs: a module of ``simeval.worker`` that raises on import in the copy
   must fail a process-backend and a Ray round, from the child's pid, naming the copy's file.
3. **The tests that should kill each module's mutants** (``TARGETS``): its own tests first, then the
   Evaluator-level tests that run it on the thread, process and Ray backends; ``-x`` stops at the first
   failure. A baseline run of each module's script on the unmutated copy must pass; its slowest test sets
   the per-test timeout (pytest-timeout, so a test that hangs fails and its fixtures stop their processes)
   and its length the per-mutant one (past it the script's process group is killed; a timeout is a kill,
   as in cosmic-ray).
4. **Which mutants.** ``cosmic-ray init`` lists every mutant of the module; filters mark some skipped,
   as cosmic-ray's own filters do (``WorkDB.set_multiple_results`` with ``WorkerOutcome.SKIPPED``):
   the exclusions below, then (``--per-module N``) a seeded sample of N of the rest; ``--all`` runs all.
5. **The run.** Each mutant is applied with cosmic-ray's ``use_mutation`` (the mutant written, the
   file restored on the way out) and recorded in cosmic-ray's session database
   (``SCRATCH/sessions/<module>.sqlite``); the script is run here rather than by ``cosmic-ray exec`` so
   that each mutant is timed and a run can be interrupted (Ctrl-C, SIGTERM: the test processes are
   killed, the file restored) and resumed. ``SCRATCH/sessions/<module>.toml`` is the session's config
   for cosmic-ray's own commands too.
6. **A report**: per module the mutants, the excluded ones by reason, those run, killed (timeouts
   among them), survived, the score (killed / run) and the seconds per mutant; then every survivor
   (file:line, function, operator, diff). Printed, and written to ``SCRATCH/report.txt`` and
   ``SCRATCH/report.json`` (``--json`` prints the JSON instead).

Exclusions (each a mutant that cannot change a number, or that every test kills by construction):

* ``annotation``: every module here has ``from __future__ import annotations``, so annotations are
  strings never evaluated: ``int | None`` -> ``int & None`` is an equivalent mutant.
* ``type-only``: ``if TYPE_CHECKING:`` blocks import for the type checker only.
* ``message``: f-strings, ``%``/``str.format`` templates, the arguments of ``raise`` and of ``assert``'s
  message, logging/warnings/print calls: words for people, not numbers (whether a refusal happens is
  still mutated: its condition is outside the message).
* ``decorator``: the decorators here are ``@dataclass(frozen=..., eq=...)``, ``@property``,
  ``@classmethod`` and ``functools.lru_cache``: removing one breaks every use of the class (killed by
  construction: no information for a full test run), flipping ``frozen``/``eq`` or the cache size
  changes no number (equivalent).
* ``output``: a target may list the functions to mutate (``Target.functions``); ``simeval/report/comparison.py``
  lists the ones that compute numbers (its text, HTML page and plots live in other modules).
* ``pragma``: a line marked ``# pragma: no mutate`` (cosmic-ray's convention), for an equivalent mutant
  found in a run; say on the line why.

    .venv/bin/python tools/mutate.py --per-module 12 --seed 0   # make mutate
    .venv/bin/python tools/mutate.py --all                      # make mutate-full
    .venv/bin/python tools/mutate.py --modules stats,metrics --per-module 4
    .venv/bin/python tools/mutate.py --resume                   # finish an interrupted run, then report
    .venv/bin/python tools/mutate.py --report                   # the report of the last run
    .venv/bin/python tools/mutate.py --list                     # modules, tests, mutant counts

A survivor is reproduced by hand in the copy: ``cd .mutation/tree && cosmic-ray apply MODULE OPERATOR
OCCURRENCE`` (the report gives the three), then ``bash ../tests/<module>.sh``, then restore the file
from ``../sessions/<module>.orig.py``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import hashlib
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE_VENV = ".venv"
ISAAC_VENV = ".venv-isaaclab"


@dataclass(frozen=True)
class Stage:
    """One pytest session of a module's script: test files or node ids, in the order they run."""

    tests: tuple[str, ...]
    venv: str = CORE_VENV  # the script runs this venv's python; a stage of a missing venv is left out (a note)
    deselect: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """A module to mutate and the tests that should kill its mutants."""

    path: str
    stages: tuple[Stage, ...]
    functions: tuple[str, ...] | None = None  # only mutants inside these top-level functions (None: all)


# Per module: its own tests first (fast, in-process), then the Evaluator-level tests that run it on each
# backend (process children and Ray actors import the copy: see the module docstring).
TARGETS: dict[str, Target] = {
    "rollout": Target(
        "simeval/worker/rollout.py",
        (
            Stage(
                (
                    "tests/test_success.py",  # EpisodeTally/RoundTally on known patterns, thread + process
                    "tests/test_episode_info.py",  # values read at episode ends, across batches
                    "tests/test_episode_returns.py",  # returns and lengths against a bare loop (oracle)
                    "tests/test_direct_rollout.py",  # the direct loop's Episodes equal the Collector's
                    "tests/test_episodes.py",  # quotas, weights, seeds on the thread, process and Ray backends
                )
            ),
        ),
    ),
    "episode_ends": Target(
        "simeval/worker/episode_ends.py",
        (Stage(("tests/test_success.py", "tests/test_episode_info.py")),),
    ),
    "direct_rollout": Target(
        "simeval/worker/direct_rollout.py",
        (
            Stage(
                (
                    "tests/test_direct_rollout.py",  # episode for episode against the Collector
                    "tests/test_success.py::test_the_direct_rollout_gives_the_collectors_positions",
                    "tests/test_episode_returns.py",  # the native env's default loop against a bare loop
                    "tests/test_episodes.py",
                )
            ),
        ),
    ),
    "tensor_rollout": Target(
        "simeval/worker/tensor_rollout.py",
        (
            Stage(("tests/test_warp_env.py",)),  # the Warp env's tensor loop against the Collector and a bare loop
            # Its Isaac Lab half runs only under Isaac Lab (its own venv: make isaaclab), against the Collector
            # and the bare-loop oracle; left out (with a note) where that venv is missing.
            Stage(("tests/isaac_lab/test_tensor_rollout.py",), venv=ISAAC_VENV),
        ),
    ),
    "metrics": Target(
        "simeval/metrics.py",
        (
            Stage(
                (
                    "tests/test_metrics.py",  # mean/std and the bootstrap CI against NumPy and SciPy
                    "tests/test_episodes.py::test_quotas_follow_the_sb3_scheme",
                    "tests/test_episode_info.py::test_end_metrics_fractions_means_and_success_alias",
                    "tests/test_success.py::test_success_metrics_and_prefixed",
                    "tests/test_episode_returns.py",  # a round's mean return and its quotas against a bare loop
                )
            ),
        ),
    ),
    "perturb": Target(
        "simeval/envs/perturb.py",
        (
            Stage(("tests/test_conditions.py", "tests/test_suites.py")),
            # Perturb on an env that resets inside step (Isaac Lab) is tested only there.
            Stage(("tests/isaac_lab/test_isaaclab_conditions.py",), venv=ISAAC_VENV),
        ),
    ),
    "conditions": Target(
        "simeval/conditions.py",
        (Stage(("tests/test_conditions.py", "tests/test_suites.py")),),
    ),
    # simeval/stats/: one target per family's module (each with the tests of its numbers).
    "stats": Target("simeval/stats/intervals.py", (Stage(("tests/test_stats.py", "tests/test_validity.py")),)),
    "success": Target("simeval/stats/success.py", (Stage(("tests/test_stats.py", "tests/test_sequential.py")),)),
    "aggregates": Target("simeval/stats/aggregates.py", (Stage(("tests/test_stats.py",)),)),
    "bootstrap": Target("simeval/stats/_bootstrap.py", (Stage(("tests/test_stats.py",)),)),
    "checks": Target("simeval/stats/_checks.py", (Stage(("tests/test_stats.py",)),)),
    "verdicts": Target("simeval/stats/verdicts.py", (Stage(("tests/test_stats.py", "tests/test_sequential.py")),)),
    "sequential": Target(
        "simeval/stats/sequential.py", (Stage(("tests/test_sequential.py", "tests/test_validity.py")),)
    ),
    "group_sequential": Target("simeval/stats/group_sequential.py", (Stage(("tests/test_group_sequential.py",)),)),
    "running": Target(
        "simeval/stats/running.py", (Stage(("tests/test_sequential.py", "tests/test_group_sequential.py")),)
    ),
    "compare": Target(
        "simeval/report/comparison.py",
        (
            Stage(
                ("tests/test_compare.py", "tests/test_aggregate_guard.py"),
                # the page in a browser: HTML and plots, none of compare's numbers
                deselect=("tests/test_compare.py::test_html_page_renders_in_a_browser_with_its_tables_and_plots",),
            ),
        ),
        functions=(
            "cell_of",
            "select",
            "episode_order",
            "paired_episodes",
            "success_key",
            "_reference",
            "_bounds",
            "_deterministic",
            "_fixed_cell",
            "_adaptive_cell",
            "_decided_stop",
            "_precise_stop",
            "_steps",
            "_aggregate",
            "compare",
            "json_rows",
            "_number",
        ),  # fmt: skip
    ),
    # The look-by-look strategy: each cell's sequence, its stop, the lines and the replay (report and resume).
    "looks": Target(
        "simeval/strategies/looks.py",
        (
            Stage(
                (
                    "tests/test_looks.py",  # in process: B put in A's order by seed, a declared-deterministic cell
                    "tests/test_compare.py",  # adaptive runs' lines replayed through CellLooks, against by-hand replays
                    "tests/test_strategies.py",  # the strategy contract: resume after a kill mid-look, replay == run
                    "tests/test_task_declarations.py",  # a deterministic task decides from identical differences
                    "tests/test_adaptive.py",  # real --until-decided / --until-precise runs: looks, stops, resume
                ),
                deselect=(
                    "tests/test_compare.py::test_html_page_renders_in_a_browser_with_its_tables_and_plots",
                    # two Ray workers: the same looks as the thread backend's, no number of looks.py's own
                    "tests/test_adaptive.py::test_two_ray_workers_see_the_episodes_one_thread_worker_sees",
                ),
            ),
        ),
    ),
    "load": Target(
        "simeval/checkpoints/load.py",
        (
            Stage(
                (
                    "tests/test_checkpoint.py",
                    "tests/test_corrupt_checkpoints.py",  # truncated, bit-flipped: one line naming the file
                    "tests/test_watch.py",  # peek_step's step order, file_hash of the bytes evaluated
                    "tests/test_trust_boundary.py",  # size cap, bombs, gadgets: refused unread
                )
            ),
        ),
    ),
    "bounds": Target(
        "simeval/checkpoints/bounds.py",
        (
            Stage(
                (
                    "tests/test_trust_boundary.py",
                    "tests/test_corrupt_checkpoints.py",
                    "tests/test_checkpoint.py",
                )
            ),
        ),
    ),
}

PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider")
# What each test process gets (and passes on to its launcher subprocesses, process children and Ray workers).
ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",  # a mutant is compiled from its source, never from a stale .pyc
    "RAY_ADDRESS": "local",  # a Ray test starts a cluster of its own, never joins one on the machine
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "SIMEVAL_REQUIRE_ALL": "1",  # a selected test that skips judges nothing: the baseline fails instead
}
MIN_TEST_TIMEOUT = 60.0


# -- the copy -----------------------------------------------------------------------------------------


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def check_scratch(scratch: Path) -> None:
    """The scratch directory must not be part of what is copied: outside the tree, or ignored by git."""
    try:
        rel = scratch.resolve().relative_to(ROOT)
    except ValueError:
        return
    if not rel.parts or subprocess.run(["git", "check-ignore", "-q", str(rel / "x")], cwd=ROOT).returncode != 0:
        sys.exit(f"mutate: {scratch} is inside the working tree and not ignored by git: pick an ignored directory.")


def snapshot(scratch: Path) -> dict:
    """Copy the working tree's files (tracked, and untracked ones git does not ignore) to ``scratch/tree``."""
    tree = scratch / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    names = [n for n in git("ls-files", "-co", "--exclude-standard", "-z").split("\0") if n]
    copied = 0
    for name in names:
        src = ROOT / name
        if not (src.is_file() or src.is_symlink()):
            continue  # deleted in the working tree, not yet in git
        dest = tree / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest, follow_symlinks=False)
        copied += 1
    dirty = bool(git("status", "--porcelain").strip())
    return {
        "root": str(ROOT),
        "commit": git("rev-parse", "HEAD").strip(),
        "dirty": dirty,
        "files": copied,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


# -- the test scripts ----------------------------------------------------------------------------------


def stages_here(target: Target) -> tuple[list[Stage], list[str]]:
    """The stages whose venv exists, and a note for each left out."""
    kept, notes = [], []
    for stage in target.stages:
        if (ROOT / stage.venv / "bin" / "python").exists():
            kept.append(stage)
        else:
            notes.append(f"{' '.join(stage.tests)} left out: no {stage.venv} (its make target builds it)")
    return kept, notes


def write_script(key: str, target: Target, stages: list[Stage], scratch: Path) -> Path:
    """``scratch/tests/<key>.sh``: the module's tests, run in the copy; it stops at the first failure."""
    tree = scratch / "tree"
    lines = [
        "#!/usr/bin/env bash",
        f"# The tests that judge mutants of {target.path} (tools/mutate.py writes this file).",
        "# Run in the copy, with the copy first on every process's path. MUTATE_TEST_TIMEOUT: seconds per test;",
        "# MUTATE_JUNIT: a directory for the baseline's junit files (per-test times).",
        "set -e",
        f"cd {shlex.quote(str(tree))}",
        f"export PYTHONPATH={shlex.quote(str(tree))}",
        *(f"export {name}={value}" for name, value in ENV.items()),
    ]
    for i, stage in enumerate(stages):
        py = ROOT / stage.venv / "bin" / "python"
        args = [str(py), *PYTEST, *(f"--deselect={d}" for d in stage.deselect), *stage.tests]
        lines.append(
            " ".join(shlex.quote(a) for a in args)
            + ' --timeout="${MUTATE_TEST_TIMEOUT:-300}"'
            + f' ${{MUTATE_JUNIT:+--junitxml="$MUTATE_JUNIT/{i}.xml"}}'
        )
    path = scratch / "tests" / f"{key}.sh"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


_current: subprocess.Popen | None = None


def run_script(script: Path, timeout: float, env: dict[str, str] | None = None) -> tuple[str, str, float]:
    """Run a test script in a process group of its own: ("passed" | "failed" | "timeout", output, seconds).

    The group is killed on a timeout, and when this process is interrupted (the mutated file is then
    restored by cosmic-ray's context manager on the way out).
    """
    global _current
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            ["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        _current = proc
        try:
            proc.wait(timeout=timeout)
            status = "passed" if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            status = "timeout"
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            _current = None
        out.seek(0)
        output = out.read().decode("utf-8", "replace")
    return status, output, time.monotonic() - start


def slowest_test(junit_dir: Path) -> float:
    """The longest test (setup, call and teardown) in the baseline's junit files."""
    times = [0.0]
    for path in junit_dir.glob("*.xml"):
        for case in ET.parse(path).getroot().iter("testcase"):
            times.append(float(case.get("time") or 0.0))
    return max(times)


# -- exclusions --------------------------------------------------------------------------------------

Pos = tuple[int, int]  # (line from 1, column from 0 in characters): parso's, as cosmic-ray stores them
LOG_OBJECTS = {"log", "logger", "logging", "_log", "_logger", "LOG", "warnings"}
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}


class Spans:
    """Where in a module a mutant changes no number (or every test): spans by reason, from Python's ast."""

    def __init__(self, source: str, functions: tuple[str, ...] | None) -> None:
        self.lines = source.splitlines()
        self.spans: list[tuple[Pos, Pos, str]] = []
        self.regions: list[tuple[Pos, Pos]] | None = None
        tree = ast.parse(source)
        if functions is not None:
            found = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            missing = sorted(set(functions) - set(found))
            if missing:
                raise SystemExit(f"mutate: no top-level function {', '.join(missing)} to mutate any more")
            self.regions = [self._span(found[name], decorators=True) for name in functions]
        for node in ast.walk(tree):
            self._visit(node)

    def _pos(self, line: int, byte_col: int) -> Pos:
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return line, len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def _span(self, node: ast.AST, decorators: bool = False) -> tuple[Pos, Pos]:
        first = node.decorator_list[0] if decorators and getattr(node, "decorator_list", None) else node
        return self._pos(first.lineno, first.col_offset), self._pos(node.end_lineno, node.end_col_offset)

    def _add(self, node: ast.AST | None, reason: str) -> None:
        if node is not None:
            self.spans.append((*self._span(node), reason))

    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                if arg is not None:
                    self._add(arg.annotation, "annotation")
            self._add(node.returns, "annotation")
        if isinstance(node, ast.AnnAssign):
            self._add(node.annotation, "annotation")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for deco in node.decorator_list:
                # from the '@' (one column before the expression) to the end of its line
                (line, col), end = self._span(deco)
                self.spans.append(((line, max(col - 1, 0)), end, "decorator"))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            self._add(node, "type-only")
        if isinstance(node, ast.JoinedStr):
            self._add(node, "message")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
            self._add(node, "message")
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            for arg in (*node.exc.args, *node.exc.keywords):
                self._add(arg, "message")
        if isinstance(node, ast.Assert):
            self._add(node.msg, "message")
        if isinstance(node, ast.Call) and _is_message_call(node.func):
            for arg in (*node.args, *node.keywords):
                self._add(arg, "message")

    def reason(self, start: Pos, end: Pos) -> str | None:
        """Why a mutant at ``start``..``end`` is excluded, or None."""
        if self.regions is not None and not any(s <= start and end <= e for s, e in self.regions):
            return "output"
        if end[1] == 0 and end[0] > start[0]:  # a span that ends at a line's start (a decorator's newline)
            end = (end[0] - 1, len(self.lines[end[0] - 2]))
        if "pragma: no mutate" in self.lines[end[0] - 1]:
            return "pragma"
        for s, e, why in self.spans:
            if s <= start and end <= e:
                return why
        return None


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_message_call(func: ast.AST) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "print"
    if isinstance(func, ast.Attribute):
        if func.attr == "format" and _is_str(func.value):
            return True
        return func.attr in LOG_METHODS and isinstance(func.value, ast.Name) and func.value.id in LOG_OBJECTS
    return False


# -- sessions ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def inside(path: Path):
    """cwd ``path`` for the block: cosmic-ray's sessions hold module paths relative to the copy."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def init_session(key: str, target: Target, scratch: Path, per_module: int | None, seed: int) -> dict:
    """cosmic-ray init of one module in the copy, then the exclusions and the sample; counts by outcome."""
    import cosmic_ray.commands
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    SKIPPED = WorkerOutcome.SKIPPED
    tree, db_path = scratch / "tree", scratch / "sessions" / f"{key}.sqlite"
    db_path.parent.mkdir(parents=True, exist_ok=True)
    db_path.unlink(missing_ok=True)
    source = (tree / target.path).read_text(encoding="utf-8")
    spans = Spans(source, target.functions)
    excluded: dict[str, list[str]] = {}
    with inside(tree), use_db(str(db_path), WorkDB.Mode.create) as db:
        cosmic_ray.commands.init([Path(target.path)], db, {})
        items = sorted(db.work_items, key=_order)
        kept = []
        for item in items:
            why = spans.reason(*_where(item))
            if why is None:
                kept.append(item)
            else:
                excluded.setdefault(why, []).append(item.job_id)
        for why, job_ids in excluded.items():
            db.set_multiple_results(job_ids, WorkResult(output=f"excluded: {why}", worker_outcome=SKIPPED))
        sampled_out = []
        if per_module is not None and len(kept) > per_module:
            chosen = {it.job_id for it in random.Random(f"{seed}:{target.path}").sample(kept, per_module)}
            sampled_out = [it.job_id for it in kept if it.job_id not in chosen]
            db.set_multiple_results(
                sampled_out,
                WorkResult(output=f"sampled out (seed {seed}, {per_module} per module)", worker_outcome=SKIPPED),
            )
    return {
        "mutants": len(items),
        "excluded": {why: len(ids) for why, ids in sorted(excluded.items())},
        "sampled_out": len(sampled_out),
        "to_run": len(kept) - len(sampled_out),
    }


def _where(item: object) -> tuple[Pos, Pos]:
    m = item.mutations[0]
    return tuple(m.start_pos), tuple(m.end_pos)


def _order(item: object) -> tuple[str, int]:
    m = item.mutations[0]
    return m.operator_name, m.occurrence


def write_config(key: str, target: Target, script: Path, timeout: float, scratch: Path) -> Path:
    """A cosmic-ray config for the module, so that a session can also be run with cosmic-ray's own CLI."""
    from cosmic_ray.config import ConfigDict, serialize_config

    cfg = ConfigDict(
        {
            "module-path": target.path,
            "timeout": round(timeout, 1),
            "excluded-modules": [],
            "test-command": f"bash {script}",
            "distributor": {"name": "local"},
        }
    )
    path = scratch / "sessions" / f"{key}.toml"
    path.write_text(serialize_config(cfg))
    return path


def execute(key: str, plan: dict, scratch: Path) -> None:
    """Run every pending mutant of a session: mutate the copy's file, run the script, restore, record."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import _make_diff, use_mutation
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    tree, script = scratch / "tree", Path(plan["script"])
    module = tree / plan["module"]
    times_path = scratch / "sessions" / f"{key}.times.jsonl"
    env = {"MUTATE_TEST_TIMEOUT": str(int(plan["test_timeout"]))}
    with inside(tree), use_db(str(scratch / "sessions" / f"{key}.sqlite"), WorkDB.Mode.open) as db:
        pending = sorted(db.pending_work_items, key=_order)
        for n, item in enumerate(pending, 1):
            m = item.mutations[0]
            operator = cosmic_ray.plugins.get_operator(m.operator_name)(**(m.operator_args or {}))
            label = f"{m.module_path}:{m.start_pos[0]} {m.operator_name.removeprefix('core/')} #{m.occurrence}"
            print(f"  [{n}/{len(pending)}] {label} ...", end="", flush=True)
            for stale in (module.parent / "__pycache__").glob(f"{module.stem}.*.pyc"):
                stale.unlink()
            with use_mutation(Path(m.module_path), operator, m.occurrence) as (original, mutated):
                if mutated is None:
                    result, status, seconds = WorkResult(worker_outcome=WorkerOutcome.NO_TEST), "no mutation", 0.0
                else:
                    status, output, seconds = run_script(script, plan["timeout"], env)
                    outcome = TestOutcome.SURVIVED if status == "passed" else TestOutcome.KILLED
                    result = WorkResult(
                        worker_outcome=WorkerOutcome.NORMAL,
                        test_outcome=outcome,
                        output="timeout" if status == "timeout" else output[-20000:],
                        diff="\n".join(_make_diff(original, mutated, m.module_path)),
                    )
            assert sha256(module) == plan["sha256"], f"{module} was not restored"
            db.set_result(item.job_id, result)
            with open(times_path, "a") as f:
                f.write(json.dumps({"job_id": item.job_id, "seconds": round(seconds, 2), "status": status}) + "\n")
            word = {"passed": "SURVIVED", "timeout": "killed (timeout)"}.get(status, status)
            if status == "failed":
                word = f"killed by {killed_by(output)}"
            print(f" {word} ({seconds:.1f} s)", flush=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the canary ----------------------------------------------------------------------------------------

CANARY = "SIMEVAL-MUTATION-CANARY"
CANARY_MODULE = "simeval/worker/rollout.py"  # imported only on the worker side (make lint's contract)
CANARY_SCRIPT = f'''
import functools, os, re, sys
from simeval import EvalError, Evaluator
from simeval.envs import make_env
from simeval.policies import mlp_policy

tree = os.path.realpath(sys.argv[1])
for backend in sys.argv[2:]:
    env = functools.partial(make_env, "HalfCheetah-v5", num_envs=1, obs_norm=False)
    try:
        extra = {{"num_gpus": 0}} if backend == "ray" else {{}}  # the cluster it starts has no GPU
        with Evaluator(env, policy_factory=mlp_policy, num_trajectories=1, max_steps=5, backend=backend, **extra) as ev:
            ev.evaluate()
    except EvalError as exc:
        text = str(exc) + (exc.remote_traceback or "")
    else:
        sys.exit(f"{{backend}}: the round ran: its worker did not import the copy's simeval")
    found = re.search(r"{CANARY} pid=(\\d+) file=(\\S+)", text)
    if not found:
        sys.exit(f"{{backend}}: the round failed without the canary: " + text[-2000:])
    pid, where = int(found[1]), found[2]
    if pid == os.getpid() or not os.path.realpath(where).startswith(tree + os.sep):
        sys.exit(f"{{backend}}: canary from pid {{pid}} (this is {{os.getpid()}}), file {{where}}")
    print(f"{{backend}}: its worker (pid {{pid}}) imported {{where}}")
assert "simeval.worker.rollout" not in sys.modules, "the caller imported the worker side"
'''


def canary(scratch: Path, backends: tuple[str, ...] = ("process", "ray")) -> None:
    """Prove that process-backend children and Ray workers import the copy: a raising module fails their round."""
    tree = scratch / "tree"
    module = tree / CANARY_MODULE
    script = scratch / "canary.py"
    script.write_text(CANARY_SCRIPT)
    runner = scratch / "tests" / "canary.sh"
    runner.parent.mkdir(parents=True, exist_ok=True)
    runner.write_text(
        "set -e\n"
        f"cd {shlex.quote(str(tree))}\n"
        f"export PYTHONPATH={shlex.quote(str(tree))}\n"
        + "".join(f"export {k}={v}\n" for k, v in ENV.items())
        + f"{shlex.quote(str(ROOT / CORE_VENV / 'bin' / 'python'))} {shlex.quote(str(script))} "
        + f"{shlex.quote(str(tree))} {' '.join(backends)}\n"
    )
    line = (
        "\nimport os as _canary_os\n"
        f'raise RuntimeError(f"{CANARY} pid={{_canary_os.getpid()}} file={{__file__}} "\n'
        '                   "(tools/mutate.py: the canary; this file was left mutated: restore it)")\n'
    )
    original = module.read_bytes()
    try:
        module.write_bytes(original + line.encode())
        status, output, seconds = run_script(runner, 600)
    finally:
        module.write_bytes(original)
    for line in output.splitlines():
        if line.startswith(tuple(f"{b}: " for b in backends)):
            print(f"  canary: {line}")
    if status != "passed":
        sys.exit(f"mutate: the canary failed ({status}): mutants would not be seen by every worker\n{output[-4000:]}")
    print(f"  canary: passed in {seconds:.0f} s")


# -- the report ------------------------------------------------------------------------------------------


def module_report(key: str, scratch: Path) -> dict:
    """Counts, score, timing and survivors of one module's session."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    plan = json.loads((scratch / "sessions" / f"{key}.json").read_text())
    times = {}
    times_path = scratch / "sessions" / f"{key}.times.jsonl"
    if times_path.exists():
        for line in times_path.read_text().splitlines():
            row = json.loads(line)
            times[row["job_id"]] = row["seconds"]
    killed = timeouts = survived = incompetent = no_test = 0
    survivors, mutants = [], []
    with use_db(str(scratch / "sessions" / f"{key}.sqlite"), WorkDB.Mode.open) as db:
        pending = len(db.pending_work_items)
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            m = item.mutations[0]
            row = {
                "file": str(m.module_path),
                "line": m.start_pos[0],
                "column": m.start_pos[1],
                "function": m.definition_name,
                "operator": m.operator_name,
                "occurrence": m.occurrence,
                "seconds": times.get(item.job_id),
            }
            if result.worker_outcome == WorkerOutcome.NO_TEST:
                no_test += 1
                row["outcome"] = "no mutation"
            elif result.test_outcome == TestOutcome.SURVIVED:
                survived += 1
                row["outcome"] = "survived"
                survivors.append({**row, "diff": _diff_body(result.diff or "")})
            elif result.test_outcome == TestOutcome.KILLED:
                killed += 1
                timeouts += result.output == "timeout"
                row["outcome"] = "killed"
                row["killed_by"] = killed_by(result.output or "")
            else:
                incompetent += 1
                row["outcome"] = "incompetent"
            mutants.append(row)
    ran = killed + survived
    seconds = sum(times.values())
    survivors.sort(key=lambda s: (s["line"], s["column"], s["operator"]))
    mutants.sort(key=lambda s: (s["line"], s["column"], s["operator"]))
    return {
        "key": key,
        "module": plan["module"],
        "tests": plan["tests"],
        "notes": plan["notes"],
        "mutants": plan["counts"]["mutants"],
        "excluded": plan["counts"]["excluded"],
        "sampled_out": plan["counts"]["sampled_out"],
        "run": ran,
        "killed": killed,
        "timeouts": timeouts,
        "survived": survived,
        "incompetent": incompetent,
        "no_mutation": no_test,
        "pending": pending,
        "score": round(killed / ran, 4) if ran else None,
        "baseline_seconds": round(plan["baseline_seconds"], 1),
        "seconds": round(seconds, 2),
        "timed": len(times),
        "seconds_per_mutant": round(seconds / len(times), 1) if times else None,
        "survivors": survivors,
        "mutants_run": mutants,
    }


def killed_by(output: str) -> str:
    """The test that failed first on a mutant (pytest's ``FAILED``/``ERROR`` summary line), or "timeout"."""
    if output == "timeout":
        return "timeout"
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return found[1] if found else "the test script (see the session's output)"


def _diff_body(diff: str) -> str:
    lines = [ln for ln in diff.splitlines() if not ln.startswith(("--- mutation diff ---", "--- a/", "+++ b/"))]
    return "\n".join(lines)


def text_report(report: dict) -> str:
    run = report["run"]
    sample = "every mutant" if run["per_module"] is None else f"{run['per_module']} per module, seed {run['seed']}"
    out = [
        f"Mutation testing, {run['date']} on {run['host']} ({run['cpus']} CPUs, Python {run['python']}): {sample}",
        f"copy of {run['root']} at {run['commit'][:12]}{' + uncommitted changes' if run['dirty'] else ''}",
        "",
    ]
    head = ("module", "mutants", "excluded", "run", "killed", "timeout", "survived", "score", "s/mutant")
    rows = [head]
    for m in report["modules"]:
        score = "-" if m["score"] is None else f"{100 * m['score']:.1f}%"
        spm = "-" if m["seconds_per_mutant"] is None else f"{m['seconds_per_mutant']:.1f}"
        rows.append(
            (m["module"], m["mutants"], sum(m["excluded"].values()), m["run"], m["killed"], m["timeouts"],
             m["survived"], score, spm)
        )  # fmt: skip
    t = report["total"]
    score = "-" if t["score"] is None else f"{100 * t['score']:.1f}%"
    spm = "-" if t["seconds_per_mutant"] is None else f"{t['seconds_per_mutant']:.1f}"
    rows.append(("total", t["mutants"], t["excluded"], t["run"], t["killed"], t["timeouts"], t["survived"], score, spm))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    for r in rows:
        out.append(
            "  ".join(
                str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    out.append("")
    for m in report["modules"]:
        excl = ", ".join(f"{why} {n}" for why, n in m["excluded"].items()) or "none"
        extra = [f"excluded: {excl}", f"sampled out: {m['sampled_out']}", f"baseline {m['baseline_seconds']} s"]
        if m["pending"]:
            extra.append(f"PENDING {m['pending']} (--resume)")
        if m["incompetent"] or m["no_mutation"]:
            extra.append(f"incompetent {m['incompetent']}, no mutation {m['no_mutation']}")
        out.append(f"{m['module']}: " + "; ".join(extra))
        out.append(f"  tests: {' '.join(m['tests'])}")
        killers = Counter(r["killed_by"].split("::")[0] for r in m["mutants_run"] if r["outcome"] == "killed")
        if killers:
            out.append("  killed by: " + ", ".join(f"{name} {n}" for name, n in killers.most_common()))
        out.extend(f"  note: {n}" for n in m["notes"])
    survivors = [s for m in report["modules"] for s in m["survivors"]]
    out += ["", f"Survivors: {len(survivors)}"]
    for s in survivors:
        out.append("")
        out.append(
            f"{s['file']}:{s['line']} in {s['function'] or '<module>'}: {s['operator']} (occurrence {s['occurrence']})"
        )
        out.extend("    " + ln for ln in s["diff"].splitlines())
    return "\n".join(out) + "\n"


def full_report(keys: list[str], scratch: Path) -> dict:
    run = json.loads((scratch / "run.json").read_text())
    modules = [module_report(k, scratch) for k in keys if (scratch / "sessions" / f"{k}.json").exists()]
    total = {name: sum(m[name] for m in modules) for name in ("mutants", "run", "killed", "timeouts", "survived")}
    total["excluded"] = sum(sum(m["excluded"].values()) for m in modules)
    total["score"] = round(total["killed"] / total["run"], 4) if total["run"] else None
    seconds = sum(m["seconds"] for m in modules)
    timed = sum(m["timed"] for m in modules)
    total["seconds"] = round(seconds, 1)
    total["seconds_per_mutant"] = round(seconds / timed, 1) if timed else None
    return {"run": run, "modules": modules, "total": total}


def write_report(keys: list[str], scratch: Path, as_json: bool) -> int:
    report = full_report(keys, scratch)
    text = text_report(report)
    (scratch / "report.txt").write_text(text)
    (scratch / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(text, end="")
        print(f"(also in {scratch / 'report.txt'} and {scratch / 'report.json'})")
    return 0


# -- main ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tools/mutate.py", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument("--per-module", type=int, default=12, metavar="N", help="a seeded sample of N mutants per module")
    how.add_argument("--all", action="store_true", help="every mutant (make mutate-full)")
    p.add_argument("--seed", type=int, default=0, help="the sample's seed")
    p.add_argument("--modules", default="", help=f"comma-separated, of {', '.join(TARGETS)} (default: all)")
    p.add_argument("--scratch", type=Path, default=ROOT / ".mutation", help="where the copy and sessions go")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--resume", action="store_true", help="run the last run's pending mutants, then report")
    p.add_argument("--report", action="store_true", help="only print the last run's report")
    p.add_argument("--list", action="store_true", help="the modules, their tests and mutant counts; runs nothing")
    p.add_argument("--no-canary", action="store_true", help="skip the check that workers import the copy")
    args = p.parse_args(argv)
    keys = [k.strip() for k in args.modules.split(",") if k.strip()] or list(TARGETS)
    unknown = [k for k in keys if k not in TARGETS]
    if unknown:
        p.error(f"unknown module {', '.join(unknown)}: pick from {', '.join(TARGETS)}")
    if args.per_module is not None and args.per_module < 1:
        p.error("--per-module must be at least 1")
    args.keys = keys
    return args


def list_targets(scratch: Path) -> int:
    import cosmic_ray.commands
    from cosmic_ray.work_db import WorkDB, use_db

    with tempfile.TemporaryDirectory() as tmp:
        for key, target in TARGETS.items():
            db_path = Path(tmp) / f"{key}.sqlite"
            with inside(ROOT), use_db(str(db_path), WorkDB.Mode.create) as db:
                cosmic_ray.commands.init([Path(target.path)], db, {})  # reads the file, writes nothing to it
                items = db.work_items
            spans = Spans((ROOT / target.path).read_text(encoding="utf-8"), target.functions)
            reasons = Counter(spans.reason(*_where(i)) for i in items)
            kept = reasons.pop(None, 0)
            stages, notes = stages_here(target)
            print(f"{key}: {target.path}: {len(items)} mutants, {kept} after exclusions ({dict(reasons)})")
            for stage in target.stages:
                print(f"    [{stage.venv}] {' '.join(stage.tests)}")
            for note in notes:
                print(f"    note: {note}")
    return 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the test group is killed and the copy's file restored


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scratch = args.scratch.resolve()
    if args.list:
        return list_targets(scratch)
    if args.report:
        return write_report(args.keys, scratch, args.json)
    check_scratch(scratch)
    signal.signal(signal.SIGTERM, _interrupted)
    per_module = None if args.all else args.per_module

    if args.resume:
        run = json.loads((scratch / "run.json").read_text())
        keys = [k for k in run["modules"] if k in args.keys]
        for key in keys:  # a run killed mid-mutant (SIGKILL) leaves the copy's file mutated
            plan = json.loads((scratch / "sessions" / f"{key}.json").read_text())
            module = scratch / "tree" / plan["module"]
            if sha256(module) != plan["sha256"]:
                shutil.copy2(scratch / "sessions" / f"{key}.orig.py", module)
                print(f"restored {plan['module']} in the copy")
    else:
        keys = args.keys
        shutil.rmtree(scratch / "sessions", ignore_errors=True)
        (scratch / "sessions").mkdir(parents=True)
        print(f"copying the working tree to {scratch / 'tree'} ...", flush=True)
        run = snapshot(scratch)
        run.update(per_module=per_module, seed=args.seed, modules=keys, command=["tools/mutate.py", *sys.argv[1:]])
        (scratch / "run.json").write_text(json.dumps(run, indent=2) + "\n")
        if not args.no_canary:
            print("canary: do process-backend children and Ray workers import the copy?", flush=True)
            canary(scratch)
        print("baselines: each module's tests on the unmutated copy", flush=True)
        failed = []
        for key in keys:
            target = TARGETS[key]
            stages, notes = stages_here(target)
            script = write_script(key, target, stages, scratch)
            junit = scratch / "baseline" / key
            shutil.rmtree(junit, ignore_errors=True)
            junit.mkdir(parents=True)
            status, output, seconds = run_script(script, 3600, {"MUTATE_JUNIT": str(junit)})
            if status != "passed":
                failed.append(key)
                print(f"  {key}: baseline {status} after {seconds:.0f} s ({script}):\n{output[-3000:]}", flush=True)
                continue
            test_timeout = max(MIN_TEST_TIMEOUT, 4 * slowest_test(junit))
            timeout = 2 * seconds + test_timeout + 60
            module = scratch / "tree" / target.path
            shutil.copy2(module, scratch / "sessions" / f"{key}.orig.py")
            counts = init_session(key, target, scratch, per_module, args.seed)
            plan = {
                "module": target.path,
                "tests": [t for s in stages for t in s.tests],
                "notes": notes,
                "script": str(script),
                "sha256": sha256(module),
                "baseline_seconds": seconds,
                "test_timeout": test_timeout,
                "timeout": timeout,
                "counts": counts,
            }
            (scratch / "sessions" / f"{key}.json").write_text(json.dumps(plan, indent=2) + "\n")
            write_config(key, target, script, timeout, scratch)
            print(
                f"  {key}: passed in {seconds:.0f} s; {counts['mutants']} mutants, "
                f"{sum(counts['excluded'].values())} excluded, {counts['to_run']} to run "
                f"(timeouts: {test_timeout:.0f} s a test, {timeout:.0f} s a mutant)",
                flush=True,
            )
        if failed:
            print(f"mutate: the unmutated copy fails the tests of {', '.join(failed)}: no mutant run", file=sys.stderr)
            return 1

    for key in keys:
        plan = json.loads((scratch / "sessions" / f"{key}.json").read_text())
        print(f"{key}: {plan['module']}", flush=True)
        try:
            execute(key, plan, scratch)
        except KeyboardInterrupt:
            print("\ninterrupted: the copy is restored; `tools/mutate.py --resume` runs the rest", file=sys.stderr)
            return 130
    return write_report(keys, scratch, args.json)


if __name__ == "__main__":
    sys.exit(main())
