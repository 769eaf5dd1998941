"""The simulator seam: one contract every registered simulator meets, and a plugin found by its entry point.

The contract (``simulator_contract``) runs here for every simulator installed in the core
venv (native MuJoCo, gymnasium, MuJoCo Warp); tests/isaac_lab and tests/mj_lab run it
for Isaac Lab and mjlab in their own venvs. The refusals run for every registered one,
installed or not: they read declarations only.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
from helpers import write_dist_info
from simulator_contract import backend_of, sample_id, simulator_contract

from simeval.condition_terms import ANY_SIMULATOR
from simeval.conditions import KINDS, Condition
from simeval.envs import make_env
from simeval.envs.simulators import check_condition, registered, simulator_for

# A condition of each kind, as a suite would write it.
ONE_OF_KIND = {
    "observation": {"observation_noise": 0.1},
    "action": {"action_delay": 1},
    "physics": {"body_mass_scale": 1.2},
    "initial_state": {"init_noise_scale": 0.5},
    "camera": {"light_intensity": 0.5},
    "task_config": {"cfg": {"episode_length_s": 5.0}},
    "prompt": {"prompt": ["run", "run forward"]},
}


def test_every_simulator_declares_what_the_registry_reads():
    sims = registered()
    assert [s.name for s in sims[:5]] == ["native", "gymnasium", "warp", "isaaclab", "mjlab"]
    assert len({s.name for s in sims}) == len(sims)
    for sim in sims:
        assert sim.title and sim.capabilities <= set(KINDS)
        assert {"observation", "action"} <= sim.capabilities, sim  # simeval applies these around any env
        assert simulator_for(sample_id(sim), backend_of(sim)) is sim


@pytest.mark.parametrize("sim", registered(), ids=lambda s: s.name)
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_condition_is_applied_or_refused_in_one_line_naming_who_can(sim, kind):
    name, condition = sample_id(sim), Condition.parse(ONE_OF_KIND[kind])
    if kind in sim.capabilities or kind in ANY_SIMULATOR:  # a prompt is the policy's: every simulator runs it
        check_condition(name, condition, backend_of(sim))
        return
    with pytest.raises(ValueError) as err:
        check_condition(name, condition, backend_of(sim))
    message = str(err.value)
    assert "\n" not in message and name in message
    able = [s for s in registered() if kind in s.capabilities]
    if sim.refusal(name, kind, condition.settings_of(kind)) is None:
        assert all(s.title in message for s in able), message


@pytest.mark.parametrize("sim", [s for s in registered() if s.name in ("native", "gymnasium", "warp")], ids=str)
def test_every_simulator_installed_here_meets_the_contract(sim):
    simulator_contract(sim, sample_id(sim))


PLUGIN = '''
from simeval.envs.simulators.gymnasium_vector import GymnasiumVector


class Pendulums(GymnasiumVector):
    """gymnasium's Pendulum-v1 alone, under its own backend name: what a third party's simulator looks like."""

    name = "pendulums"
    title = "Pendulums"
    fallback = False

    def tasks(self):
        return ("Pendulum-v1",)

    def default_for(self, name):
        return False
'''


def install_plugin(tmp_path, monkeypatch, module: str, source: str, entry: str) -> None:
    """An installed distribution (module + dist-info with a ``simeval.simulators`` entry point) on sys.path."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    write_dist_info(tmp_path, module, "simeval.simulators", entry)
    monkeypatch.syspath_prepend(str(tmp_path))
    registered.cache_clear()


def test_a_third_party_simulator_is_found_by_its_entry_point(tmp_path, monkeypatch):
    install_plugin(tmp_path, monkeypatch, "pendulum_sim", PLUGIN, "pendulums = pendulum_sim:Pendulums")
    try:
        (plugin,) = [s for s in registered() if s.name == "pendulums"]
        assert simulator_for("Pendulum-v1") is not plugin  # not claimed by default: gymnasium still builds it
        simulator_contract(plugin, "Pendulum-v1")
        with pytest.raises(ValueError, match=r"^backend='pendulums' has no 'HalfCheetah-v5': it runs Pendulum-v1; "):
            make_env("HalfCheetah-v5", backend="pendulums")
        with pytest.raises(ValueError, match=r"^unknown backend 'nope': choose 'native', .*'pendulums'"):
            make_env("Pendulum-v1", backend="nope")
    finally:
        sys.modules.pop("pendulum_sim", None)
        registered.cache_clear()


def test_a_plugin_that_takes_a_built_in_name_is_one_line(tmp_path, monkeypatch):
    clash = PLUGIN.replace('name = "pendulums"', 'name = "native"')
    install_plugin(tmp_path, monkeypatch, "clash_sim", clash, "clash = clash_sim:Pendulums")
    try:
        with pytest.raises(ValueError, match=r"^entry point clash = clash_sim:Pendulums .* takes the name or prefix"):
            registered()
    finally:
        sys.modules.pop("clash_sim", None)
        registered.cache_clear()
