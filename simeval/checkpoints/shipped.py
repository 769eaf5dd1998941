"""The training run shipped in the wheel: HalfCheetah-v5 PPO, 8 checkpoints from 125k to 1M frames, and DONE.

The launcher evaluates it when given no source; the demo, the tests and the
benchmarks use it as a real run in simeval's own format.
"""

from __future__ import annotations

import os

SHIPPED_RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "halfcheetah_ppo")


def shipped_checkpoint() -> str:
    """The last checkpoint of the shipped training run (HalfCheetah-v5 PPO, 1M frames)."""
    names = sorted(n for n in os.listdir(SHIPPED_RUN) if n.endswith(".pt"))
    return os.path.join(SHIPPED_RUN, names[-1])
