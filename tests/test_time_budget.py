"""Evaluator(time_budget_s=S) and --time-budget: each round's count from the latest round's measured rate.

Real components only: the native MuJoCo HalfCheetah (which never terminates, so every kept episode of a
round capped at max_steps has exactly max_steps steps) and a real MLP policy. The tests check what the
rounds did against the numbers the previous result reports (its round_seconds, num_episodes, num_envs),
never how fast anything ran.
"""

from __future__ import annotations

import functools
import json
import math
import os

import pytest
from helpers import mlp_policy
from launch_helpers import cli

from simeval import Evaluator
from simeval.envs import make_env

NUM_ENVS = 4
MAX_STEPS = 20
CHEETAH = functools.partial(make_env, "HalfCheetah-v5", num_envs=NUM_ENVS, max_steps=MAX_STEPS, obs_norm=False)


def _budgeted(seconds: float, **kwargs) -> Evaluator:
    kwargs.setdefault("policy_factory", mlp_policy)
    return Evaluator(CHEETAH, time_budget_s=seconds, max_steps=MAX_STEPS, seed=0, keep_episodes=True, **kwargs)


def _expected_count(previous: dict, budget: float) -> int:
    """What the next round must run: whole waves of num_envs episodes at the previous round's seconds per wave."""
    num_envs = previous["eval/num_envs"]
    waves_run = math.ceil(previous["eval/num_episodes"] / num_envs)
    seconds_per_wave = previous["eval/round_seconds"] / waves_run
    return max(1, math.floor(budget / seconds_per_wave)) * num_envs


def _check_round(result: dict, budget: float) -> int:
    """Every episode complete (none cut at the budget), a whole number of waves; the round's count."""
    n = result["eval/num_episodes"]
    assert result["eval/time_budget_s"] == budget
    assert result["eval/num_envs"] == NUM_ENVS
    assert result["eval/round_seconds"] > 0
    assert n >= NUM_ENVS and n % NUM_ENVS == 0
    assert result["eval/episode_lengths"].tolist() == [MAX_STEPS] * n
    assert len(result["eval/episode_returns"]) == n
    return n


def test_first_round_is_one_wave_then_whole_waves_from_the_latest_measured_rate():
    budget = 1.0  # many waves of 20-step episodes
    ev = _budgeted(budget)
    try:
        first = ev.evaluate(step=1)
        assert _check_round(first, budget) == NUM_ENVS  # no measurement yet: one wave
        second = ev.evaluate(step=2)
        assert _check_round(second, budget) == _expected_count(first, budget)
        assert second["eval/num_episodes"] > NUM_ENVS  # a budget much larger than a wave: the count grows
        third = ev.evaluate(step=3)
        assert _check_round(third, budget) == _expected_count(second, budget)  # the latest round's rate
    finally:
        ev.shutdown()


def test_a_tiny_budget_stays_at_one_wave_never_zero():
    budget = 1e-6
    ev = _budgeted(budget)
    try:
        for step in range(3):
            assert _check_round(ev.evaluate(step=step), budget) == NUM_ENVS
    finally:
        ev.shutdown()


def test_a_queued_round_is_sized_from_the_round_that_ran_before_it():
    budget = 0.5
    ev = _budgeted(budget, busy_policy="queue")
    try:
        assert ev.trigger_eval(step=1) and ev.trigger_eval(step=2)  # the second is queued while the first runs
        first, second = ev.wait(60), ev.wait(60)
        assert first["eval/step"] == 1 and second["eval/step"] == 2
        assert _check_round(first, budget) == NUM_ENVS
        assert _check_round(second, budget) == _expected_count(first, budget)
    finally:
        ev.shutdown()


def test_the_process_backend_plans_rounds_the_same_way():
    budget = 0.5
    ev = _budgeted(budget, backend="process")
    try:
        first = ev.evaluate(step=1)
        assert _check_round(first, budget) == NUM_ENVS
        second = ev.evaluate(step=2)
        assert _check_round(second, budget) == _expected_count(first, budget)
    finally:
        ev.shutdown()


def test_ray_workers_split_each_planned_round(ray_cluster):
    budget = 0.5
    ev = _budgeted(budget, backend="ray", num_workers=2, num_gpus=0, ray_kwargs={"num_cpus": 0.5})
    try:
        first = ev.evaluate(step=1)
        assert _check_round(first, budget) == NUM_ENVS
        second = ev.evaluate(step=2)
        assert _check_round(second, budget) == _expected_count(first, budget)
        assert [w["worker"] for w in second["eval/workers"]] == [0, 1]  # both shards ran their share
    finally:
        ev.shutdown()


def test_without_a_budget_nothing_changes():
    ev = Evaluator(CHEETAH, policy_factory=mlp_policy, num_trajectories=6, max_steps=MAX_STEPS)
    try:
        result = ev.evaluate()
        assert result["eval/num_episodes"] == 6
        assert not {"eval/time_budget_s", "eval/round_seconds", "eval/num_envs"} & set(result)
    finally:
        ev.shutdown()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(time_budget_s=0), "time_budget_s must be a number of seconds > 0, got 0."),
        (dict(time_budget_s=-1.5), "time_budget_s must be a number of seconds > 0, got -1.5."),
        (dict(time_budget_s=float("inf")), "time_budget_s must be a number of seconds > 0, got inf."),
        (dict(time_budget_s="2"), "time_budget_s must be a number of seconds > 0, got '2'."),
        (dict(time_budget_s=2, num_trajectories=10), "give num_trajectories or time_budget_s, not both"),
        (dict(time_budget_s=2, num_trajectories=32), "give num_trajectories or time_budget_s, not both"),
    ],
)
def test_bad_budgets_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")) as info:
        Evaluator(CHEETAH, policy_factory=mlp_policy, **kwargs)
    assert "\n" not in str(info.value)


def test_launcher_time_budget_writes_the_budget_and_the_count_to_results_jsonl(tmp_path):
    from simeval.checkpoints.shipped import shipped_checkpoint

    out = tmp_path / "out"
    proc = cli(
        "--checkpoint", shipped_checkpoint(), "--time-budget", "2", "--num-envs", "2", "--max-steps", "30",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = [json.loads(line) for line in open(os.path.join(out, "results.jsonl")) if line.strip()]
    assert record["status"] == "ok"
    metrics = record["metrics"]
    assert metrics["time_budget_s"] == 2 and metrics["num_envs"] == 2
    assert metrics["num_episodes"] == 2  # the run's only round: one wave
    assert record["episode_lengths"] == [30, 30]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--time-budget", "2", "--episodes", "8"), "give --episodes or --time-budget, not both"),
        (("--time-budget", "0"), "--time-budget must be a number of seconds > 0, got 0.0."),
    ],
)
def test_launcher_bad_budgets_are_one_line_config_errors(args, message, tmp_path):
    proc = cli("--checkpoint", "no-such.pt", *args, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
