"""Conditions around a real native MuJoCo env: exact effects, per-episode draws, counter-based noise."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from simeval.conditions import Condition, episode_seed
from simeval.envs import make_env
from simeval.noise import _mix, hashed_normal


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
        ({"inference_delay": -1}, "inference_delay must be >= 0"),
        ({"body_mass_scale": [1.5, 1.2]}, "low > high"),
        ({"body_mass_scale": [1.0, 1.2, 3]}, "[low, high]"),
        ({"gravityy": -9}, "unknown setting 'gravityy'"),
        ({"action_scale": "big"}, "expected a number"),
        ({"action_scale": 0}, "action_scale must be > 0, got 0"),  # a scale of 0 would zero every action
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


def test_inference_delay_holds_each_answer_until_the_next_arrives_and_composes_with_action_delay():
    actions = _actions(steps=7)
    zero = torch.zeros(2, 6)
    # asked at t = 0, 2, 4, 6; each answer reaches the env two steps later and is held for two
    held = torch.stack([zero, zero, actions[0], actions[0], actions[2], actions[2], actions[4]])
    lagged, _ = _steps({"inference_delay": 2}, actions)
    nominal, _ = _steps(None, held)
    assert torch.equal(lagged, nominal)
    # actuation latency on top: the held answers, one step later
    both, _ = _steps({"inference_delay": 2, "action_delay": 1}, actions)
    assert torch.equal(both, _steps(None, torch.cat([zero[None], held[:-1]]))[0])
    # one step of inference latency is one step of action delay; none is the nominal env
    assert torch.equal(_steps({"inference_delay": 1}, actions)[0], _steps({"action_delay": 1}, actions)[0])
    assert torch.equal(_steps({"inference_delay": 0}, actions)[0], _steps(None, actions)[0])


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


# ---- cfg overrides: data only (a suite file is untrusted; Isaac Lab imports and calls a term's "module:func") ----

DATA_ONLY = "a cfg override sets data only"


@pytest.mark.parametrize(
    "path, value, words",
    [
        ("events.add_pole_mass.func", "os:system", "'func' names a callable"),
        ("events.add_pole_mass.func", "lambda env, ids: 0", "'func' names a callable"),
        ("actions.joint_effort.class_type", "isaaclab.envs.mdp:JointEffortAction", "'class_type' names a callable"),
        ("scene.robot.spawn.func.x", 1, "'func' names a callable"),  # nor walk through one
        ("scene.clone_cfg.clone_fn", "random", "'clone_fn' names a callable"),
        ("rewards.alive.weight", "sys:exit", "'sys:exit' names a callable (module:attr)"),
        ("rewards.alive.weight", "lambda env: 0", "is a lambda"),
        ("events.reset.params.pose", ["ok", "builtins:print"], "'builtins:print' names a callable"),
        ("events.add_pole_mass", {"func": "os:system", "params": {}}, "mapping key 'func' names a callable"),
        ("events.reset.params.pose", [1.0, print], "builtin_function_or_method is not plain data"),
        ("events.reset.params.pose", {1: 2.0}, "mapping key 1 is not a string"),
    ],
)
def test_a_cfg_override_that_names_a_callable_or_is_not_data_is_refused_by_its_value_alone(path, value, words):
    with pytest.raises(ValueError) as err:
        Condition.parse({"cfg": {path: value}}, "tasks[0].conditions.evil")
    message = str(err.value)
    assert message.startswith(f"tasks[0].conditions.evil.cfg.{path}: ") and words in message, message
    assert DATA_ONLY in message and "\n" not in message


def test_cfg_overrides_of_plain_data_parse_as_given():
    cfg = {
        "events.add_pole_mass.params.mass_distribution_params": [0.5, 2.0],
        "events.reset_pole_position.params.position_range.1": 0.25,
        "events.add_pole_mass.mode": "startup",
        "events.reset.params.asset_cfg.body_names": ["pole"],
        "actions.joint_pos.scale": {".*": 0.3},
        "events.push_robot": None,
        "sim.device": "cuda:0",  # a colon, but no callable's name
        "commands.twist.rel_standing_envs": 0.0,
        "observations.policy.enable_corruption": False,
    }
    assert Condition.parse({"cfg": cfg}).cfg == cfg


def _term_func(env, env_ids) -> None:
    """Stands for a manager term's function (what Isaac Lab's config holds)."""


@dataclasses.dataclass
class _EntityCfg:
    name: str = "robot"
    body_names: list = dataclasses.field(default_factory=lambda: ["pole"])


@dataclasses.dataclass
class _TermCfg:
    func: Callable[..., None] = _term_func
    params: dict = dataclasses.field(default_factory=lambda: {"asset_cfg": _EntityCfg(), "range": (1.0, 1.0)})
    mode: str = "reset"
    interval_range_s: tuple[float, float] | None = None
    strategy: Any = _term_func
    builder: Callable[..., None] | None = None


@dataclasses.dataclass
class _EventsCfg:
    mass: _TermCfg = dataclasses.field(default_factory=_TermCfg)


@dataclasses.dataclass
class _EnvCfg:
    """A task config shaped as Isaac Lab's and mjlab's are: config objects, a term with func and params."""

    events: _EventsCfg = dataclasses.field(default_factory=_EventsCfg)
    robot_type: type = _EntityCfg
    ground: _EntityCfg | None = None


@pytest.mark.parametrize(
    "path, value, words",
    [
        ("events.mass.strategy", "random", "the field holds a callable (function _term_func)"),
        ("events.mass.strategy.x", 1, "events.mass.strategy is a callable"),
        ("events.mass.builder", 3, "the field holds a field typed Callable[..., None] | None"),
        ("robot_type.name", "x", "robot_type is the class"),
        ("events.mass.params", {"range": [1.0, 2.0]}, "holds a dict that holds more than plain data"),
        ("events.mass.params.asset_cfg", {"name": "robot"}, "holds a config object (_EntityCfg)"),
        ("events.mass", {"mode": "reset"}, "holds a config object (_TermCfg)"),
        ("ground", {"name": "robot"}, "the field holds None, not a mapping"),
        ("events.mass.params.range", "big", "a string lands where the config holds (1.0, 1.0)"),
        ("events.mass.params.range.0", "big", "a string lands where the config holds 1.0"),
    ],
)
def test_a_cfg_override_may_not_replace_a_callable_a_class_or_a_config_object(path, value, words):
    from simeval.envs.cfg_overrides import apply_cfg_overrides

    cfg = _EnvCfg()
    with pytest.raises(ValueError) as err:
        apply_cfg_overrides(cfg, {"events.mass.params.range": [2.0, 2.0], path: value})
    message = str(err.value)
    assert message.startswith(f"cfg override {path!r}: ") and words in message, message
    assert DATA_ONLY in message and "\n" not in message
    assert cfg == _EnvCfg()  # checked before anything is set


def test_a_cfg_override_sets_data_where_the_config_holds_data():
    from simeval.envs.cfg_overrides import apply_cfg_overrides

    cfg = _EnvCfg()
    apply_cfg_overrides(
        cfg,
        {
            "events.mass.params.range": [0.5, 2.0],
            "events.mass.mode": "startup",
            "events.mass.interval_range_s": [1.0, 2.0],
            "events.mass.params.asset_cfg.body_names": ["cart", "pole"],
        },
    )
    term = cfg.events.mass
    assert term.params["range"] == (0.5, 2.0) and term.mode == "startup" and term.interval_range_s == (1.0, 2.0)
    assert term.params["asset_cfg"].body_names == ["cart", "pole"] and term.func is _term_func
    apply_cfg_overrides(cfg, {"events.mass": None})  # None turns a term off: it names nothing
    assert cfg.events.mass is None
    with pytest.raises(ValueError, match=r"^cfg override 'events\.mass\.func': 'func' names a callable"):
        apply_cfg_overrides(_EnvCfg(), {"events.mass.func": "os:system"})  # make_env's overrides too
