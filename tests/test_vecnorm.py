"""Section 6: VecNorm is frozen everywhere and its statistics travel in weights_dict."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from helpers import built_vecnorm_stats, cheetah, mlp_policy, vecnorm_of, warmed_cheetah

from simeval import EvalError, Evaluator
from simeval.envs import OBS_NORM_ID


def _eval_env():
    return cheetah(num_envs=2, obs_norm=True)


def test_training_statistics_reach_the_eval_env_on_every_backend(backend):
    train_env = warmed_cheetah()
    train_vn = vecnorm_of(train_env)
    policy = mlp_policy(seed=1)
    ev = Evaluator(
        _eval_env,
        policy_factory=mlp_policy,
        num_trajectories=2,
        max_steps=10,
        seed=0,
        metrics_fn=built_vecnorm_stats,
        backend=backend,
    )
    try:
        result = ev.evaluate(weights_dict={"policy": policy, OBS_NORM_ID: train_vn})
        # A second round with the same statistics: frozen, so nothing moved.
        again = ev.evaluate(weights_dict={"policy": policy, OBS_NORM_ID: train_vn})
    finally:
        ev.shutdown()
    assert result["eval/vecnorm_count"] == float(train_vn._count["observation"]) > 0
    assert result["eval/vecnorm_loc_sum"] == pytest.approx(float(train_vn._loc["observation"].sum()))
    assert result["eval/vecnorm_frozen"] == 1.0
    assert again["eval/vecnorm_count"] == result["eval/vecnorm_count"]
    assert again["eval/reward"] == result["eval/reward"]
    assert not math.isnan(result["eval/reward"])


def test_statistics_apply_through_torchrls_own_normalisation():
    """Eval with shipped statistics == eval on an env that holds the same statistics itself."""
    train_env = warmed_cheetah()
    policy = mlp_policy(seed=3)
    shipped = Evaluator(_eval_env, policy_factory=mlp_policy, num_trajectories=2, max_steps=12, seed=9)
    direct = Evaluator(train_env, mlp_policy(), num_trajectories=2, max_steps=12, seed=9)
    try:
        a = shipped.evaluate(weights_dict={"policy": policy, OBS_NORM_ID: vecnorm_of(train_env)})
        b = direct.evaluate(policy)
    finally:
        shipped.shutdown()
        direct.shutdown()
    assert a["eval/reward"] == pytest.approx(b["eval/reward"], rel=1e-6)


def test_vecnorm_without_statistics_is_an_error_not_nan(backend):
    ev = Evaluator(_eval_env, policy_factory=mlp_policy, num_trajectories=2, max_steps=5, backend=backend)
    try:
        with pytest.raises(EvalError, match="VecNorm.*no statistics"):
            ev.evaluate(mlp_policy())
        assert not ev.pending
        ev.trigger_eval(mlp_policy())
        with pytest.raises(EvalError, match="VecNorm"):
            ev.wait(60)
    finally:
        ev.shutdown()


def test_callers_env_is_frozen_only_during_the_round():
    env = warmed_cheetah()
    vn = vecnorm_of(env)
    count_before = vn._count["observation"].clone()
    ev = Evaluator(env, mlp_policy(), num_trajectories=2, max_steps=10)
    try:
        ev.evaluate()
    finally:
        ev.shutdown()
    assert torch.equal(vn._count["observation"], count_before)  # evaluation did not update
    assert vn.frozen is False  # ...and the caller's transform is left as it was
    env.rollout(3, break_when_any_done=False)
    assert vn._count["observation"] > count_before  # training keeps updating it


def _sub_env():
    return warmed_cheetah(num_envs=1, steps=20)


def _serial():
    from torchrl.envs import SerialEnv

    return SerialEnv(2, _sub_env)


def _parallel():
    from torchrl.envs import ParallelEnv

    return ParallelEnv(2, _sub_env, mp_start_method="spawn")


def _sub_counts(env):
    return [float(vecnorm_of(sub)._count["observation"]) for sub in env._envs]


def test_vecnorm_inside_serial_env_sub_envs_is_frozen():
    holder = {}

    def make():
        holder["env"] = _serial()
        return holder["env"]

    ev = Evaluator(make, policy_factory=functools.partial(mlp_policy), num_trajectories=2, max_steps=8, seed=1)
    try:
        first = ev.evaluate()
        counts = _sub_counts(holder["env"])
        second = ev.evaluate()
        assert _sub_counts(holder["env"]) == counts
        assert all(vecnorm_of(sub).frozen for sub in holder["env"]._envs)
    finally:
        ev.shutdown()
    assert first["eval/reward"] == second["eval/reward"]


def test_vecnorm_inside_parallel_env_workers_is_frozen():
    # Statistics inside worker processes cannot be read from here; if they were
    # updating, the second seeded round would normalise differently.
    ev = Evaluator(_parallel, policy_factory=mlp_policy, num_trajectories=2, max_steps=30, seed=4)
    try:
        first, second = ev.evaluate(), ev.evaluate()
    finally:
        ev.shutdown()
    assert first["eval/reward"] == second["eval/reward"]
