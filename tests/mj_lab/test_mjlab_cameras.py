"""Camera observations on mjlab tasks (issue 35): mjlab 1.6's camera sensors, on Warp's CPU device.

``make_env("mjlab:<task>", cameras=[...])`` wraps each named camera of the task's scene in an
mjlab ``CameraSensorCfg`` (MuJoCo Warp's batch renderer, run by mjlab after each step) and gives
LeRobot's keys, as the MuJoCo envs do: ``observation.state`` (mjlab's ``actor`` group) and
``observation.images.<camera>``. The cartpole's ``fixed`` camera looks at the cart from the side.
"""

from __future__ import annotations

import json

import pytest
import torch

from simeval.envs import make_env

pytestmark = [pytest.mark.required, pytest.mark.timeout(900)]

TASK = "mjlab:Mjlab-Cartpole-Swingup"
KEY = "observation.images.fixed"


def _env(**kwargs):
    kwargs = {"num_envs": 2, "seed": 0, "device": "cpu", "cameras": ["fixed"], "image_size": 32, **kwargs}
    return make_env(TASK, **kwargs)


def _drive(env, steps: int) -> list:
    gen = torch.Generator().manual_seed(1)
    td, seen = env.reset(), []
    seen.append(td.clone())
    for _ in range(steps):
        td["action"] = torch.rand(env.action_spec.shape, generator=gen) * 2 - 1
        td = env.step_and_maybe_reset(td)[1]
        seen.append(td.clone())
    return seen


def test_mjlab_camera_sensors_give_lerobots_keys_the_same_images_for_the_same_seed_and_follow_the_state():
    env = _env(obs_norm=False)
    try:
        spec = env.observation_spec
        assert spec[KEY].shape == (2, 3, 32, 32) and spec["observation.state"].shape[0] == 2
        assert "observation" not in spec.keys()
        first = _drive(env, 6)
    finally:
        env.close()
    for td in first:
        images = td[KEY]
        assert images.shape == (2, 3, 32, 32) and images.dtype == torch.float32
        assert 0.0 <= images.min() and images.max() <= 1.0 and images.std() > 0.05
    assert not torch.equal(first[0][KEY], first[-1][KEY])  # the cart moved: its pixels changed
    env = _env(obs_norm=False)
    try:
        again = _drive(env, 6)
    finally:
        env.close()
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a[KEY], b[KEY]) and torch.equal(a["observation.state"], b["observation.state"])


def test_mjlab_vecnorm_on_the_state_and_one_line_errors():
    env = _env()
    try:
        assert [list(t.in_keys) for t in env.transform if type(t).__name__ == "VecNormV2"] == [["observation.state"]]
    finally:
        env.close()
    # mjlab resets finished worlds inside its step: a stack would carry the last episode's images into the next
    with pytest.raises(ValueError, match=r"^mjlab:Mjlab-Cartpole-Swingup: frame_stack 2 is not supported: mjlab "):
        _env(frame_stack=2)
    with pytest.raises(ValueError, match=r"^mjlab:Mjlab-Cartpole-Swingup: no camera 'top' in its scene; its cameras: "
                                         r"cartpole/fixed, cartpole/lookatcart\.$"):  # fmt: skip
        _env(cameras=["top"])
    with pytest.raises(ValueError, match=r"^image_size must be 1\.\.1024 pixels a side, got \(0, 0\)\.$"):
        _env(image_size=0)


def test_the_launcher_evaluates_a_pixel_policy_on_an_mjlab_camera(tmp_path):
    from pixel_policy import pixel_actor

    from simeval import save_checkpoint
    from simeval.launch import main

    env = _env(obs_norm=False, max_steps=6)
    try:
        torch.manual_seed(0)
        policy = pixel_actor(env, camera="fixed")
        ckpt = save_checkpoint(str(tmp_path / "ck" / "step_000000001.pt"), policy, step=1, env=TASK)
        env.set_seed(0)  # the launcher's round: seed 0, 6 steps per episode
        with torch.no_grad():
            by_hand = env.rollout(6, policy)["next", "reward"].sum(1).view(-1).tolist()
    finally:
        env.close()
    argv = ["--checkpoint", str(ckpt), "--env", TASK, "--policy", "pixel_policy:pixel_actor", "--policy-kwargs",
            '{"camera": "fixed"}', "--device", "cpu", "--cameras", "fixed", "--image-size", "32", "--num-envs", "2",
            "--episodes", "2", "--max-steps", "6", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0
    (line,) = [json.loads(x) for x in open(tmp_path / "out" / "results.jsonl")]
    assert line["episode_returns"] == pytest.approx(by_hand, rel=1e-5) and line["settings"]["cameras"] == ["fixed"]
