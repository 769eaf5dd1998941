"""Every episode's return and length equal a bare loop's, on episodes that straddle the round's batches.

The oracle (:mod:`returns_oracle`) steps its own copy of the env with the same policy and seed
and adds raw rewards per sub-env: nothing of the Evaluator's (no tally, no RewardSum output, no
quota function). Each case runs the loop a round takes by default and torchrl's Collector with
batches whose length divides no episode, with make_env's RewardSum and without it: an env without
RewardSum has its returns summed by the tally, which carries an unfinished episode's partial
return from one batch into the next (native-autoreset envs, Isaac Lab and mjlab, always take that
path: tests/isaac_lab/test_tensor_rollout.py and tests/mj_lab/test_mjlab.py hold them to the same
oracle; the Warp env's cases are in tests/test_warp_env.py).
"""

from __future__ import annotations

import functools

import pytest
from helpers import count_env, mlp_policy
from returns_oracle import assert_same_episodes, bare_loop, without_reward_sum

from simeval import Evaluator
from simeval.envs import make_env

pytestmark = pytest.mark.required


def evaluate(factory, policy_factory, **kwargs) -> dict:
    with Evaluator(factory, policy_factory=policy_factory, keep_episodes=True, **kwargs) as ev:
        return ev.evaluate()


def _mlp(env, seed: int = 9):
    return mlp_policy(
        seed=seed, obs_dim=env.observation_spec["observation"].shape[-1], act_dim=env.action_spec.shape[-1]
    )


def test_a_custom_env_without_reward_sum_gives_the_bare_loops_returns():
    """CountEnv (episodes of 3, 5 and 7 steps, reward = action) under an MLP of the step count: every step's reward
    differs, and batches of 4 steps split episodes of every sub-env."""
    horizon, episodes = 4, 7
    policy = functools.partial(mlp_policy, obs_dim=1, act_dim=1, seed=2)
    for reward_sum in (False, True):
        factory = functools.partial(count_env, lengths=(3, 5, 7), reward_sum=reward_sum)
        oracle = bare_loop(factory(), policy(), episodes, seed=0)  # CountEnv ignores seeds
        assert oracle.straddling(horizon) >= 3 and len(set(oracle.returns64)) == 3  # a return per sub-env
        result = evaluate(factory, policy, num_trajectories=episodes, seed=0, frames_per_batch=3 * horizon)
        # RewardSum's float32 running sums, else the tally's float64 sums across batches
        assert_same_episodes(result, oracle, "float32" if reward_sum else "float64")


@pytest.mark.parametrize("env_backend", ["native", "gymnasium"])
def test_mujoco_returns_equal_the_bare_loops_with_and_without_reward_sum(env_backend):
    """Hopper under a fixed MLP: falls at 21 to 24 steps and the 30-step cap; batches of 7 steps split them."""
    horizon, episodes, max_steps, seed = 7, 7, 30, 11
    factory = functools.partial(
        make_env, "Hopper-v5", num_envs=3, obs_norm=False, max_steps=max_steps, backend=env_backend
    )
    env = factory()
    oracle = bare_loop(env, _mlp(env), episodes, seed=seed)
    env.close()
    assert oracle.straddling(horizon) >= 3
    assert len(set(oracle.lengths)) > 2 and max_steps in oracle.lengths  # terminations and the cap
    round_ = functools.partial(evaluate, policy_factory=_mlp, num_trajectories=episodes, max_steps=max_steps, seed=seed)
    split = {"collector_cls": "Collector", "frames_per_batch": 3 * horizon}
    if env_backend == "native":  # the default loop: no Collector, RewardSum's float32 sums in NumPy
        assert_same_episodes(round_(factory), oracle, "float32")
    assert_same_episodes(round_(factory, **split), oracle, "float32")  # RewardSum's value at each episode's end
    # No RewardSum: the tally sums the rewards, carrying each unfinished episode into the next batch.
    assert_same_episodes(round_(functools.partial(without_reward_sum, factory), **split), oracle, "float64")
