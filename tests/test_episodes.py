"""Sections 4-5: complete episodes, no short-episode bias, no stale episodes, seeds."""

from __future__ import annotations

import functools

import pytest
from helpers import cheetah, const_policy, count_env, mlp_policy

from simeval import Evaluator
from simeval.metrics import episode_quotas


def test_quotas_follow_the_sb3_scheme():
    assert episode_quotas(4, 2) == [2, 2]
    assert episode_quotas(5, 2) == [2, 3]
    assert episode_quotas(10, 16) == [0] * 6 + [1] * 10
    assert sum(episode_quotas(37, 8)) == 37
    with pytest.raises(ValueError, match="num_trajectories"):
        episode_quotas(0, 2)


def test_batched_envs_do_not_favour_short_episodes(backend):
    # Sub-env 0 finishes an episode every step, sub-env 1 every 10 steps. Keeping
    # "the first 4 to finish" would report 1.0; the quota keeps 2 of each.
    env = functools.partial(count_env, lengths=(1, 10))
    ev = Evaluator(env, policy_factory=const_policy, num_trajectories=4, backend=backend, keep_episodes=True)
    try:
        result = ev.evaluate()
    finally:
        ev.shutdown()
    assert result["eval/episode_returns"].tolist() == [1.0, 1.0, 10.0, 10.0]
    assert result["eval/episode_lengths"].tolist() == [1, 1, 10, 10]
    assert result["eval/reward"] == 5.5
    assert result["eval/episode_length"] == 5.5
    assert result["eval/num_episodes"] == 4


def test_episodes_begun_under_earlier_weights_are_never_reported(backend):
    # Every episode of a round must be played entirely with that round's weights.
    env = functools.partial(count_env, lengths=(3, 5, 7))
    ev = Evaluator(env, policy_factory=const_policy, num_trajectories=3, backend=backend, keep_episodes=True)
    try:
        first = ev.evaluate(const_policy(w=1.0))
        second = ev.evaluate(const_policy(w=2.0))
        third = ev.evaluate(const_policy(w=3.0))
    finally:
        ev.shutdown()
    assert first["eval/episode_returns"].tolist() == [3.0, 5.0, 7.0]
    assert second["eval/episode_returns"].tolist() == [6.0, 10.0, 14.0]
    assert third["eval/episode_returns"].tolist() == [9.0, 15.0, 21.0]


def test_exactly_num_trajectories_and_max_steps_cut_counts_as_complete():
    env = functools.partial(count_env, lengths=(1000, 1000))
    ev = Evaluator(env, policy_factory=const_policy, num_trajectories=5, max_steps=7, keep_episodes=True)
    try:
        result = ev.evaluate()
    finally:
        ev.shutdown()
    assert result["eval/num_episodes"] == 5
    assert result["eval/episode_lengths"].tolist() == [7] * 5
    assert result["eval/reward"] == 7.0


def test_max_steps_is_honoured_when_the_env_counts_steps_itself():
    # make_env adds a StepCounter; the evaluator's max_steps must still apply.
    ev = Evaluator(functools.partial(cheetah, 2), policy_factory=mlp_policy, num_trajectories=2, max_steps=15)
    try:
        result = ev.evaluate()
    finally:
        ev.shutdown()
    assert result["eval/episode_length"] == 15


def test_return_without_reward_sum_is_the_sum_of_rewards():
    with_sum = Evaluator(functools.partial(count_env, lengths=(2, 4)), const_policy(w=1.5), num_trajectories=4)
    without = Evaluator(
        functools.partial(count_env, lengths=(2, 4), reward_sum=False), const_policy(w=1.5), num_trajectories=4
    )
    try:
        a, b = with_sum.evaluate(), without.evaluate()
    finally:
        with_sum.shutdown()
        without.shutdown()
    assert a["eval/reward"] == b["eval/reward"] == 4.5


def test_unbatched_env_works():
    from torchrl.envs import GymEnv, RewardSum, TransformedEnv

    def make():
        return TransformedEnv(GymEnv("Pendulum-v1"), RewardSum())

    import torch
    from tensordict.nn import TensorDictModule

    policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    ev = Evaluator(make, policy, num_trajectories=2, max_steps=20)
    try:
        result = ev.evaluate()
    finally:
        ev.shutdown()
    assert result["eval/num_episodes"] == 2
    assert result["eval/episode_length"] == 20


def test_seed_gives_identical_numbers_every_round(backend):
    ev = Evaluator(
        functools.partial(cheetah, 2),
        policy_factory=mlp_policy,
        num_trajectories=2,
        max_steps=30,
        seed=123,
        backend=backend,
    )
    try:
        weights = mlp_policy(seed=5)
        rounds = [ev.evaluate(weights) for _ in range(2)]
    finally:
        ev.shutdown()
    assert rounds[0]["eval/reward"] == rounds[1]["eval/reward"]
    assert rounds[0]["eval/reward_std"] == rounds[1]["eval/reward_std"]


def test_without_seed_rounds_differ():
    ev = Evaluator(functools.partial(cheetah, 2), policy_factory=mlp_policy, num_trajectories=2, max_steps=30)
    try:
        a, b = ev.evaluate(), ev.evaluate()
    finally:
        ev.shutdown()
    assert a["eval/reward"] != b["eval/reward"]


def test_same_weights_and_seed_give_the_same_numbers_on_every_backend(ray_cluster):
    weights = mlp_policy(seed=11)
    results = {}
    for backend in ("thread", "process", "ray"):
        ev = Evaluator(
            functools.partial(cheetah, 3),
            policy_factory=mlp_policy,
            num_trajectories=5,
            max_steps=25,
            seed=2024,
            backend=backend,
            keep_episodes=True,
        )
        try:
            results[backend] = ev.evaluate(weights)
        finally:
            ev.shutdown()
    ref = results["thread"]
    for backend in ("process", "ray"):
        got = results[backend]
        assert got["eval/reward"] == pytest.approx(ref["eval/reward"], rel=1e-6, abs=1e-6)
        assert got["eval/episode_returns"].tolist() == pytest.approx(ref["eval/episode_returns"].tolist(), rel=1e-6)
        assert got["eval/episode_lengths"].tolist() == ref["eval/episode_lengths"].tolist()
