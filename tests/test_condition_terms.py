"""The condition-term seam: a term an installed package registers (entry-point group ``simeval.conditions``) is
parsed, drawn, checked against the simulator, and acts on the episode it claims to change."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers import write_dist_info

from simeval import condition_terms
from simeval.conditions import Condition, episode_seed, kind_of
from simeval.envs import make_env
from simeval.envs.perturb import Perturb
from simeval.envs.simulators import check_condition

TERMS = '''
import torch

from simeval.condition_terms import ConditionTerm


class ObservationOffset(ConditionTerm):
    """Adds its value to every observed component: a miscalibrated sensor."""

    name, kind, least = "observation_offset", "observation", None

    def observe(self, observation, value, seeds, t, key):
        return observation + value.unsqueeze(-1)


class ActionDeadzone(ConditionTerm):
    """Zeroes each action component smaller than its value in magnitude: a sticky actuator."""

    name, kind = "action_deadzone", "action"

    def act(self, action, value, seeds, t):
        return torch.where(action.abs() < value.unsqueeze(-1), torch.zeros_like(action), action)


class Wind(ConditionTerm):
    """A physics setting that no installed simulator lists."""

    name, kind, when = "wind", "physics", "reset"
'''


def install_terms(tmp_path, monkeypatch, entries: str, module: str = "my_terms", source: str = TERMS) -> None:
    """An installed distribution (module + dist-info with ``simeval.conditions`` entry points) on sys.path."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    write_dist_info(tmp_path, module, "simeval.conditions", entries)
    monkeypatch.syspath_prepend(str(tmp_path))
    condition_terms.registered.cache_clear()


@pytest.fixture
def plugin_terms(tmp_path, monkeypatch):
    install_terms(
        tmp_path,
        monkeypatch,
        "offset = my_terms:ObservationOffset\ndeadzone = my_terms:ActionDeadzone\nwind = my_terms:Wind",
    )
    yield
    sys.modules.pop("my_terms", None)
    condition_terms.registered.cache_clear()


def _rollout(condition: dict | None, steps: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Observations and summed rewards of a seeded native HalfCheetah (no VecNorm) under ``condition``."""
    env = make_env("HalfCheetah-v5", num_envs=3, seed=5, obs_norm=False, condition=condition)
    if condition:
        env.base_env.transform.start_round(5, 0)
    td = env.reset()
    gen = torch.Generator().manual_seed(1)
    observations, total = [td["observation"].clone()], torch.zeros(3)
    for _ in range(steps):
        td["action"] = torch.rand(3, 6, generator=gen) * 2 - 1
        td = env.step(td)["next"]
        observations.append(td["observation"].clone())
        total += td["reward"].reshape(3)
    env.close()
    return torch.stack(observations), total


def test_a_plugin_observation_term_changes_what_the_policy_sees(plugin_terms):
    assert kind_of("observation_offset") == "observation"
    nominal, _ = _rollout(None)
    shifted, _ = _rollout({"observation_offset": 0.25})
    torch.testing.assert_close(shifted.double(), nominal.double() + 0.25, rtol=0, atol=1e-6)


def test_a_plugin_action_term_changes_the_episode_and_its_range_is_drawn_per_episode(plugin_terms):
    _, nominal = _rollout(None)
    _, sticky = _rollout({"action_deadzone": [0.3, 0.9]})
    assert not torch.allclose(sticky, nominal)
    env = make_env("HalfCheetah-v5", num_envs=3, seed=5, obs_norm=False, condition={"action_deadzone": [0.3, 0.9]})
    perturb = env.base_env.transform
    perturb.start_round(5, 0)
    env.reset()
    drawn = [perturb.draws[(i, 0)]["action_deadzone"] for i in range(3)]
    assert len(set(drawn)) == 3 and all(0.3 <= v <= 0.9 for v in drawn)
    condition = Condition.parse({"action_deadzone": [0.3, 0.9]})
    assert drawn == [condition.draw(episode_seed(5, i, 0))["action_deadzone"] for i in range(3)]
    env.close()


def test_a_term_no_simulator_applies_is_refused_where_the_suite_is_loaded(plugin_terms):
    condition = Condition.parse({"wind": 2.0})
    with pytest.raises(ValueError, match=r"^wind is applied by no simulator installed here; HalfCheetah-v5 is built "):
        check_condition("HalfCheetah-v5", condition, backend="native")
    with pytest.raises(ValueError, match=r"^wind is applied by no simulator installed here; "):
        make_env("HalfCheetah-v5", num_envs=1, condition={"wind": 2.0})
    with pytest.raises(ValueError, match=r"no simulator here applies wind \(a simulator that does hands its terms"):
        Perturb(condition)  # an env of other making: nothing would apply it, so it is not silently dropped


def test_a_plugin_term_checks_its_values_by_the_same_rules(plugin_terms):
    with pytest.raises(ValueError, match=r"^cell.action_deadzone: action_deadzone must be >= 0, got -1\.$"):
        Condition.parse({"action_deadzone": -1}, where="cell")
    with pytest.raises(ValueError, match=r"^cell: unknown setting 'nope'; settings are observation_noise, .*wind"):
        Condition.parse({"nope": 1}, where="cell")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            TERMS.replace('"observation_offset", "observation"', '"action_scale", "observation"'),
            "name 'action_scale' is taken",
        ),
        (TERMS.replace('"observation_offset", "observation"', '"observation_offset", "smell"'), "has kind 'smell'"),
        ("raise RuntimeError('boom')", "does not load: RuntimeError: boom"),
    ],
)
def test_a_broken_term_is_one_line_naming_its_entry_point(tmp_path, monkeypatch, source, message):
    install_terms(tmp_path, monkeypatch, "offset = bad_terms:ObservationOffset", module="bad_terms", source=source)
    try:
        with pytest.raises(ValueError, match=r"^entry point offset = bad_terms:ObservationOffset .*") as info:
            condition_terms.registered()
        assert message in str(info.value) and "\n" not in str(info.value)
    finally:
        sys.modules.pop("bad_terms", None)
        condition_terms.registered.cache_clear()


def test_native_physics_terms_apply_in_their_own_order_whatever_the_condition_says():
    """The physics terms of native MuJoCo write their values through the simulator's term setter: the same model
    whichever order a condition names them in."""
    built = []
    for data in ({"gravity": -5.0, "body_mass_scale": 2.0}, {"body_mass_scale": 2.0, "gravity": -5.0}):
        env = make_env("HalfCheetah-v5", num_envs=2, seed=0, obs_norm=False, condition=data)
        env.base_env.transform.start_round(0, 0)
        env.reset()
        group = env.base_env.base_env.groups[0]
        built.append((group.batch.expanded("body_mass").copy(), group.batch.expanded("opt.gravity").copy()))
        env.close()
    np.testing.assert_array_equal(built[0][0], built[1][0])
    np.testing.assert_array_equal(built[0][1], built[1][1])
    assert built[0][1][0, 2] == -5.0
