"""tests/demo_table.py, the check that holds README.md's ``make demo`` tables to a run of the demo.

No demo run here (tests/test_training.py runs it once and checks README with it): README's own
tables stand in for what the demo printed, with one thing moved.
"""

from __future__ import annotations

import os

import pytest
from demo_table import machine, mismatches, readme_output
from launch_helpers import REPO

with open(os.path.join(REPO, "README.md"), encoding="utf-8") as _readme:
    README = _readme.read()
PRINTED = readme_output(README)
RECORDED = machine(PRINTED)


def test_readme_names_the_machine_its_tables_came_from():
    from simeval.demo.fingerprint import LIBRARIES

    assert RECORDED and all(f"{name} " in RECORDED for name in LIBRARIES)


def test_on_the_recorded_machine_a_moved_digit_fails_naming_its_row():
    assert mismatches(PRINTED, README, RECORDED) == []
    moved = PRINTED.replace("1604.9", "1605.0", 1)
    (problem,) = mismatches(moved, README, RECORDED)
    assert "trained, step 126,976 1604.9" in problem and "1605.0" in problem
    fewer = PRINTED.replace("episodes used: 80", "episodes used: 72", 1)
    (problem,) = mismatches(fewer, README, RECORDED)
    assert "episodes used: 72" in problem


def test_a_readme_without_the_machine_line_fails():
    stale = README.replace(f"machine: {RECORDED}\n", "")
    assert mismatches(PRINTED, stale, RECORDED) == ["README.md's demo table has no 'machine:' line"]


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("1604.9      [1555.3, 1654.4]", "1685.6      [1643.0, 1728.1]", None),  # moved, overlapping: fine
        ("1604.9      [1555.3, 1654.4]", "1705.6      [1663.0, 1748.1]", "do not overlap"),
        ("[1214.3, 3086.9]  better", "[1214.3, 3086.9]  inconclusive", "README says"),
        ("t-mixture CS              8  decided", "t-mixture CS             16  decided", "more than one look"),
        ("t-mixture CS              8  decided", "t-mixture CS              4  decided", None),
    ],
)
def test_on_another_machine_rows_verdicts_episodes_and_intervals_are_compared(old, new, said):
    assert old in PRINTED
    problems = mismatches(PRINTED.replace(old, new, 1), README, "another CPU, numpy 0, torch 0, mujoco 0")
    assert (problems == []) if said is None else (len(problems) == 1 and said in problems[0]), problems
