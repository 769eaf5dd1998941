"""The aggregate ``*`` row of ``python -m simeval.report compare`` withholds its verdict where a cell's data show its
interval's assumption broken (issue 46, part 2), and a task declared deterministic decides from identical differences.

The ``*`` interval is the mean of the cells' intervals: it holds only when every cell's does. Before this change
it read ``better`` over cells whose own verdicts were withheld (a fall under the t-interval, identical
differences of a task not declared deterministic, fewer than 4 pairs), and over a cell whose t-interval held 0
though its episodes showed a fall (a cell's guard only speaks where its own interval decides).

Each test writes two runs' results.jsonl lines as the suite runner writes them and runs the command as a user does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from simeval.records import append_record
from simeval.stats.verdicts import FEW_PAIRS, SKEWED, ZERO_VARIANCE

TIMEOUT = 120


def _line(task: str, returns, seeds, **extra) -> dict:
    """A suite run's results.jsonl line for cell (task, nominal)."""
    returns = [float(x) for x in returns]
    record = {
        "status": "ok",
        "step": 1000,
        "metrics": {"reward": float(np.mean(returns)), "num_episodes": len(returns)},
        "episode_returns": returns,
        "episode_lengths": [1000] * len(returns),
        "episode_seeds": list(seeds),
        "checkpoint": "/abs/ck.pt",
        "checkpoint_name": "ck.pt",
        "env": task,
        "suite": "guard",
        "task": task,
        "condition": "nominal",
        "condition_settings": {},
        "seed": 0,
        "num_envs": 8,
        "max_steps": 1000,
    }
    record.update(extra)
    return record


def _runs(tmp_path, cells: dict[str, tuple[np.ndarray, np.ndarray, dict]]) -> tuple[str, str]:
    """Runs A and B with one line per task: ``task -> (returns of A, returns of B, extra fields of both lines)``."""
    dirs = (str(tmp_path / "a"), str(tmp_path / "b"))
    for task, (a, b, extra) in cells.items():
        seeds = range(100, 100 + len(a))
        for where, returns in zip(dirs, (a, b), strict=True):
            append_record(os.path.join(where, "results.jsonl"), _line(task, returns, seeds, **extra))
    return dirs


def _compare(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.report", "compare", *args], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _rows(dirs: tuple[str, str]) -> dict[str, dict]:
    """``--json``'s rows by task (the aggregate: ``*``)."""
    return {row["task"]: row for row in json.loads(_compare(*dirs, "--json").stdout)}


def _clear(rng: np.random.Generator, n: int = 16, effect: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """A cell B wins plainly: B = A + ``effect`` + N(0, 10)."""
    a = rng.normal(1000.0, 80.0, n)
    return a, a + effect + rng.normal(0.0, 10.0, n)


def _fall(rng: np.random.Generator, base: float, fall: float, n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """B - A = ``base`` + N(0, 5), except one episode where A fell: its difference is ``fall`` higher."""
    a = rng.normal(3000.0, 50.0, n)
    b = a + base + rng.normal(0.0, 5.0, n)
    a[3] -= fall
    return a, b


def test_a_fall_in_a_cell_whose_interval_holds_zero_withholds_the_aggregate(tmp_path):
    """The cell's own t-interval holds 0 (no verdict, so no reason of its own), but its episodes show a fall: the
    mean of intervals leans on that t-interval, so the ``*`` row's ``better`` is withheld. Before: ``better``."""
    rng = np.random.default_rng(3)
    a1, b1 = _fall(rng, 0.0, 300.0)
    a2, b2 = _clear(rng, effect=1000.0)
    dirs = _runs(tmp_path, {"Fall-v0": (a1, b1, {}), "Clear-v0": (a2, b2, {})})
    rows = _rows(dirs)
    fall, agg = rows["Fall-v0"], rows["*"]
    assert (fall["verdict"], fall["reason"], fall["method"]) == ("inconclusive", "", "t")
    assert fall["diff_ci_low"] < 0 < fall["diff_ci_high"]
    assert rows["Clear-v0"]["verdict"] == "better"
    assert agg["diff_ci_low"] > 0  # the interval alone would say better
    assert (agg["verdict"], agg["reason"]) == ("inconclusive", SKEWED)

    table = _compare(*dirs).stdout
    star = next(line for line in table.splitlines() if line.startswith("*"))
    assert "inconclusive" in star and SKEWED in star  # the note column says why
    assert f"* {SKEWED}: the * range holds only when every cell's does" in table
    assert f"Fall-v0 / nominal ({SKEWED})" in table
    assert f"  {SKEWED}: the range would decide" in table  # what the reason asks for, though no cell withheld it


def test_a_cell_withheld_as_skewed_withholds_the_aggregate_and_bounds_lift_both(tmp_path):
    """A cell whose t-interval decides but whose episodes show a fall is withheld (``skewed: declare bounds``); the
    aggregate over it too. With bounds declared the betting interval is valid whatever the falls: both decide."""
    rng = np.random.default_rng(4)
    a1, b1 = _fall(rng, 200.0, 400.0, n=64)
    a2, b2 = _clear(rng, n=64)
    dirs = _runs(tmp_path / "t", {"Fall-v0": (a1, b1, {}), "Clear-v0": (a2, b2, {})})
    rows = _rows(dirs)
    assert (rows["Fall-v0"]["verdict"], rows["Fall-v0"]["reason"]) == ("inconclusive", SKEWED)
    assert rows["*"]["diff_ci_low"] > 0
    assert (rows["*"]["verdict"], rows["*"]["reason"]) == ("inconclusive", SKEWED)

    page = tmp_path / "compare.html"  # the HTML page says it beside the aggregate's verdict, not only in its notes
    _compare(*dirs, "--html", str(page))
    aggregate = page.read_text().split('<p id="aggregate">', 1)[1].split("</p>", 1)[0]
    assert f'inconclusive</strong> <span class="withheld">(withheld: {SKEWED})</span>.' in aggregate, aggregate

    bounded = {"bounds": {"low": 2400.0, "high": 3400.0}}
    dirs = _runs(tmp_path / "bounds", {"Fall-v0": (a1, b1, bounded), "Clear-v0": (a2, b2, {})})
    rows = _rows(dirs)
    assert (rows["Fall-v0"]["method"], rows["Fall-v0"]["verdict"], rows["Fall-v0"]["reason"]) == (
        "betting",
        "better",
        "",
    )
    assert (rows["*"]["verdict"], rows["*"]["reason"]) == ("better", "")


def test_identical_differences_withhold_the_aggregate_unless_the_task_is_declared_deterministic(tmp_path):
    """B = A + 50 on every episode of a task: no verdict from it, nor from the aggregate over it, unless both runs'
    lines declare the task deterministic (a suite task's ``deterministic: true``); then both decide."""
    rng = np.random.default_rng(5)
    a1 = rng.normal(500.0, 40.0, 16)
    a2, b2 = _clear(rng)
    dirs = _runs(tmp_path / "plain", {"Same-v0": (a1, a1 + 50.0, {}), "Clear-v0": (a2, b2, {})})
    rows = _rows(dirs)
    assert (rows["Same-v0"]["verdict"], rows["Same-v0"]["reason"]) == ("inconclusive", ZERO_VARIANCE)
    assert (rows["*"]["verdict"], rows["*"]["reason"]) == ("inconclusive", ZERO_VARIANCE)

    declared = {"deterministic": True}
    dirs = _runs(tmp_path / "declared", {"Same-v0": (a1, a1 + 50.0, declared), "Clear-v0": (a2, b2, {})})
    rows = _rows(dirs)
    assert (rows["Same-v0"]["verdict"], rows["Same-v0"]["reason"]) == ("better", "")
    assert rows["Same-v0"]["diff_ci_low"] == pytest.approx(50.0)
    assert (rows["*"]["verdict"], rows["*"]["reason"]) == ("better", "")


def test_a_task_declared_deterministic_by_one_run_only_is_not_used_and_a_warning_says_so(tmp_path):
    rng = np.random.default_rng(6)
    a1 = rng.normal(500.0, 40.0, 16)
    dirs = (str(tmp_path / "a"), str(tmp_path / "b"))
    seeds = range(16)
    append_record(os.path.join(dirs[0], "results.jsonl"), _line("Same-v0", a1, seeds, deterministic=True))
    append_record(os.path.join(dirs[1], "results.jsonl"), _line("Same-v0", a1 + 50.0, seeds))
    proc = _compare(*dirs)
    assert f"cell Same-v0 / nominal: only {dirs[0]} declares the task deterministic" in proc.stdout + proc.stderr
    rows = _rows(dirs)
    assert (rows["Same-v0"]["verdict"], rows["Same-v0"]["reason"]) == ("inconclusive", ZERO_VARIANCE)


def test_a_cell_of_fewer_than_four_pairs_withholds_the_aggregate(tmp_path):
    rng = np.random.default_rng(7)
    a1, b1 = _clear(rng, n=3, effect=1000.0)
    a2, b2 = _clear(rng)
    rows = _rows(_runs(tmp_path, {"Few-v0": (a1, b1, {}), "Clear-v0": (a2, b2, {})}))
    assert rows["Few-v0"]["reason"] in ("", FEW_PAIRS)
    assert rows["*"]["diff_ci_low"] > 0
    assert (rows["*"]["verdict"], rows["*"]["reason"]) == ("inconclusive", FEW_PAIRS)


def test_cells_that_hold_their_assumptions_leave_the_aggregate_verdict_to_its_interval(tmp_path):
    """The control: two plain normal cells, no fall, no ties: the ``*`` row decides, with no reason."""
    rng = np.random.default_rng(8)
    rows = _rows(_runs(tmp_path, {"One-v0": (*_clear(rng), {}), "Two-v0": (*_clear(rng), {})}))
    assert (rows["*"]["verdict"], rows["*"]["reason"]) == ("better", "")


def test_two_reasons_are_both_given_in_the_order_of_the_reasons(tmp_path):
    rng = np.random.default_rng(9)
    a1, b1 = _fall(rng, 0.0, 300.0)
    a2 = rng.normal(500.0, 40.0, 16)
    a3, b3 = _clear(rng, effect=1000.0)
    cells = {"Fall-v0": (a1, b1, {}), "Same-v0": (a2, a2 + 5.0, {}), "Clear-v0": (a3, b3, {})}
    rows = _rows(_runs(tmp_path, cells))
    assert rows["*"]["diff_ci_low"] > 0
    assert (rows["*"]["verdict"], rows["*"]["reason"]) == ("inconclusive", f"{ZERO_VARIANCE}; {SKEWED}")
