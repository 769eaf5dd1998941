"""Section 10: batched gymnasium MuJoCo envs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torchrl.envs.transforms import RewardSum, StepCounter, VecNormV2

from simeval.envs import OBS_NORM_ID, make_env
from simeval.worker.vecnorm import iter_transforms

TASKS = {
    "HalfCheetah-v5": (17, 6),
    "Hopper-v5": (11, 3),
    "Walker2d-v5": (17, 6),
    "Ant-v5": (105, 8),
    "InvertedPendulum-v5": (4, 1),
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_make_env_builds_a_batched_float32_env(name):
    obs_dim, act_dim = TASKS[name]
    env = make_env(name, num_envs=3, max_steps=5, seed=0)
    try:
        kinds = {type(t) for t in iter_transforms(env)}
        assert {VecNormV2, RewardSum, StepCounter} <= kinds
        assert env.batch_size == torch.Size([3])
        rollout = env.rollout(6, break_when_any_done=False)
        assert rollout["observation"].shape == (3, 6, obs_dim)
        assert rollout["observation"].dtype == torch.float32
        assert rollout["action"].shape == (3, 6, act_dim)
        # the StepCounter cap truncates, and each sub-env is reset on its own
        steps = rollout["next", "step_count"]
        assert steps.max() <= 5
        capped = steps == 5
        assert rollout["next", "done"][capped].all()
        if name == "HalfCheetah-v5":  # never terminates: every sub-env hits the cap at step 5
            assert capped[:, 4].all() and rollout["next", "truncated"][:, 4].all()
    finally:
        env.close()


def test_seeded_envs_reset_identically_and_sub_envs_differ():
    a = make_env("Hopper-v5", num_envs=2, seed=3, obs_norm=False)
    b = make_env("Hopper-v5", num_envs=2, seed=3, obs_norm=False)
    try:
        oa, ob = a.reset()["observation"], b.reset()["observation"]
        assert torch.equal(oa, ob)
        assert not torch.equal(oa[0], oa[1])
    finally:
        a.close()
        b.close()


def test_obs_norm_statistics_do_not_depend_on_num_envs():
    small, big = make_env("HalfCheetah-v5", num_envs=1), make_env("HalfCheetah-v5", num_envs=4)
    try:
        shapes = [
            next(t for t in iter_transforms(e) if isinstance(t, VecNormV2))._loc["observation"].shape
            for e in (small, big)
        ]
        assert shapes[0] == shapes[1] == torch.Size([17])
    finally:
        small.close()
        big.close()


def test_unknown_env_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown env 'HalfCheeta-v5'"):
        make_env("HalfCheeta-v5")


def test_obs_norm_id_names_the_vecnorm():
    from simeval.weights import resolve_model

    env = make_env("Hopper-v5", num_envs=1)
    try:
        assert isinstance(resolve_model({"env": env}, OBS_NORM_ID), VecNormV2)
    finally:
        env.close()


@pytest.mark.parametrize("flags", [[], ["-W", "default"]], ids=["quiet", "W-default"])
def test_torchrl_vecnorm_experimental_warning_is_silenced_unless_asked_for(flags: list[str]) -> None:
    """A run printed torchrl's VecNormV2 "experimental" warning 14 times; now none; ``-W default`` shows it."""
    code = (
        "from simeval.envs import make_env\n"
        "env = make_env('HalfCheetah-v5', num_envs=2, max_steps=5)\n"
        "env.rollout(3, break_when_any_done=False)\n"
        "env.close()\n"
    )
    done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert ("Support of VecNormV2" in done.stderr) == bool(flags), done.stderr
