"""The native env's direct rounds (no Collector) equal the Collector's episodes, and step aside where they cannot."""

from __future__ import annotations

import functools
import time

import pytest
import torch
from helpers import cheetah, mlp_policy, vecnorm_of, warmed_cheetah

from simeval import EvalError, Evaluator
from simeval.envs import OBS_NORM_ID, make_env
from simeval.settings import EvalSettings
from simeval.worker.eval_worker import EvalWorker

pytestmark = pytest.mark.required


def _policy(env):
    obs_dim = env.observation_spec["observation"].shape[-1]
    return mlp_policy(seed=5, obs_dim=obs_dim, act_dim=env.action_spec.shape[-1])


def _round(factory, *, collector: bool, weights=None, **kwargs) -> dict:
    """One seeded round through the public API: the default direct rollout, or torchrl's Collector when asked."""
    if collector:
        kwargs["collector_cls"] = "Collector"
    with Evaluator(factory, policy_factory=_policy, seed=11, keep_episodes=True, **kwargs) as ev:
        return ev.evaluate(weights_dict=weights)


def _episodes(result: dict) -> tuple:
    return tuple(
        result[f"eval/{key}"].tolist() if hasattr(result[f"eval/{key}"], "tolist") else result[f"eval/{key}"]
        for key in ("episode_returns", "episode_lengths")
    )


@pytest.mark.parametrize(
    ("task", "num_envs", "episodes", "max_steps", "groups"),
    [
        ("HalfCheetah-v5", 16, 20, 40, 1),  # the default: one group; uneven quotas, the step cap truncates
        ("HalfCheetah-v5", 16, 20, 40, 2),  # two groups of 8 overlapped on the physics thread
        ("Hopper-v5", 16, 40, 200, 2),  # terminations at different steps, several episodes per sub-env
        ("Hopper-v5", 5, 7, 100, 2),  # groups of 3 and 2, odd quotas
    ],
)
def test_direct_rounds_equal_the_collector_episode_for_episode(task, num_envs, episodes, max_steps, groups):
    factory = functools.partial(make_env, task, num_envs=num_envs, obs_norm=False, groups=groups)
    fast = _round(factory, collector=False, num_trajectories=episodes, max_steps=max_steps)
    slow = _round(factory, collector=True, num_trajectories=episodes, max_steps=max_steps)
    assert len(fast["eval/episode_returns"]) == episodes
    if groups == 1:
        assert _episodes(fast) == _episodes(slow)  # bit for bit, same order
        for key in ("reward", "reward_std", "reward_ci_low", "reward_ci_high", "episode_length"):
            assert fast[f"eval/{key}"] == slow[f"eval/{key}"], key
    else:  # the policy runs on each half: its matrix products may round by batch size (AVX-512)
        (returns, lengths), (want_returns, want_lengths) = _episodes(fast), _episodes(slow)
        assert lengths == want_lengths
        assert returns == pytest.approx(want_returns, rel=1e-6, abs=1e-5)
    for key in ("terminated_fraction", "truncated_fraction"):
        assert fast.get(f"eval/{key}") == slow.get(f"eval/{key}"), key


def test_frozen_vecnorm_statistics_normalise_the_direct_rollout_observations_as_the_collector_does():
    train_env = warmed_cheetah(num_envs=4, steps=40)
    weights = {"policy": mlp_policy(seed=3), OBS_NORM_ID: vecnorm_of(train_env)}
    count = vecnorm_of(train_env)._count["observation"].clone()
    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=16, max_steps=50, groups=2)
    fast = _round(factory, collector=False, weights=weights, num_trajectories=16, max_steps=50)
    slow = _round(factory, collector=True, weights=weights, num_trajectories=16, max_steps=50)
    assert _episodes(fast) == _episodes(slow)
    unnormalised = _round(functools.partial(cheetah, num_envs=16, max_steps=50), collector=False, num_trajectories=16)
    assert _episodes(unnormalised) != _episodes(fast)  # the statistics were really applied
    assert torch.equal(vecnorm_of(train_env)._count["observation"], count)  # and never updated


def _worker(**settings) -> EvalWorker:
    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=8, obs_norm=False)
    worker = EvalWorker(
        EvalSettings(num_trajectories=8, max_steps=20, **settings), env_factory=factory, policy_factory=_policy
    )
    worker.build()
    return worker


def test_the_direct_rollout_runs_by_default_and_the_collector_wherever_it_cannot_reproduce_it():
    worker = _worker()
    assert worker._direct is not None
    worker.close()
    for settings in (
        {"collector_cls": "Collector"},
        {"metrics_fn": len},
        {"frames_per_batch": 64},
        {"info_keys": (("x",),)},
    ):
        worker = _worker(**settings)
        assert worker._direct is None, settings
        worker.close()
    gym = EvalWorker(
        EvalSettings(num_trajectories=2, max_steps=5),
        env_factory=functools.partial(make_env, "HalfCheetah-v5", num_envs=2, backend="gymnasium", obs_norm=False),
        policy_factory=_policy,
    )
    gym.build()
    assert gym._direct is None
    gym.close()


def test_shutdown_stops_a_direct_round_between_two_steps():
    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=16, obs_norm=False, groups=2)
    ev = Evaluator(factory, policy_factory=_policy, num_trajectories=10_000, max_steps=1000)
    ev.trigger_eval(step=1)
    time.sleep(1.0)  # the round (about a minute of steps) is under way
    assert ev.pending
    thread = ev._backend._lane.thread
    ev.shutdown(timeout=10)
    thread.join(10)
    assert not thread.is_alive()  # the round stopped; its physics thread was waited for
    with pytest.raises(EvalError, match="cancelled"):
        ev.poll()


def test_the_thread_backend_runs_the_policy_on_one_torch_thread_and_leaves_the_callers_alone():
    before = torch.get_num_threads()
    seen = {}

    def policy_factory(env):
        policy = _policy(env)
        forward = policy.forward

        def spy(td):
            seen["threads"] = torch.get_num_threads()
            return forward(td)

        policy.forward = spy
        return policy

    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=8, obs_norm=False)
    with Evaluator(factory, policy_factory=policy_factory, num_trajectories=8, max_steps=5) as ev:
        ev.evaluate()
    assert seen["threads"] == 1
    assert torch.get_num_threads() == before
