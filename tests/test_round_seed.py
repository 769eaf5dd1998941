"""A round's own seed: ``evaluate(seed=s)`` / ``trigger_eval(seed=s)`` give the episodes of an evaluator built with
``seed=s``, on every backend and engine, sharded Ray rounds included; the next round without one goes back to the
evaluator's own seed.

HalfCheetah-v5 (native MuJoCo) of 30-step episodes on 2 sub-envs, 4 episodes a round, under a condition drawn per
episode (observation noise in a range, action noise): the envs' seeding, the episode seeds and the condition's
draws all follow the round's seed.
"""

from __future__ import annotations

import functools
import inspect

import pytest
from helpers import mlp_policy

from simeval import Evaluator
from simeval.conditions import episode_seed
from simeval.envs import make_env

ENV = functools.partial(
    make_env,
    "HalfCheetah-v5",
    num_envs=2,
    max_steps=30,
    obs_norm=False,
    condition={"observation_noise": [0.0, 0.5], "action_noise": 0.1},
)
EPISODE_KEYS = ("episode_returns", "episode_lengths", "episode_seeds", "episode_conditions/observation_noise")


def _evaluator(backend: str = "thread", seed: int | None = 0, **kwargs) -> Evaluator:
    return Evaluator(
        ENV, policy_factory=mlp_policy, num_trajectories=4, seed=seed, backend=backend, keep_episodes=True, **kwargs
    )


def _episodes(result: dict) -> dict[str, list[float] | None]:
    """The round's episodes as plain lists: returns, lengths, seeds and the condition's draws."""
    out = {}
    for key in EPISODE_KEYS:
        values = result.get(f"eval/{key}")
        out[key] = None if values is None else [float(v) for v in values]
    return out


def _fresh(seed: int, backend: str = "thread", **kwargs) -> dict[str, list[float] | None]:
    """The first round of a new evaluator built with ``seed``."""
    ev = _evaluator(backend, seed=seed, **kwargs)
    try:
        return _episodes(ev.evaluate())
    finally:
        ev.shutdown()


def test_evaluate_and_trigger_eval_take_a_keyword_only_seed():
    for method in (Evaluator.evaluate, Evaluator.trigger_eval):
        param = inspect.signature(method).parameters["seed"]
        assert param.kind is param.KEYWORD_ONLY and param.default is None, method.__name__


def test_a_rounds_seed_gives_the_episodes_of_an_evaluator_built_with_it(backend):
    ev = _evaluator(backend, seed=0)
    try:
        own = _episodes(ev.evaluate())
        seeded = _episodes(ev.evaluate(seed=7))
        assert ev.trigger_eval(seed=7)
        triggered = _episodes(ev.wait(120))
        back = _episodes(ev.evaluate())
    finally:
        ev.shutdown()
    assert seeded == triggered == _fresh(7, backend)
    assert seeded["episode_seeds"] == [episode_seed(7, i, k) for i in range(2) for k in range(2)]
    assert back == own and own["episode_seeds"] == [episode_seed(0, i, k) for i in range(2) for k in range(2)]
    assert seeded["episode_returns"] != own["episode_returns"]
    assert seeded["episode_conditions/observation_noise"] != own["episode_conditions/observation_noise"]


def test_the_collector_engine_and_an_unseeded_evaluator_take_a_rounds_seed_too():
    collector = {"frames_per_batch": 20}  # a batch size of its own: only the Collector runs it
    ev = _evaluator(seed=None, **collector)
    try:
        seeded = _episodes(ev.evaluate(seed=7))
        unseeded = _episodes(ev.evaluate())
    finally:
        ev.shutdown()
    assert seeded == _fresh(7, **collector)
    assert seeded["episode_returns"] == _fresh(7)["episode_returns"]  # the Collector and the direct engine agree
    assert unseeded["episode_seeds"] is None  # back to the evaluator's own: no seed
    assert unseeded["episode_returns"] != seeded["episode_returns"]


def test_a_time_budget_keeps_a_rounds_seed():
    ev = Evaluator(ENV, policy_factory=mlp_policy, time_budget_s=60.0, seed=0, keep_episodes=True)
    try:
        ev.evaluate()  # the first round runs one wave and measures it
        seeded = ev.evaluate(seed=7)
    finally:
        ev.shutdown()
    count = len(seeded["eval/episode_returns"])
    assert count > 2  # the budget chose the count
    quotas = [(count + i) // 2 for i in range(2)]
    assert list(seeded["eval/episode_seeds"]) == [episode_seed(7, i, k) for i in range(2) for k in range(quotas[i])]


@pytest.mark.parametrize("seed", ["7", 1.5, True])
def test_a_seed_that_is_no_whole_number_is_refused(seed):
    ev = _evaluator()
    try:
        with pytest.raises(ValueError, match="seed must be a whole number or None"):
            ev.evaluate(seed=seed)
        with pytest.raises(ValueError, match="seed must be a whole number or None"):
            ev.trigger_eval(seed=seed)
        assert not ev.pending
    finally:
        ev.shutdown()


@pytest.mark.ray
def test_a_sharded_ray_round_takes_the_rounds_seed_in_every_shard(ray_cluster):
    sharded = {"num_workers": 2, "num_gpus": 0}  # one sub-env a worker
    ev = _evaluator("ray", seed=0, **sharded)
    try:
        own = _episodes(ev.evaluate())
        seeded = _episodes(ev.evaluate(seed=7))
        back = _episodes(ev.evaluate())
    finally:
        ev.shutdown()
    assert seeded == _fresh(7, "ray", **sharded)
    assert back == own and seeded["episode_seeds"] == _fresh(7)["episode_seeds"]  # shard 1 seeded as sub-env 1
    assert seeded["episode_conditions/observation_noise"] == _fresh(7)["episode_conditions/observation_noise"]


def test_the_tensor_engine_takes_a_rounds_seed():
    """The MuJoCo Warp env on Warp's CPU device, stepped by the tensor engine (its default)."""
    wp = pytest.importorskip("warp")
    pytest.importorskip("mujoco_warp")
    level, wp.config.optimization_level = wp.config.optimization_level, 0  # as tests/test_warp_env.py compiles
    warp = functools.partial(make_env, "HalfCheetah-v5", num_envs=2, obs_norm=False, backend="warp", device="cpu")
    settings = {"policy_factory": mlp_policy, "num_trajectories": 4, "max_steps": 12, "keep_episodes": True}
    try:
        with Evaluator(warp, seed=0, **settings) as ev:
            own = _episodes(ev.evaluate())
            seeded = _episodes(ev.evaluate(seed=7))
            back = _episodes(ev.evaluate())
        with Evaluator(warp, seed=7, **settings) as fresh:
            assert seeded == _episodes(fresh.evaluate())
    finally:
        wp.config.optimization_level = level
    assert back == own and seeded["episode_returns"] != own["episode_returns"]
    assert seeded["episode_seeds"] == [episode_seed(7, i, k) for i in range(2) for k in range(2)]
