"""Isaac Lab behind the simulator seam: the contract every simulator meets (tests/test_simulators.py).

The contract runs in the session's shared Isaac Lab process (isaac_script.py), beside the other scripted
modules' probes: the pytest process never starts Isaac Lab.

    python test_isaaclab_contract.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import pytest
from isaac_script import probe_of

NAME = "isaaclab:Simeval-Isaac-Cartpole"

pytestmark = [pytest.mark.required, pytest.mark.timeout(1500)]  # the first test waits for isaac_scripts


def test_isaac_lab_meets_the_simulator_contract(isaac_scripts):
    failure = probe_of(isaac_scripts, __name__)["contract_failure"]
    assert failure is None, failure


# ---- the Isaac Lab process ----


def _probe(out: str) -> None:
    from simulator_contract import simulator_contract

    from simeval.envs.simulators import simulator_for

    try:
        simulator_contract(simulator_for(NAME), NAME)
        failure = None
    except Exception:  # noqa: BLE001  (AssertionError included: the test fails with this traceback)
        failure = traceback.format_exc()
    with open(out, "w") as f:
        json.dump({"contract_failure": failure}, f)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: simulator_contract
    _probe(sys.argv[1])
