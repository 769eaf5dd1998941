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


# A condition under which each simulator-native term changes the first steps of an episode. Camera terms change
# images only: tests/test_native_terms.py renders them (MuJoCo's OpenGL must be chosen before it is imported).
TERM_EXAMPLES = {
    "body_mass_scale": {"body_mass_scale": 1.5},
    "friction_scale": {"friction_scale": 0.2},
    "gravity": {"gravity": -3.0},
    "push": {"push": 1.0, "push_step": 0},
    "push_step": {"push": 1.0, "push_step": 1},
    "push_direction": {"push": 1.0, "push_step": 0, "push_direction": 90.0},
    "init_noise_scale": {"init_noise_scale": 0.0},
}


def simulator_contract(sim: Simulator, name: str, num_envs: int = 2, steps: int = 3) -> None:
    """What every simulator's env does: the declared simulator builds it; it resets, steps and keeps the layout; each
    term it lists (but the camera's) changes the episode."""
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
    _terms_take_effect(sim, name, num_envs, steps)


def _terms_take_effect(sim: Simulator, name: str, num_envs: int, steps: int) -> None:
    """Every term ``sim`` lists (camera terms aside) changes the observations of a seeded episode with fixed actions,
    unless ``sim`` refuses it on ``name`` (its condition_problem: ``push_direction`` on a task moving along x only)."""
    import torch

    from simeval.conditions import Condition
    from simeval.envs.simulators import check_condition  # every example a condition it applies

    def observations(condition: dict | None) -> torch.Tensor:
        env = make_env(name, num_envs=num_envs, backend=backend_of(sim), seed=0, obs_norm=False, condition=condition)
        try:
            td = env.reset()
            action = torch.linspace(-0.5, 0.5, env.action_spec.shape[-1]).expand(env.action_spec.shape)
            seen = [td["observation"].clone()]
            for _ in range(steps):
                td = env.step(td.set("action", action.clone()))["next"]
                seen.append(td["observation"].clone())
            return torch.stack(seen)
        finally:
            env.close()

    nominal = None
    for term in sim.terms:
        if term.kind == "camera":
            continue
        assert term.name in TERM_EXAMPLES, f"{sim.name} lists {term.name}: give it an example in TERM_EXAMPLES"
        condition = TERM_EXAMPLES[term.name]
        if sim.condition_problem(name, Condition.parse(condition)) is not None:
            continue
        check_condition(name, Condition.parse(condition), backend_of(sim))
        nominal = observations(None) if nominal is None else nominal
        assert not torch.equal(observations(condition), nominal), f"{term.name} changed nothing on {name}"
