"""The strategy contract, over every registered strategy: a run killed mid-way and resumed with the same command
writes the lines an uninterrupted run writes, and replaying the lines gives the decisions the run recorded.

Real launcher processes on the shipped HalfCheetah run's checkpoints, tiny settings (50-step episodes). A new
strategy registers itself and adds its command to :data:`COMMANDS` (the first test fails until it does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from helpers import write_dist_info
from launch_helpers import _env

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.sequential import LookPlan
from simeval.strategies import CellLooks, LookStrategy, registered

A = os.path.join(SHIPPED_RUN, "step_000126976.pt")
B = os.path.join(SHIPPED_RUN, "step_001001472.pt")
SUITE = """\
name: contract
episodes: 16
seed: 0
num_envs: 4
max_steps: 50
tasks:
  - env: HalfCheetah-v5
    conditions:
      nominal: {}
      noisy: {observation_noise: 3.0}
"""
SMALL_SUITE = SUITE.replace("episodes: 16", "episodes: 4")

COMMANDS = {
    "fixed": ["--suite", "small.yaml", "--watch", SHIPPED_RUN, "--until-step", "376832", "--poll-interval", "0.1"],
    "until-decided": ["--suite", "suite.yaml", "--checkpoint", B, "--baseline", A, "--until-decided",
                      "--look-every", "4"],
    "until-precise": ["--suite", "suite.yaml", "--checkpoint", B, "--until-precise", "20", "--look-every", "4"],
    "select-best": ["--select-best", "--checkpoint", os.path.join(SHIPPED_RUN, "step_000501760.pt"), "--checkpoint",
                    B, "--num-envs", "4", "--max-steps", "50", "--look-every", "4", "--max-episodes", "16"],
    "search": ["--search", "body_mass_scale=0.5:3.0", "--checkpoint", B, "--fail-below", "80", "--num-envs", "8",
               "--max-steps", "30", "--seed", "0", "--max-episodes", "48"],
}  # fmt: skip
"""Each registered strategy's command (``--out`` added): small, several rounds, so that a kill lands mid-way."""

KEPT = ("status", "step", "checkpoint_name", "task", "condition", "seed", "look", "stop", "sequential", "region",
        "map", "episode_returns", "episode_seeds", "episode_lengths", "error")  # fmt: skip
"""What must be the same in both runs' lines (not: when and where it ran, how long, how many attempts)."""


def test_every_registered_strategy_has_a_contract_command():
    assert sorted(k.name for k in registered()) == sorted(COMMANDS)


PLUGIN = """\
from simeval.strategies import StrategyKind
from simeval.strategies.fixed import FixedStrategy


class Twice(StrategyKind):
    name = "{name}"
    summary = "every checkpoint twice"
    modes = ("twice",)

    @property
    def strategy(self):
        return FixedStrategy
"""


@pytest.mark.parametrize("name", ["twice", "fixed"])
def test_a_strategy_is_registered_by_its_entry_point_and_a_taken_name_is_one_line(name, tmp_path, monkeypatch):
    (tmp_path / "twice_strategy.py").write_text(PLUGIN.format(name=name))
    write_dist_info(tmp_path, "twice_strategy", "simeval.strategies", "twice = twice_strategy:Twice")
    monkeypatch.syspath_prepend(str(tmp_path))
    registered.cache_clear()
    try:
        if name == "fixed":
            with pytest.raises(ValueError, match=r"entry point twice = twice_strategy:Twice .*'fixed' is taken"):
                registered()
        else:
            assert [k.name for k in registered()] == [
                "fixed", "until-decided", "until-precise", "select-best", "search", "twice"
            ]  # fmt: skip
            from simeval.strategies import kind_for

            assert kind_for("twice").name == "twice"
    finally:
        sys.modules.pop("twice_strategy", None)
        registered.cache_clear()


def test_every_mode_the_launcher_runs_is_a_registered_strategy_s_and_back():
    from simeval.launch.app import MODES
    from simeval.strategies import kind_for

    assert {m: kind_for(m).name for m in MODES if m != "serve"} == {
        "until-decided": "until-decided", "until-precise": "until-precise", "suite": "fixed", "checkpoint": "fixed",
        "policy-server": "fixed", "watch": "fixed", "select-best": "select-best", "search": "search",
    }  # fmt: skip
    assert all(m in MODES for kind in registered() for m in kind.modes)
    with pytest.raises(ValueError, match="no registered strategy drives mode 'serve'"):
        kind_for("serve")


def _launch(args: list[str], out: str, cwd: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "simeval.launch", *args, "--out", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(None), cwd=cwd, start_new_session=True,
    )  # fmt: skip


def _files(out: str) -> list[str]:
    return sorted(
        os.path.join(folder, name) for folder, _, names in os.walk(out) for name in names if name == "results.jsonl"
    )


def _lines(out: str) -> dict[str, list[dict]]:
    """Each results file's lines (by its path under ``out``), what :data:`KEPT` names of them, in a stable order."""
    found = {}
    for path in _files(out):
        with open(path) as f:
            rows = [{k: r.get(k) for k in KEPT} for r in map(json.loads, f) if r]
        found[os.path.relpath(path, out)] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))
    return found


def _newest(out: str) -> dict[str, list[dict]]:
    """:func:`_lines`, the newest line of each round only (a resume re-evaluates a round the kill abandoned)."""
    found = {}
    for path, rows in _lines(out).items():
        by_round = {(r["checkpoint_name"], r["task"], r["condition"], r["look"], json.dumps(r["region"])): r
                    for r in rows}  # fmt: skip
        found[path] = sorted(by_round.values(), key=lambda r: json.dumps(r, sort_keys=True))
    return found


def _replayable(out: str, names: list[str]) -> int:
    """The rounds a resume of ``out`` can replay, ``names`` its results files (relative): with B against A (two
    files), the looks both files hold (a look found for one side only is evaluated again for both; a file not
    written yet holds none); with one file, its whole lines."""
    keys = []
    for name in names:
        path = os.path.join(out, name)
        found = set()
        if os.path.exists(path):
            with open(path) as f:
                for number, line in enumerate(f):
                    try:
                        r = json.loads(line)
                    except ValueError:  # a line the kill tore
                        continue
                    found.add((r.get("task"), r.get("condition"), r.get("look")) if len(names) > 1 else number)
        keys.append(found)
    return len(set.intersection(*keys)) if keys else 0


def _count(out: str) -> int:
    total = 0
    for path in _files(out):
        with open(path) as f:
            total += sum(1 for line in f if line.strip())
    return total


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("strategies")
    (root / "suite.yaml").write_text(SUITE)
    (root / "small.yaml").write_text(SMALL_SUITE)
    return str(root)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_run_killed_mid_way_and_resumed_writes_the_lines_of_an_uninterrupted_run(name, folder):
    args = COMMANDS[name]
    whole = _launch(args, f"{name}-whole", folder)
    assert whole.wait(timeout=240) == 0, whole.stderr.read()[-3000:]
    expected = _lines(os.path.join(folder, f"{name}-whole"))

    out = os.path.join(folder, f"{name}-killed")
    killed = _launch(args, out, folder)
    deadline = time.monotonic() + 240
    while _replayable(out, list(expected)) < 1 and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(killed.pid, signal.SIGKILL)  # the launcher and its workers, mid-way: nothing is flushed
    killed.wait(timeout=30)
    written = _count(out)
    assert 1 <= written < sum(len(v) for v in expected.values()), "the kill came before any line or after the last"

    again = _launch(args, out, folder)
    stdout, stderr = again.communicate(timeout=240)
    assert again.returncode == 0, stderr[-3000:]
    assert "resuming:" in stdout, stdout
    assert _newest(out) == expected

    once_more = _launch(args, out, folder)
    stdout, stderr = once_more.communicate(timeout=240)
    assert once_more.returncode == 0, stderr[-3000:]
    assert _count(out) == sum(len(v) for v in _lines(out).values())  # nothing evaluated the third time
    assert _newest(out) == expected


@pytest.mark.parametrize("name", ["until-decided", "until-precise"])
def test_replaying_a_look_by_look_run_s_lines_gives_the_decisions_it_recorded(name, folder):
    """The strategy's replay (no launcher) stops each cell at the look, and for the reason, the run recorded."""
    out = os.path.join(folder, f"{name}-whole")
    if not os.path.exists(out):
        pytest.skip("the uninterrupted run of the test above did not run")
    sides_of = {"until-decided": {"A": "a", "B": "b"}, "until-precise": {"": "."}}[name]
    lines = {}
    for label, sub in sides_of.items():
        with open(os.path.join(out, sub, "results.jsonl")) as f:
            lines[label] = [json.loads(line) for line in f if line.strip()]
    recorded = {(r["task"], r["condition"]): (r["look"], r["stop"]) for r in lines[next(iter(lines))] if "stop" in r}
    first = lines[next(iter(lines))][0]
    plan = LookPlan.from_data(first["sequential"])
    runs = [CellLooks(None, f"{task} / {condition}", (task, condition), plan) for task, condition in recorded]
    sides = [SimpleNamespace(label=label, ck=None, name=label) for label in sides_of]
    strategy = LookStrategy(sides, runs, lambda run: SimpleNamespace(key=(*run.key, run.look)))
    found = strategy.replay(lines)
    assert {run.key: (run.look, run.stop) for run in runs} == recorded
    assert found.stopped == len(runs) and strategy.finished and strategy.propose() == []
