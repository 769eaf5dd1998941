"""Suite conditions on the real Isaac Lab 3.0 (kit-less, Newton): noise and delay through its in-step resets.

One Isaac Lab process runs this file as a script on the offline manager-based
cartpole (``isaaclab:Simeval-Isaac-Cartpole``, 4 sub-envs, episodes of at most
12 steps, so Isaac Lab resets sub-envs inside ``step`` several times). It
builds the env as ``make_env`` does by default (VecNormV2 on) with observation
noise, a 2-step action delay and an action scale drawn per episode, starts a seeded round on its condition layer
and steps it as the eval worker does (``step_and_maybe_reset``), recording what
simeval handed on next to what Isaac Lab itself computed and was given: its
observation buffer and its action manager's raw actions. The tests recompute
every episode's noise and delay from the episode seeds, so each reset Isaac Lab
made inside a step must have started the right episode.

    python test_isaaclab_conditions.py OUT.json
"""

from __future__ import annotations

import json
import sys

import pytest
from isaac_script import error_of, probe_of

TASK = "isaaclab:Simeval-Isaac-Cartpole"
NUM_ENVS, STEPS, MAX_STEPS, ROUND_SEED, STD, DELAY = 4, 30, 12, 12345, 0.5, 2

pytestmark = [pytest.mark.required, pytest.mark.timeout(1500)]  # the first test waits for isaac_scripts


@pytest.fixture(scope="module")
def probed(isaac_scripts) -> dict:
    return probe_of(isaac_scripts, __name__)


def test_the_layout_is_make_envs_with_the_condition_below_vecnorm(probed):
    layout = probed["layout"]
    assert layout["outer"] == ["DoubleToFloat", "StepCounter", "VecNormV2", "RewardSum"]  # OBS_NORM_ID: [2]
    assert layout["inner"] == ["VecGymEnvTransform", "RenameTransform", "Perturb"]  # "policy" -> "observation"
    assert layout["native_autoreset"] is True  # the worker reads it on the outer env


def _expected_episodes(probed) -> list[list[tuple[int, int]]]:
    """(ordinal, t) of each sub-env at each step, from the done flags: what the condition layer must follow."""
    ordinals, ts, out = [0] * NUM_ENVS, [0] * NUM_ENVS, [[(0, 0)] * NUM_ENVS]
    for done in probed["done"]:
        for i in range(NUM_ENVS):
            if done[i]:
                ordinals[i], ts[i] = ordinals[i] + 1, 0
            else:
                ts[i] += 1
        out.append(list(zip(ordinals, ts, strict=True)))
    return out


def test_observation_noise_follows_every_episode_isaac_lab_starts_inside_a_step(probed):
    import torch

    from simeval.conditions import episode_seed
    from simeval.noise import hashed_normal

    assert sum(map(sum, probed["done"])) >= NUM_ENVS  # Isaac Lab reset sub-envs inside steps
    for step, positions in enumerate(_expected_episodes(probed)):
        seeds = torch.tensor([episode_seed(ROUND_SEED, i, k) for i, (k, _) in enumerate(positions)])
        steps = torch.tensor([t for _, t in positions])
        noise = hashed_normal(seeds, steps, 4, 1)
        clean = torch.tensor(probed["isaac_obs"][step], dtype=torch.float64)
        seen = torch.tensor(probed["obs"][step], dtype=torch.float64)
        torch.testing.assert_close(seen, clean + STD * noise, atol=1e-5, rtol=0)


def test_actions_arrive_two_steps_late_scaled_and_each_new_episode_starts_with_zeros(probed):
    positions = _expected_episodes(probed)
    given, applied = probed["actions"], probed["isaac_actions"]
    scale = {tuple(map(int, key.split(","))): value for key, value in probed["draws"].items()}
    for step in range(STEPS):
        for i in range(NUM_ENVS):
            if probed["done"][step][i]:  # Isaac Lab's reset zeroed the action it had been given
                continue
            k, t = positions[step][i]  # the episode and its step this action is taken at
            want = given[step - DELAY][i] * scale[(i, k)] if t >= DELAY else 0.0
            assert applied[step][i] == pytest.approx(want, abs=1e-6), (step, i, k, t)


def test_each_episode_draws_its_own_ranged_setting_from_its_seed(probed):
    from simeval.conditions import Condition, episode_seed

    condition = Condition.parse({"observation_noise": STD, "action_delay": DELAY, "action_scale": [0.5, 1.5]})
    drawn = {tuple(map(int, key.split(","))): value for key, value in probed["draws"].items()}
    finished = _expected_episodes(probed)[-1]
    assert sorted(drawn) == sorted((i, k) for i, (last, _) in enumerate(finished) for k in range(last + 1))
    for (i, k), value in drawn.items():
        assert value == condition.draw(episode_seed(ROUND_SEED, i, k))["action_scale"]


def test_physics_settings_on_isaac_lab_are_one_line_pointing_at_cfg_overrides(probed):
    error = probed["physics_error"]
    assert error["type"] == "ValueError" and "\n" not in error["message"]
    assert "body_mass_scale" in error["message"] and "cfg override" in error["message"]


# ---- the Isaac Lab process ----


def _names(transform) -> list[str]:
    return [type(t).__name__ for t in transform]


def _probe(out: str) -> None:
    import torch

    from simeval.envs import make_env

    physics_error = error_of(lambda: make_env(TASK, num_envs=2, device="cpu", condition={"body_mass_scale": 2.0}))
    condition = {"observation_noise": STD, "action_delay": DELAY, "action_scale": [0.5, 1.5]}
    env = make_env(TASK, num_envs=NUM_ENVS, device="cpu", seed=0, max_steps=MAX_STEPS, condition=condition)
    inner = env.base_env
    perturb = inner.transform[-1]
    layout = {
        "outer": _names(env.transform),
        "inner": _names(inner.transform),
        "native_autoreset": env.__dict__.get("_torchrl_native_autoreset"),
    }
    unwrapped = env._isaac_unwrapped
    vecnorm = env.transform[2]
    vecnorm.freeze()  # as the eval worker does, with statistics that leave the observation as it is
    vecnorm._loc["observation"].zero_()  # mean 0
    vecnorm._var["observation"].fill_(1.0)  # second moment 1
    vecnorm._count["observation"].fill_(10**9)  # no bias correction left
    perturb.start_round(ROUND_SEED, 0)
    td = env.reset()
    generator = torch.Generator().manual_seed(0)
    record = {"obs": [], "isaac_obs": [], "done": [], "actions": [], "isaac_actions": []}

    def observe(observation: torch.Tensor) -> None:
        record["obs"].append(observation.double().tolist())
        record["isaac_obs"].append(unwrapped.obs_buf["policy"].double().tolist())

    observe(td["observation"])
    for _ in range(STEPS):
        action = torch.rand(NUM_ENVS, 1, generator=generator) * 2 - 1
        td["action"] = action
        td, td_next = env.step_and_maybe_reset(td)
        record["actions"].append(action.reshape(-1).tolist())
        record["isaac_actions"].append(unwrapped.action_manager.action.reshape(-1).double().tolist())
        record["done"].append(td["next", "done"].reshape(-1).tolist())
        observe(td_next["observation"])  # a done sub-env's is its next episode's first (Isaac Lab reset it)
        td = td_next
    record["draws"] = {f"{i},{k}": v["action_scale"] for (i, k), v in perturb.draws.items()}
    env.close()
    with open(out, "w") as f:
        json.dump({**record, "layout": layout, "physics_error": physics_error}, f)


if __name__ == "__main__":
    _probe(sys.argv[1])
