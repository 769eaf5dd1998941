"""ManiSkill3 behind the simulator seam: the contract every simulator meets (tests/test_simulators.py)."""

from __future__ import annotations

import pytest
from simulator_contract import simulator_contract

from simeval.envs.simulators import simulator_for

pytestmark = [pytest.mark.required, pytest.mark.timeout(300)]


def test_maniskill_meets_the_simulator_contract():
    name = "maniskill:PushCube-v1"
    sim = simulator_for(name)
    assert (sim.name, sim.prefix, sim.title) == ("maniskill", "maniskill", "ManiSkill3")
    simulator_contract(sim, name)
