"""What every simulator's env does, for tests/test_simulators.py and each simulator's own lane."""

from __future__ import annotations

from simeval.envs import make_env
from simeval.envs.simulators import Simulator, simulator_for


def sample_id(sim: Simulator) -> str:
    """An env id the simulator builds (for the fallback, one no other simulator claims)."""
    if sim.prefix is not None:
        return f"{sim.prefix}:Some-Task"
    return sim.tasks()[0] if sim.tasks() else "Pendulum-v1"


def backend_of(sim: Simulator) -> str | None:
    return None if sim.prefix is not None else sim.name


def simulator_contract(sim: Simulator, name: str, num_envs: int = 2, steps: int = 3) -> None:
    """What every simulator's env does: the declared simulator builds it; it resets, steps and keeps the layout."""
    import torch

    assert simulator_for(name, backend_of(sim)) is sim
    sim.check(name)
    env = make_env(name, num_envs=num_envs, backend=backend_of(sim), seed=0, max_steps=steps + 1)
    try:
        assert env.batch_size == torch.Size([num_envs])
        names = [type(t).__name__ for t in env.transform]
        assert names == ["DoubleToFloat", "StepCounter", "VecNormV2", "RewardSum"], names
        td = env.rollout(steps, break_when_any_done=False)
        assert td.batch_size == torch.Size([num_envs, steps])
        for key in (("next", "observation"), ("next", "reward"), ("next", "done"), ("next", "episode_reward")):
            assert key in td.keys(True), key
        assert torch.isfinite(td["next", "observation"]).all()
    finally:
        env.close()
