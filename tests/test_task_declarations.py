"""What a suite task or its simulator declares about its returns (issue 46, part 2): ``deterministic: true`` (identical
differences are then a verdict, in the launcher's looks and in ``report compare``) and the return bounds a simulator
guarantees (:meth:`Simulator.return_bounds`, taken where the suite declares none).

The launcher runs are real: the shipped HalfCheetah run's final checkpoint against itself on a suite of 30-step
episodes. The policy acts deterministically and both sides play the same episode seeds, so every difference B - A
is exactly 0: an ``--until-decided --margin 1`` run is ``equivalent`` at its first look where the task is declared
deterministic, and withholds its verdict (``zero variance: declare deterministic``) where it is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from launch_helpers import cli
from test_simulators import install_plugin

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.envs.simulators import registered
from simeval.launch.config import ConfigError
from simeval.launch.suite import load_suite
from simeval.stats.verdicts import ZERO_VARIANCE

B = os.path.join(SHIPPED_RUN, "step_001001472.pt")
SUITE = """\
name: declared
episodes: 4
seed: 0
num_envs: 4
max_steps: 30
tasks:
  - env: HalfCheetah-v5
"""


def _lines(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _against_itself(tmp_path, suite_text: str, out: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """``--until-decided --margin 1`` of the final checkpoint against itself, one look of 4 episodes; compare's rows."""
    path = tmp_path / f"{out}.yaml"
    path.write_text(suite_text)
    run = tmp_path / out
    proc = cli("--suite", str(path), "--checkpoint", B, "--baseline", B, "--until-decided", "--look-every", "4",
               "--max-episodes", "4", "--margin", "1", "--out", str(run))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = subprocess.run(
        [sys.executable, "-m", "simeval.report", "compare", str(run / "a"), str(run / "b"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    return proc, json.loads(report.stdout)


def test_a_deterministic_task_decides_from_identical_differences_and_the_same_task_undeclared_does_not(tmp_path):
    proc, rows = _against_itself(tmp_path, SUITE + "    deterministic: true\n", "det")
    assert "B - A +0.00 [+0.00, +0.00] equivalent: stop (equivalent)" in proc.stdout
    lines = _lines(str(tmp_path / "det" / "a" / "results.jsonl"))
    assert [line["deterministic"] for line in lines] == [True]
    assert (rows[0]["verdict"], rows[0]["reason"], rows[0]["stop"]) == ("equivalent", "", "equivalent")

    proc, rows = _against_itself(tmp_path, SUITE, "plain")
    assert "B - A +0.00 [+0.00, +0.00] inconclusive: stop (budget)" in proc.stdout
    (line,) = _lines(str(tmp_path / "plain" / "a" / "results.jsonl"))
    assert "deterministic" not in line
    assert (rows[0]["verdict"], rows[0]["reason"], rows[0]["stop"]) == ("inconclusive", ZERO_VARIANCE, "budget")


def test_deterministic_is_a_boolean_one_line_naming_the_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(SUITE + "    deterministic: yes please\n")
    with pytest.raises(ConfigError) as err:
        load_suite(str(path))
    assert str(err.value) == f"{path}: tasks[0].deterministic: true or false, got 'yes please'."
    path.write_text(SUITE)
    (task,) = load_suite(str(path)).tasks
    assert task.deterministic is False


BOUNDED = '''
from simeval.envs.simulators.gymnasium_vector import GymnasiumVector


class Pendulums(GymnasiumVector):
    """Pendulum-v1 under a prefix of its own, declaring its return range (reward in [-16.3, 0] a step, 200 steps)."""

    name = "bounded"
    title = "Bounded pendulums"
    prefix = "bounded"
    fallback = False

    def return_bounds(self, name):
        return {"bounded:Pendulum-v1": (-3300, 0), "bounded:Broken-v1": (0, 0)}.get(name)
'''


def test_a_simulators_return_bounds_apply_where_the_suite_declares_none(tmp_path, monkeypatch):
    install_plugin(tmp_path, monkeypatch, "bounded_sim", BOUNDED, "bounded = bounded_sim:Pendulums")
    try:
        path = tmp_path / "s.yaml"
        path.write_text(
            "name: bounds\ntasks:\n  - env: bounded:Pendulum-v1\n  - env: bounded:Other-v1\n  - env: HalfCheetah-v5\n"
            "  - env: Hopper-v5\n    bounds: {low: -10, high: 4000}\n"
        )
        suite = load_suite(str(path))
        # the simulator's, none (it declares none for that task), none (no built-in declares any), the task's own
        assert [t.bounds for t in suite.tasks] == [(-3300.0, 0.0), None, None, (-10.0, 4000.0)]
        assert suite.cells()[0].context("bounds")["bounds"] == {"low": -3300.0, "high": 0.0}
        path.write_text("name: bounds\ntasks:\n  - env: bounded:Pendulum-v1\n    bounds: {low: -5000, high: 10}\n")
        assert load_suite(str(path)).tasks[0].bounds == (-5000.0, 10.0)  # the suite file's word is the last
        path.write_text("name: bounds\ntasks:\n  - env: bounded:Broken-v1\n")
        with pytest.raises(ConfigError, match=r"simulator bounded's return_bounds\('bounded:Broken-v1'\): low and"):
            load_suite(str(path))
    finally:
        sys.modules.pop("bounded_sim", None)
        registered.cache_clear()


def test_a_checkpoint_against_itself_runs_every_look(tmp_path):
    """An A/A run (``--baseline`` the same file as ``--checkpoint``), the sanity check of a setup, looks twice and
    stops on its budget. Before: its second look crashed the launcher, ``Converting a tensordict to boolean value is
    not permitted`` (the scheduler removed a queued job by equality, and equal paths compared the weights)."""
    path = tmp_path / "aa.yaml"
    path.write_text(SUITE.replace("episodes: 4", "episodes: 8"))
    proc = cli("--suite", str(path), "--checkpoint", B, "--baseline", B, "--until-decided", "--look-every", "4",
               "--max-episodes", "8", "--out", str(tmp_path / "aa"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = "look 1 HalfCheetah-v5 / nominal: 8 episodes each, B - A +0.00 [+0.00, +0.00] inconclusive: stop (budget)"
    assert last in proc.stdout
