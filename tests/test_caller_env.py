"""A caller's env instance is left exactly as it was found: same transform objects, same flags."""

from __future__ import annotations

import pytest
import torch
from helpers import CountEnv, const_policy
from torchrl.envs import Compose, RewardSum, StepCounter, TransformedEnv
from torchrl.envs.transforms import VecNormV2

from simeval import Evaluator


def _warm(env: TransformedEnv) -> TransformedEnv:
    """Statistics in the env's VecNorm, as a training env would have."""
    env.rollout(6, policy=const_policy(w=1.0), break_when_any_done=False)
    return env


def single_vecnorm():
    return _warm(TransformedEnv(CountEnv([4, 6]), VecNormV2(in_keys=["observation"])))


def composed():
    env = TransformedEnv(CountEnv([4, 6]), Compose(VecNormV2(in_keys=["observation"]), RewardSum()))
    return _warm(env)


def with_step_counter():
    return _warm(TransformedEnv(CountEnv([4, 6]), Compose(StepCounter(50), VecNormV2(in_keys=["observation"]))))


def untransformed():
    return CountEnv([4, 6])


def _structure(env):
    """Everything a user's code could hold on to: the transform objects, their order, their flags."""
    if not isinstance(env, TransformedEnv):
        return (type(env), None)
    transform = env.transform
    parts = list(transform) if isinstance(transform, Compose) else [transform]
    return (
        env.base_env,
        transform,
        [(t, type(t), getattr(t, "frozen", None), getattr(t, "max_steps", None)) for t in parts],
    )


@pytest.mark.parametrize("make", [single_vecnorm, composed, with_step_counter, untransformed])
def test_evaluate_leaves_the_callers_env_as_it_found_it(make):
    env = make()
    before = _structure(env)
    ev = Evaluator(env, const_policy(w=2.0), num_trajectories=4, max_steps=3, keep_episodes=True)
    try:
        first = ev.evaluate()
        ev.trigger_eval(step=5)
        second = ev.wait(60)
    finally:
        ev.shutdown()
    assert _structure(env) == before
    if isinstance(env, TransformedEnv) and isinstance(env.transform, VecNormV2):
        # The bug report: env.transform._count broke once simeval appended a StepCounter.
        assert float(env.transform._count["observation"]) > 0
    # max_steps is honoured all the same: episodes of 4 and 6 steps are cut at 3.
    for result in (first, second):
        assert result["eval/episode_lengths"].tolist() == [3, 3, 3, 3]
        assert result["eval/episode_returns"].tolist() == [6.0, 6.0, 6.0, 6.0]


def test_the_callers_vecnorm_keeps_learning_between_rounds():
    env = single_vecnorm()
    ev = Evaluator(env, const_policy(w=1.0), num_trajectories=2)
    try:
        count = float(env.transform._count["observation"])
        ev.evaluate()
        assert float(env.transform._count["observation"]) == count  # frozen during the round
        env.rollout(3, policy=const_policy(w=1.0), break_when_any_done=False)  # training goes on
        assert float(env.transform._count["observation"]) > count
        assert env.transform.frozen is False
        ev.evaluate()
    finally:
        ev.shutdown()
    assert torch.isfinite(env.transform._loc["observation"]).all()
