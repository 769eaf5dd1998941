"""Camera observations on the MuJoCo Warp env (issue 35): MuJoCo Warp's batch renderer, on Warp's CPU device.

The same keys, dtypes and layout as the native env's cameras (tests/test_cameras.py); every
world's images ray-traced in one launch and kept on the env's device.

The native env's images are the reference for *what* is drawn, not pixel for pixel: MuJoCo's
OpenGL renderer draws the floor's reflection, shadows, haze towards the horizon and mipmapped
textures, the ray tracer none of them. What both must agree on is where the robot is. The
robot's pixels are those whose red exceeds their blue by 0.1 (the bodies are brown, orange or
purple; the floor's checker, the sky and the black squares are grey, green or blue), and
their masks in the two envs' images of the same state overlap by an intersection over union
of at least ``MIN_IOU``. Here (seed 4, 5 states, 3 worlds) it is 0.85-0.95 (0.87-0.98 on seed 7;
0.82-0.87 for Hopper, whose long shin reflects in MuJoCo's floor), while the robot drawn 4
pixels off scores 0.16-0.24 (checked here, so the bound can fail). The mean absolute difference
of the whole images is 0.08-0.09 for HalfCheetah (0.09-0.12 for Hopper and Walker2d), almost
all of it the background: it is bounded by ``MAX_MAD``.

Kernels compile at -O0 here, as in tests/test_warp_env.py (whose fixture this module shares).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from launch_helpers import REPO, TESTS
from test_warp_env import _warp  # noqa: F401  (the -O0 fixture; skips, a CI failure, without MuJoCo Warp)

from simeval.envs import make_env
from simeval.envs.simulators import simulator_for

pytestmark = [pytest.mark.required, pytest.mark.timeout(600)]

TRACK = "observation.images.track"
SIZE = 64
MIN_IOU = 0.75
MAX_MAD = 0.15


def _robot(images: torch.Tensor) -> torch.Tensor:
    """The robot's pixels of (N, 3, H, W) images: red above blue by 0.1."""
    return (images[:, 0] - images[:, 2]) > 0.1


def _iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a & b).sum((1, 2)) / (a | b).sum((1, 2))


def _env(backend: str = "warp", **kwargs):
    kwargs = {"num_envs": 3, "seed": 4, "obs_norm": False, "device": "cpu", "cameras": ["track"],
              "image_size": SIZE, **kwargs}  # fmt: skip
    return make_env("HalfCheetah-v5", backend=backend, **kwargs)


def _actions(env, steps: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    return torch.rand((steps, *env.action_spec.shape), generator=gen) * 2 - 1


def _drive(env, actions: torch.Tensor) -> list:
    td, seen = env.reset(), []
    seen.append(td.clone())
    for action in actions:
        td["action"] = action
        td = env.step(td)["next"]
        seen.append(td.clone())
    return seen


NATIVE = """
import sys, torch
sys.path.insert(0, {tests!r})
from test_warp_cameras import _actions, _drive, _env
env = _env("native")
torch.save([(td["observation.state"], td["observation.images.track"]) for td in _drive(env, _actions(env, 4))], {out!r})
"""


def _native_run(tmp_path) -> list:
    """The native env's states and images on the same seed and actions, in a child process (its OpenGL is chosen
    before MuJoCo is imported: ``MUJOCO_GL``, else EGL, as tests/test_cameras.py)."""
    out = str(tmp_path / "native.pt")
    gl = os.environ.get("MUJOCO_GL") or "egl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS]), "MUJOCO_GL": gl}
    proc = subprocess.run([sys.executable, "-c", NATIVE.format(tests=TESTS, out=out)], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


def test_every_world_sees_its_camera_as_the_native_env_does_same_seed_same_images(tmp_path):
    warp = _env()
    spec = warp.base_env.observation_spec
    assert set(spec.keys()) == {"observation.state", TRACK} and spec[TRACK].shape == (3, 3, SIZE, SIZE)
    assert simulator_for("HalfCheetah-v5", "warp").round_source(warp) is None  # the Collector reads the images
    actions = _actions(warp, 4)
    ours, theirs = _drive(warp, actions), _native_run(tmp_path)
    for td in ours:
        images = td[TRACK]
        assert images.shape == (3, 3, SIZE, SIZE) and images.dtype == torch.float32 and images.device.type == "cpu"
        assert 0.0 <= images.min() and images.max() <= 1.0 and images.std() > 0.1
        assert "observation" not in td.keys() and td["observation.state"].shape == (3, 17)
        assert torch.equal(images * 255, (images * 255).round())  # 8 bits a channel, as the native env's
    # the same state as the native env's (exactly at the reset), drawn in the same place
    assert torch.equal(ours[0]["observation.state"], theirs[0][0])
    for mine, (_, ref) in zip(ours, theirs, strict=True):
        robot, robot_ref = _robot(mine[TRACK]), _robot(ref)
        assert (robot.sum((1, 2)) > 100).all()  # the cheetah fills ~4% of the image
        assert (_iou(robot, robot_ref) >= MIN_IOU).all(), _iou(robot, robot_ref)
        assert (mine[TRACK] - ref).abs().mean() <= MAX_MAD
        shifted = torch.roll(robot_ref, 4, dims=2)  # the robot 4 pixels to the right: the bound sees it
        assert (_iou(robot, shifted) < MIN_IOU).all(), _iou(robot, shifted)
    # the images follow the state: the cheetah moved, its pixels changed
    assert not torch.equal(ours[0][TRACK], ours[-1][TRACK])
    # the same seed and actions give the same images; rendering leaves the physics as it was
    again = _drive(_env(), actions)
    blind = _drive(_env(cameras=(), image_size=64), actions)
    for a, b, c in zip(ours, again, blind, strict=True):
        assert torch.equal(a[TRACK], b[TRACK])
        assert torch.equal(a["observation.state"], c["observation"])


def test_frame_stacks_and_no_render_context_without_cameras():
    env = _env(num_envs=2, seed=1, image_size=32, frame_stack=2, max_steps=3)
    r = env.rollout(7, break_when_any_done=False)
    now, then = r["next", TRACK], r[TRACK]
    assert now.shape == (2, 7, 6, 32, 32)
    assert torch.equal(now[:, :, :3], then[:, :, 3:])  # the stack moves on by one image each step
    assert torch.equal(then[:, 0, :3], then[:, 0, 3:])  # the first stack: the first image twice
    assert torch.equal(then[:, 3, :3], then[:, 3, 3:])  # and again after the reset at step 3
    assert not torch.equal(then[:, 3, 3:], now[:, 2, 3:])
    vecnorms = [list(t.in_keys) for t in _env(obs_norm=True).transform if type(t).__name__ == "VecNormV2"]
    assert vecnorms == [["observation.state"]]
    plain = make_env("HalfCheetah-v5", backend="warp", device="cpu", num_envs=2)
    assert plain.base_env._eyes is None and "observation" in plain.observation_spec.keys()
    with pytest.raises(ValueError, match=r"^HalfCheetah-v5: no camera 'top' in its model; its cameras: 'track'\.$"):
        _env(cameras=["top"])
    with pytest.raises(ValueError, match=r"^image_size must be 1\.\.1024 pixels a side, got \(0, 0\)\.$"):
        _env(image_size=0)


def test_the_launcher_evaluates_a_pixel_policy_on_warp_as_a_rollout_by_hand_does(tmp_path):
    from pixel_policy import pixel_actor

    from simeval import save_checkpoint
    from simeval.launch import main

    kw = {"num_envs": 2, "image_size": 32, "frame_stack": 2}
    env = _env(**kw, seed=0, max_steps=8)
    torch.manual_seed(0)
    policy = pixel_actor(env)
    ckpt = save_checkpoint(str(tmp_path / "ck" / "step_000000001.pt"), policy, step=1, env="HalfCheetah-v5")
    with torch.no_grad():
        by_hand = env.rollout(8, policy)["next", "reward"].sum(1).view(-1).tolist()
    argv = ["--checkpoint", str(ckpt), "--policy", "pixel_policy:pixel_actor", "--env-backend", "warp", "--device",
            "cpu", "--cameras", "track", "--image-size", "32", "--frame-stack", "2", "--num-envs", "2",
            "--episodes", "2", "--max-steps", "8", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0  # in this process: its kernels are loaded already (at -O0)
    (line,) = [json.loads(x) for x in open(tmp_path / "out" / "results.jsonl")]
    assert line["episode_returns"] == pytest.approx(by_hand, rel=1e-5)
    assert line["settings"]["cameras"] == ["track"] and line["settings"]["image_size"] == 32
