"""Camera observations (issue 35): each sub-env's images on the native MuJoCo env, LeRobot's keys, frame stacks,
VecNorm and observation noise on the state only, and a policy that sees pixels evaluated by the launcher.

Rendering needs MuJoCo's OpenGL chosen before MuJoCo is imported, so the env checks run in a child
process (``MUJOCO_GL``: the machine's, else EGL), as the launcher's workers do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from launch_helpers import cli

from simeval.launch.cli import parse
from simeval.launch.config import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENV_CHECKS = textwrap.dedent(
    """
    import gymnasium as gym, mujoco, numpy as np, torch
    from simeval.envs import make_env

    # 1. each sub-env's image is its own state's: gymnasium's second initial state of seed 5 + i (make_env's seed
    # resets once, as GymWrapper.set_seed does), rendered alone
    env = make_env("Hopper-v5", num_envs=3, seed=5, cameras=["track"], image_size=48, obs_norm=False)
    td = env.reset()
    images = td["observation.images.track"]
    assert images.shape == (3, 3, 48, 48) and images.dtype == torch.float32
    assert 0.0 <= images.min() and images.max() <= 1.0 and images.std() > 0
    assert td["observation.state"].shape == (3, 11) and "observation" not in td.keys()
    for i in range(3):
        ref = gym.make("Hopper-v5").unwrapped
        ref.reset(seed=5 + i)
        ref.reset()
        model, data = ref.model, ref.data
        model.vis.quality.shadowsize, model.vis.quality.offsamples = 256, 0
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, 48)
        model.vis.global_.offheight = max(model.vis.global_.offheight, 48)
        renderer = mujoco.Renderer(model, 48, 48)
        mujoco.mj_forward(model, data)
        renderer.update_scene(data, camera=mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track"))
        expected = torch.from_numpy(renderer.render()).permute(2, 0, 1).float() / 255
        assert torch.equal(images[i], expected), i
        assert np.allclose(td["observation.state"][i].numpy(), ref._get_obs(), atol=1e-6)
        renderer.close()
    env.close()

    # 2. stacks of 2, oldest first; a sub-env that resets starts from its first image twice
    env = make_env("HalfCheetah-v5", num_envs=2, seed=1, cameras=["track"], image_size=32, frame_stack=2,
                   max_steps=3, obs_norm=False)
    r = env.rollout(7, break_when_any_done=False)
    now, then = r["next", "observation.images.track"], r["observation.images.track"]
    assert now.shape == (2, 7, 6, 32, 32)
    assert torch.equal(now[:, :, :3], then[:, :, 3:])  # the stack moves on by one image each step
    assert torch.equal(then[:, 0, :3], then[:, 0, 3:])  # the first stack: the first image twice
    assert torch.equal(then[:, 3, :3], then[:, 3, 3:])  # and again after the reset at step 3
    assert not torch.equal(then[:, 3, 3:], now[:, 2, 3:])
    env.close()

    # 3. VecNorm and observation noise act on the state only; images are the same with and without noise
    runs = {}
    for noise in (0.0, 0.5):
        env = make_env("HalfCheetah-v5", num_envs=2, seed=2, cameras=["track"], image_size=32,
                       condition={"observation_noise": noise} if noise else None)
        assert [list(t.in_keys) for t in env.transform if type(t).__name__ == "VecNormV2"] == [["observation.state"]]
        torch.manual_seed(0)
        runs[noise] = env.rollout(4, break_when_any_done=False)
        env.close()
    assert torch.equal(runs[0.0]["next", "observation.images.track"], runs[0.5]["next", "observation.images.track"])
    assert not torch.equal(runs[0.0]["next", "observation.state"], runs[0.5]["next", "observation.state"])
    print("CAMERAS OK")
    """
)


def test_each_sub_env_sees_its_own_images_stacked_and_untouched_by_state_noise():
    env = dict(os.environ, PYTHONPATH=REPO, MUJOCO_GL=os.environ.get("MUJOCO_GL") or "egl")
    out = subprocess.run([sys.executable, "-c", ENV_CHECKS], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "CAMERAS OK" in out.stdout, out.stderr[-3000:]


PIXEL_RUN = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from pixel_policy import pixel_actor
    from simeval import load_checkpoint, save_checkpoint
    from simeval.envs import make_env

    kw = dict(num_envs=2, cameras=["track"], image_size=32, frame_stack=2, obs_norm=False)
    env = make_env("HalfCheetah-v5", **kw)
    torch.manual_seed(0)
    save_checkpoint({ckpt!r}, pixel_actor(env), step=1, env="HalfCheetah-v5")
    env.close()
    if len(sys.argv) > 1:  # the launcher's episodes, by hand: seed 0, 20 steps, the checkpoint's weights
        env = make_env("HalfCheetah-v5", seed=0, max_steps=20, **kw)
        policy = pixel_actor(env)
        load_checkpoint({ckpt!r}).weights_dict["policy"].to_module(policy)
        with torch.no_grad():
            print(json.dumps(env.rollout(20, policy)["next", "reward"].sum(1).view(-1).tolist()))
    """
)


def test_the_launcher_evaluates_a_policy_that_sees_pixels_as_a_rollout_by_hand_does(tmp_path):
    ckpt = str(tmp_path / "ck" / "step_000000001.pt")
    script = PIXEL_RUN.format(tests=os.path.join(REPO, "tests"), ckpt=ckpt)
    env = dict(os.environ, PYTHONPATH=REPO, MUJOCO_GL=os.environ.get("MUJOCO_GL") or "egl")
    by_hand = subprocess.run([sys.executable, "-c", script, "by-hand"], capture_output=True, text=True, env=env,
                             timeout=300)  # fmt: skip
    assert by_hand.returncode == 0, by_hand.stderr[-3000:]
    proc = cli("--checkpoint", ckpt, "--policy", "pixel_policy:pixel_actor", "--cameras", "track",
               "--image-size", "32", "--frame-stack", "2", "--num-envs", "2", "--episodes", "2", "--max-steps", "20",
               "--out", str(tmp_path / "out"), env={"PYTHONPATH": os.path.join(REPO, "tests")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [json.loads(x) for x in open(tmp_path / "out" / "results.jsonl")]
    assert line["episode_returns"] == pytest.approx(json.loads(by_hand.stdout), rel=1e-5)
    assert {k: line["settings"][k] for k in ("cameras", "image_size", "frame_stack")} == {
        "cameras": ["track"], "image_size": 32, "frame_stack": 2,
    }  # fmt: skip


SHIPPED_PIXELS = os.path.join(REPO, "simeval", "data", "halfcheetah_pixels_bc")
PIXEL_FLAGS = ("--cameras", "track", "--image-size", "48", "--frame-stack", "2")


def test_a_pixel_policy_trained_here_drives_halfcheetah_from_its_camera_alone(tmp_path):
    """The shipped clone (examples/train_pixel_bc.py: a CNN that reads the track camera's two last frames, not the
    state) runs as a checkpoint's own policy with --cameras: the PPO expert it cloned scores about 3000 per
    episode, an untrained CNN about 0, and a clone that broke (images mis-scaled, frames out of order, the wrong
    camera) falls far below."""
    proc = cli("--checkpoint", os.path.join(SHIPPED_PIXELS, "step_000000756.pt"), *PIXEL_FLAGS, "--num-envs", "2",
               "--episodes", "2", "--seed", "0", "--out", str(tmp_path / "out"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [json.loads(x) for x in open(tmp_path / "out" / "results.jsonl")]
    assert line["settings"]["cameras"] == ["track"] and line["settings"]["frame_stack"] == 2
    assert min(line["episode_returns"]) > 2000, line["episode_returns"]


def test_a_state_policy_with_cameras_fails_in_one_line(tmp_path):
    proc = cli("--checkpoint", os.path.join(REPO, "simeval", "data", "halfcheetah_ppo", "step_000126976.pt"),
               *PIXEL_FLAGS, "--num-envs", "2", "--episodes", "2", "--out", str(tmp_path / "out"))  # fmt: skip
    assert proc.returncode != 0
    said = [x for x in proc.stderr.splitlines() if "builds a policy of the state vector" in x]
    assert said and "simeval.policies:cnn_policy" in said[0], proc.stderr[-2000:]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--checkpoint", "c.pt", "--image-size", "32"], "--image-size sets the camera images: add --cameras"),
        (["--checkpoint", "c.pt", "--frame-stack", "2"], "--frame-stack sets the camera images: add --cameras"),
        (["--checkpoint", "c.pt", "--cameras", "track", "--policy", "m:f", "--image-size", "0"],
         "--image-size must be 1..1024 pixels, got 0"),
    ],
)  # fmt: skip
def test_camera_flag_errors_are_one_line(argv, words):
    with pytest.raises(ConfigError) as err:
        parse(argv)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_simulator_without_cameras_or_a_camera_the_model_lacks_is_one_line():
    from simeval.envs import make_env

    said = r"^Swimmer-v5: gymnasium envs observe no cameras; native MuJoCo, MuJoCo Warp and mjlab envs do\.$"
    with pytest.raises(ValueError, match=said):
        make_env("Swimmer-v5", cameras=["track"])
    with pytest.raises(ValueError, match=r"^frame_stack stacks camera images: give cameras"):
        make_env("HalfCheetah-v5", frame_stack=2)
