"""Isaac Lab behind the simulator seam: the contract every simulator meets (tests/test_simulators.py)."""

from __future__ import annotations

import pytest
from simulator_contract import simulator_contract

from simeval.envs.simulators import simulator_for

pytestmark = [pytest.mark.required, pytest.mark.timeout(600)]


def test_isaac_lab_meets_the_simulator_contract():
    name = "isaaclab:Simeval-Isaac-Cartpole"
    simulator_contract(simulator_for(name), name)
