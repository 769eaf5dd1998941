"""Conditions around a real native MuJoCo env: exact effects, per-episode draws, counter-based noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from simeval.conditions import Condition, episode_seed
from simeval.envs import make_env
from simeval.envs.perturb import _mix, hashed_normal


def _splitmix_reference(x: int) -> int:
    """splitmix64's finaliser on Python ints (mod 2**64): the oracle for the torch version."""
    m = (1 << 64) - 1
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & m
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & m
    return x ^ (x >> 31)


def test_the_noise_hash_is_splitmix64_bit_for_bit():
    values = [0, 1, 2**31 + 7, 2**62 + 12345, 987654321987]
    got = _mix(torch.tensor(values, dtype=torch.long)).tolist()
    assert [g & ((1 << 64) - 1) for g in got] == [_splitmix_reference(v) for v in values]


def test_the_noise_is_standard_normal_and_depends_only_on_seed_and_step():
    seeds, steps = torch.arange(500), torch.full((500,), 3)
    z = hashed_normal(seeds, steps, 40, stream=1)
    assert stats.kstest(z.flatten().numpy(), "norm").pvalue > 1e-3
    # row 7 alone, or beside other rows, or at another position: the same numbers
    alone = hashed_normal(seeds[7:8], steps[7:8], 40, stream=1)
    assert torch.equal(alone[0], z[7])
    assert not torch.equal(hashed_normal(seeds[7:8], steps[7:8] + 1, 40, 1)[0], z[7])
    assert not torch.equal(hashed_normal(seeds[7:8], steps[7:8], 40, 2)[0], z[7])


def test_episode_seeds_are_fixed_numbers_and_distinct():
    assert episode_seed(0, 1, 2) == episode_seed(0, 1, 2)
    seeds = {episode_seed(0, i, k) for i in range(8) for k in range(8)}
    assert len(seeds) == 64
    assert episode_seed(1, 0, 0) != episode_seed(0, 0, 0)


@pytest.mark.parametrize(
    "data, words",
    [
        ({"observation_noise": -0.1}, "observation_noise must be >= 0"),
        ({"action_delay": 1.5}, "whole number"),
        ({"body_mass_scale": [1.5, 1.2]}, "low > high"),
        ({"body_mass_scale": [1.0, 1.2, 3]}, "[low, high]"),
        ({"gravityy": -9}, "unknown setting 'gravityy'"),
        ({"action_scale": "big"}, "expected a number"),
        ({"cfg": {"a..b": 1}}, "dotted path"),
    ],
)
def test_a_bad_condition_is_one_line_naming_the_setting(data, words):
    with pytest.raises(ValueError) as err:
        Condition.parse(data, "tasks[0].conditions.bad")
    message = str(err.value)
    assert words in message and "\n" not in message and message.startswith("tasks[0].conditions.bad")


def test_draws_come_from_the_episode_seed_alone():
    c = Condition.parse({"body_mass_scale": [0.5, 2.0], "action_delay": [0, 3], "observation_noise": 0.1})
    assert c.ranged == ("action_delay", "body_mass_scale")
    draws = [c.draw(episode_seed(0, i, 0)) for i in range(50)]
    assert draws == [c.draw(episode_seed(0, i, 0)) for i in range(50)]
    masses = [d["body_mass_scale"] for d in draws]
    assert 0.5 <= min(masses) < max(masses) <= 2.0
    assert {d["action_delay"] for d in draws} == {0.0, 1.0, 2.0, 3.0}
    assert all(d["observation_noise"] == 0.1 for d in draws)


def _steps(condition: dict | None, actions: torch.Tensor, num_envs: int = 2) -> tuple[torch.Tensor, object]:
    """Observations (before VecNorm: obs_norm off) of a seeded native env fed ``actions`` [T, E, A]."""
    env = make_env("HalfCheetah-v5", num_envs=num_envs, seed=3, obs_norm=False, condition=condition)
    perturb = env.base_env.transform if condition else None
    if perturb is not None:
        perturb.start_round(3, 0)
    td = env.reset()
    obs = [td["observation"].clone()]
    for a in actions:
        td["action"] = a
        td = env.step(td)["next"]
        obs.append(td["observation"].clone())
    env.close()
    return torch.stack(obs), perturb


def _actions(steps: int = 6, num_envs: int = 2) -> torch.Tensor:
    return torch.rand(steps, num_envs, 6, generator=torch.Generator().manual_seed(0)) * 2 - 1


def test_action_delay_feeds_the_action_of_k_steps_before_and_zeros_first():
    actions = _actions()
    delayed, _ = _steps({"action_delay": 2}, actions)
    shifted = torch.cat([torch.zeros(2, 2, 6), actions[:-2]])
    nominal, _ = _steps(None, shifted)
    assert torch.equal(delayed, nominal)


def test_action_scale_multiplies_the_action():
    actions = _actions() * 0.5  # inside the control range, so nothing clips
    scaled, _ = _steps({"action_scale": 1.5}, actions)
    nominal, _ = _steps(None, actions * 1.5)
    torch.testing.assert_close(scaled, nominal, rtol=0, atol=1e-6)


def test_observation_noise_is_in_the_observations_own_units_from_the_episode_seed():
    actions = _actions()
    noisy, perturb = _steps({"observation_noise": 0.3}, actions)
    nominal, _ = _steps(None, actions)
    seeds = torch.tensor([episode_seed(3, i, 0) for i in range(2)])
    for t in range(len(noisy)):
        expected = nominal[t].double() + 0.3 * hashed_normal(seeds, torch.full((2,), t), 17, stream=1)
        torch.testing.assert_close(noisy[t].double(), expected, rtol=0, atol=1e-5)


def test_body_mass_friction_and_gravity_reach_each_simulation():
    env = make_env(
        "HalfCheetah-v5",
        num_envs=3,
        seed=0,
        obs_norm=False,
        condition={"body_mass_scale": [0.5, 2.0], "friction_scale": 0.5, "gravity": -5.0},
    )
    perturb = env.base_env.transform
    perturb.start_round(0, 0)
    env.reset()
    base = env.base_env.base_env
    batch, model = base.groups[0].batch, base.groups[0].model
    scales = [perturb.draws[(i, 0)]["body_mass_scale"] for i in range(3)]
    np.testing.assert_allclose(batch.expanded("body_mass"), np.outer(scales, model.body_mass))
    np.testing.assert_allclose(
        batch.expanded("geom_friction"), np.broadcast_to(model.geom_friction * 0.5, (3, *model.geom_friction.shape))
    )
    np.testing.assert_allclose(batch.expanded("opt.gravity")[:, 2], -5.0)
    assert scales == [
        Condition.parse({"body_mass_scale": [0.5, 2.0]}).draw(episode_seed(0, i, 0))["body_mass_scale"]
        for i in range(3)
    ]
    env.close()


def test_physics_conditions_need_the_native_env():
    with pytest.raises(ValueError, match="native"):
        make_env("HalfCheetah-v5", backend="gymnasium", condition={"gravity": -5.0})
    with pytest.raises(ValueError, match="Isaac Lab"):
        make_env("HalfCheetah-v5", condition={"cfg": {"a.b": 1}})
