"""The validity study's seeded slice: rows of benchmarks/stats_validity.py, run small (docs/statistics.md: the table).

Each test runs one row of the study through simeval's own statistics (``paired``, ``mcnemar``,
``LookPlan``'s sequences) and holds it to the issue's target plus Monte Carlo error (three
standard errors of the replications it ran): a failure means the method moved, not the seed.
Each would fail if its method broke: a z quantile for the t one, a family without Bonferroni,
a betting sequence whose bets or threshold were wrong, a sequence that never stops early.
Rows that carry no promise (lognormal and falls-type data without bounds) are measured in the
study, not asserted.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import stats_validity as study

from simeval.sequential import LookPlan
from simeval.stats import mcnemar, paired


def se(p: float, reps: int) -> float:
    return math.sqrt(p * (1 - p) / reps)


def coverage(scenario, n: int, reps: int, seed: int, bounds=None) -> float:
    rng = np.random.default_rng(seed)
    d = scenario.draw(rng, (reps, n))
    hits = 0
    for r in range(reps):
        res = paired(*study.returns(d[r], bounds, rng), 0.95, bounds=bounds)
        hits += res.diff.low <= scenario.mean <= res.diff.high
    return hits / reps


@pytest.mark.parametrize("scenario", [study.NORMAL, study.T3], ids=["normal", "t3"])
def test_the_fixed_t_interval_covers_at_ten_pairs(scenario):
    reps = 2000
    rate = coverage(scenario, 10, reps, seed=101)
    assert rate >= 0.94 - 3 * se(0.95, reps), rate  # the target, less three Monte Carlo errors
    if scenario is study.NORMAL:  # exact for normal differences: not conservative either
        assert rate <= 0.95 + 3 * se(0.95, reps), rate


def test_the_documented_methods_for_success_cover_at_ten_pairs():
    reps = 1500
    sc = study.independent(0.5, 0.7)
    a, b = sc.draw(np.random.default_rng(102), (reps, 10))
    betting = sum(
        r.diff.low <= sc.diff <= r.diff.high for r in (paired(a[i], b[i], bounds=(0, 1)) for i in range(reps // 5))
    )
    share = sum(m.share.low <= sc.share <= m.share.high for m in (mcnemar(a[i], b[i]) for i in range(reps)))
    assert betting / (reps // 5) >= 0.94 - 3 * se(0.95, reps // 5)
    assert share / reps >= 0.94 - 3 * se(0.95, reps)


@pytest.mark.parametrize(
    ("data", "cells", "reps", "n_max"),
    [("binary", 1, 300, 300), ("binary", 20, 60, 300), ("falls", 1, 300, 300), ("falls", 20, 60, 100)],
)
def test_the_sequential_family_error_with_bounds_holds_under_continuous_monitoring(data, cells, reps, n_max):
    """A look every 10 episodes, each cell at alpha / cells (LookPlan); an error when any look of any cell
    misses the true difference. Without Bonferroni (each cell at 0.95) the 20 binary cells' error is 0.3 here."""
    sc, bounds = (study.PAIRED_NULL, (0.0, 1.0)) if data == "binary" else (study.FALLS, study.FALLS.bounds)
    error, _ = study.sequential_family_error(sc, bounds, cells, reps, seed=103, look=10, n_max=n_max)
    assert error <= 0.05 + 3 * se(0.05, reps), error


@pytest.mark.parametrize(
    ("scenario", "cells", "reps"), [(study.NORMAL, 1, 400), (study.NORMAL, 20, 100), (study.T3, 1, 400)]
)
def test_without_bounds_the_t_mixture_family_error_holds_on_normal_and_t3(scenario, cells, reps):
    error, _ = study.sequential_family_error(scenario, None, cells, reps, seed=104, look=10, n_max=300)
    assert error <= 0.05 + 3 * se(0.05, reps), error


def test_sequential_mcnemar_gives_no_verdict_under_equal_success_at_the_stated_rate():
    reps = 300
    error, _ = study.sequential_family_error(study.PAIRED_NULL, None, 1, reps, seed=105, mcnemar_seq=True)
    assert error <= 0.05 + 3 * se(0.05, reps), error


def test_a_sequence_stops_well_before_the_fixed_n_at_no_loss_of_power():
    """One budget, 200 pairs (the t-test's n for 80% power at 0.2 sd): at an effect of 0.5 sd the fixed test
    still spends all 200, the t-mixture sequence (a look every 10) stops after a fraction of them and
    decides as often."""
    reps, budget, effect = 300, 200, 0.5
    rng = np.random.default_rng(106)
    plan = LookPlan("until-decided", 0.05, 1, 10, budget)

    def draw(g):
        return study.returns(study.NORMAL.draw(g, (budget,)) + effect, None, g)

    times = study.stopping_times(lambda: plan.paired(None, "cell"), draw, reps, rng, 10, budget)
    power, used = float(np.mean(times <= budget)), float(np.mean(np.minimum(times, budget)))
    fixed = study.t_power(budget, effect)  # 1.000 at 200 pairs
    assert power >= fixed - 3 * se(0.99, reps), power
    assert used <= 0.5 * budget, used  # about 45 episodes: the saving the fixed design cannot have


def test_the_fixed_t_test_sample_size_is_the_textbook_one():
    """The study's fixed-n column: the paired t-test's n for 80% power (two-sided 0.05) at 0.5 sd is 34."""
    assert study.t_sample_size(0.5) == 34 and study.t_power(34, 0.5) >= 0.8 > study.t_power(33, 0.5)
    sc = study.independent(0.5, 0.8)
    n = study.mcnemar_sample_size(sc)
    assert study.mcnemar_power(n, sc) >= 0.8 > study.mcnemar_power(n - 1, sc)
    reps = 2000  # the exact power is simeval.stats.mcnemar's: its verdicts on simulated pairs agree
    a, b = sc.draw(np.random.default_rng(107), (reps, n))
    measured = np.mean([mcnemar(a[i], b[i]).verdict == "better" for i in range(reps)])
    assert abs(measured - study.mcnemar_power(n, sc)) <= 3 * se(0.8, reps)


def test_the_vectorised_planned_runs_are_group_sequential_means_one_at_a_time():
    """The study's group-sequential rows run vectorised; each replication equals the library's sequence."""
    from simeval.sequential import SequentialPaired

    rng = np.random.default_rng(108)
    looks = study.planned_looks(8, 40)
    d = study.T3.draw(rng, (40, 40)) + 0.4
    times, missed = study.planned_runs(d, looks, 0.95, 0.4)
    for r in range(len(d)):
        seq, time, miss = SequentialPaired(0.95, looks=looks), math.inf, False
        for start, n in zip((0, *looks), looks, strict=False):
            seq.update(np.zeros(n - start), d[r, start:n])
            miss |= not (seq.low <= 0.4 <= seq.high)
            if math.isinf(time) and seq.low > 0 and seq.verdict == "better":
                time = n
            if seq.verdict == "worse" and math.isinf(time):
                break
        assert (times[r], missed[r]) == (time, miss), r


@pytest.mark.parametrize("scenario, cells", [(study.NORMAL, 1), (study.NORMAL, 20), (study.T3, 1)],
                         ids=["normal-1", "normal-20", "t3-1"])  # fmt: skip
def test_planned_looks_hold_the_family_error_over_every_look(scenario, cells):
    reps = 2000
    err, _ = study.planned_family_error(scenario, cells, reps, 109, look=10, n_max=100)
    assert err <= 0.05 + 3 * se(0.05, reps), err


def test_planned_looks_use_fewer_episodes_than_the_fixed_n_at_equal_power():
    """The issue's target, on normal differences at 0.5 sd: the fixed t-test's 34 pairs at 80% power against the
    planned design (a look every 10) of the smallest budget with as much measured power on the same data."""
    row = study.planned_power(study.NORMAL, 0.5, 1000, 110, lambda n: study.planned_looks(10, n))
    n_fix, fixed_power, budget, _looks, power, mean_episodes = row[:6]
    assert n_fix == 34 and float(power) >= float(fixed_power)
    assert float(mean_episodes.split()[0]) < 0.9 * n_fix, row  # about 20% fewer


# ------------------------------------------------- the skew guard in the report (issue 46)


def _results_line(task: str, condition: str, returns: np.ndarray, bounds: tuple[float, float] | None) -> dict:
    """A suite runner's ok line (the fields report compare reads; tests/test_compare.py builds them the same way)."""
    values = [float(x) for x in returns]
    line = {
        "status": "ok",
        "step": 1000,
        "metrics": {"reward": float(np.mean(values)), "num_episodes": len(values)},
        "episode_returns": values,
        "episode_lengths": [1000] * len(values),
        "episode_seeds": list(range(len(values))),
        "checkpoint": "/abs/path/ck_1000.pt",
        "checkpoint_name": "ck_1000.pt",
        "env": task,
        "seed": 0,
        "suite": "synthetic",
        "task": task,
        "condition": condition,
        "condition_settings": {},
    }
    if bounds is not None:
        line["bounds"] = {"low": bounds[0], "high": bounds[1]}
    return line


def test_the_report_says_skewed_declare_bounds_in_its_json_table_and_legend(tmp_path):
    """One cell of the issue's falls (A ~3000, one fall to ~200 in 40 episodes; B ~2720, equal means): without
    bounds the t-interval lies below 0, the verdict is withheld and the reason is in --json, the note column and
    the legend (what it means, what to do); with bounds declared the betting interval decides or not, unguarded."""
    import json
    import subprocess
    import sys

    from simeval.records import append_record

    rng = np.random.default_rng(3)
    a, b = 3000.0 + rng.normal(0, 50, 40), 2720.0 + rng.normal(0, 50, 40)
    a[7] = 200.0
    dirs = {}
    for bounds in (None, (0.0, 4000.0)):
        for name, returns in (("a", a), ("b", b)):
            out = tmp_path / ("bounded" if bounds else "bare") / name
            out.mkdir(parents=True)
            append_record(str(out / "results.jsonl"), _results_line("Hopper-v5", "nominal", returns, bounds))
            dirs[(bounds is not None, name)] = str(out)

    def report(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "simeval.report", "compare", *args], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    bare = [dirs[(False, "a")], dirs[(False, "b")]]
    (row, _aggregate) = json.loads(report(*bare, "--json"))
    assert row["diff_ci_high"] < 0 and (row["verdict"], row["reason"]) == ("inconclusive", "skewed: declare bounds")
    text = report(*bare)
    table_row = next(line for line in text.splitlines() if line.startswith("Hopper-v5"))
    assert "inconclusive" in table_row and "skewed: declare bounds" in table_row
    legend = next(line for line in text.splitlines() if line.strip().startswith("skewed: declare bounds:"))
    assert "near-symmetric" in legend and "declare the task's bounds" in legend
    (row, _aggregate) = json.loads(report(dirs[(True, "a")], dirs[(True, "b")], "--json"))
    assert row["method"] == "betting" and row["reason"] == ""
