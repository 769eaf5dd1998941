"""Native MuJoCo's own condition terms (issue 47): a push at one step, the reset noise's scale, the observed cameras'
pose and the scene's lights. Each changes the episode it claims to change and nothing else, per sub-env, from the
episode's drawn values (the same on every checkpoint's episode), on the Collector's path and the direct engine's.

Rendering needs MuJoCo's OpenGL chosen before MuJoCo is imported, so the camera checks run in a child process, as
in tests/test_cameras.py.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import mujoco
import numpy as np
import pytest
import torch
from helpers import mlp_policy

from simeval import Evaluator
from simeval.condition_terms import PUSH_STEP
from simeval.conditions import Condition, episode_seed
from simeval.envs import make_env
from simeval.envs.layout import innermost
from simeval.envs.simulators import check_condition
from simeval.settings import EvalSettings
from simeval.worker.eval_worker import EvalWorker

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rollout(name: str, condition: dict | None, steps: int, num_envs: int = 3, actions: int = 1) -> dict:
    """A seeded native rollout (no VecNorm) under ``condition``: observations, rewards, the draws and the env's base.

    ``actions`` seeds the random actions: two seeds stand for two checkpoints on the same episodes.
    """
    env = make_env(name, num_envs=num_envs, seed=5, obs_norm=False, condition=condition)
    if condition:
        env.base_env.transform.start_round(5, 0)
    td = env.reset()
    gen = torch.Generator().manual_seed(actions)
    width = env.action_spec.shape[-1]
    observations, rewards = [td["observation"].clone()], []
    for _ in range(steps):
        td["action"] = torch.rand(num_envs, width, generator=gen) * 2 - 1
        td = env.step(td)["next"]
        observations.append(td["observation"].clone())
        rewards.append(td["reward"].reshape(num_envs).clone())
    draws = dict(env.base_env.transform.draws) if condition else {}
    env.close()
    return {"obs": torch.stack(observations), "reward": torch.stack(rewards), "draws": draws}


def _first_change(a: torch.Tensor, b: torch.Tensor) -> list[int | None]:
    """Per sub-env, the first index along dim 0 where ``a`` and ``b`` differ (None: never)."""
    differ = (a != b).reshape(a.shape[0], a.shape[1], -1).any(-1)
    return [int(differ[:, i].nonzero()[0]) if differ[:, i].any() else None for i in range(a.shape[1])]


@pytest.mark.parametrize(
    ("name", "condition"),
    [
        ("HalfCheetah-v5", {"push": 1.0, "push_step": 4}),
        ("Hopper-v5", {"push": -0.5, "push_step": 4}),
        ("Ant-v5", {"push": 0.5, "push_step": 4, "push_direction": 90}),
        ("InvertedPendulum-v5", {"push": 0.3, "push_step": 4}),
    ],
)
def test_a_push_leaves_the_steps_before_it_nominal_and_changes_the_episode_from_its_step_on(name, condition):
    nominal, pushed = _rollout(name, None, 8), _rollout(name, condition, 8)
    # o_0..o_4 and r_0..r_3 are the nominal episode's; the push acts in step 4's physics: o_5 and r_4 on differ
    assert _first_change(nominal["obs"], pushed["obs"]) == [5, 5, 5]
    changes = _first_change(nominal["reward"], pushed["reward"])
    assert all(step is None or step >= 4 for step in changes)
    if name != "InvertedPendulum-v5":  # its reward is 1 a step while the pole stands: the push shows in o_5 alone
        assert changes == [4, 4, 4]


def _com_velocity(env, i: int) -> np.ndarray:
    """Sub-env ``i``'s robot centre-of-mass velocity (its own model: body_mass_scale included)."""
    group = innermost(env).groups[0]
    model, data = group.batch.get_model(i), group.batch.get_data(i)
    mujoco.mj_forward(model, data)
    mujoco.mj_subtreeVel(model, data)
    return data.subtree_linvel[1].copy()


@pytest.mark.parametrize(
    ("name", "push", "expected"),
    [
        ("Humanoid-v5", {"push": 0.5}, (0.5, 0.0)),
        ("Ant-v5", {"push": 0.5, "push_direction": 90, "body_mass_scale": 2.0}, (0.0, 0.5)),
        ("Ant-v5", {"push": 0.5, "push_direction": 225, "body_mass_scale": 0.5}, (-(0.125**0.5), -(0.125**0.5))),
        ("Hopper-v5", {"push": -0.5}, (-0.5, 0.0)),
    ],
)
def test_a_push_changes_the_robots_velocity_by_its_value_whatever_its_mass(name, push, expected):
    """In free flight (no gravity, no contact, no actuation) the robot's centre of mass moves ``push`` m/s faster
    along ``push_direction``: the impulse is the robot's mass, in that episode, times the value."""
    velocities = []
    for extra in ({}, {**push, "push_step": 0}):
        condition = {"gravity": 0.0, "init_noise_scale": 0.0, **extra}
        env = make_env(name, num_envs=2, seed=0, obs_norm=False, condition=condition)
        env.base_env.transform.start_round(0, 0)
        td = env.reset()
        td["action"] = torch.zeros(2, env.action_spec.shape[-1])
        env.step(td)
        assert innermost(env).groups[0].batch.bind("ncon").max() == 0
        velocities.append(np.stack([_com_velocity(env, i) for i in range(2)]))
        env.close()
    change = velocities[1] - velocities[0]
    # to 1e-4: the joints' armature (rotor inertia no body carries) keeps the momentum from being a body sum exactly
    np.testing.assert_allclose(change, np.broadcast_to((*expected, 0.0), (2, 3)), atol=1e-4)


def test_a_push_is_drawn_from_the_episodes_values_the_same_for_every_checkpoint():
    condition = {"push": [-1.0, 1.0], "push_step": [2, 6]}
    nominal, pushed = _rollout("HalfCheetah-v5", None, 10), _rollout("HalfCheetah-v5", condition, 10)
    parsed = Condition.parse(condition)
    draws = [parsed.draw(episode_seed(5, i, 0)) for i in range(3)]
    assert pushed["draws"] == {(i, 0): draws[i] for i in range(3)}
    assert len({d["push_step"] for d in draws}) > 1  # the sub-envs' pushes land at different steps
    assert _first_change(nominal["obs"], pushed["obs"]) == [int(d["push_step"]) + 1 for d in draws]
    other_nominal = _rollout("HalfCheetah-v5", None, 10, actions=2)  # another checkpoint: other actions
    other = _rollout("HalfCheetah-v5", condition, 10, actions=2)
    assert other["draws"] == pushed["draws"]
    assert _first_change(other_nominal["obs"], other["obs"]) == [int(d["push_step"]) + 1 for d in draws]


def test_a_push_without_its_step_acts_at_the_documented_default():
    nominal = _rollout("HalfCheetah-v5", None, PUSH_STEP + 2, num_envs=1)
    pushed = _rollout("HalfCheetah-v5", {"push": 1.0}, PUSH_STEP + 2, num_envs=1)
    assert _first_change(nominal["obs"], pushed["obs"]) == [PUSH_STEP + 1]


def test_a_zero_push_and_a_push_past_the_episode_change_nothing():
    nominal = _rollout("Hopper-v5", None, 6)
    for condition in ({"push": 0.0, "push_step": 2}, {"push": 1.0, "push_step": 50}):
        run = _rollout("Hopper-v5", condition, 6)
        assert torch.equal(run["obs"], nominal["obs"]) and torch.equal(run["reward"], nominal["reward"])


def _pushed_env(task: str, num_envs: int, groups: int, push: bool):
    """A plain native env (no condition: the direct engine runs it) whose sub-envs are pushed at step 3 of every
    episode through the simulator's term setter."""
    env = make_env(task, num_envs=num_envs, obs_norm=False, groups=groups)
    if push:
        ids = np.arange(num_envs)
        innermost(env).set_terms(ids, {"push": np.linspace(-1.0, 1.0, num_envs), "push_step": np.full(num_envs, 3.0)})
    return env


def _policy(env):
    return mlp_policy(seed=5, obs_dim=env.observation_spec["observation"].shape[-1], act_dim=env.action_spec.shape[-1])


def _returns(factory, collector: bool) -> list[float]:
    kwargs = {"collector_cls": "Collector"} if collector else {}
    settings = {"num_trajectories": 12, "max_steps": 30, **kwargs}
    worker = EvalWorker(EvalSettings(**settings), env_factory=factory, policy_factory=_policy)
    worker.build()
    assert (worker._direct is None) == collector  # the direct engine runs where the Collector is not asked for
    worker.close()
    with Evaluator(factory, policy_factory=_policy, seed=11, keep_episodes=True, **settings) as ev:
        result = ev.evaluate()
    return result["eval/episode_returns"].tolist()


@pytest.mark.parametrize("groups", [1, 2])
def test_the_direct_engine_pushes_as_the_collector_does(groups):
    """The push is the group's (SimGroup.begin and physics): the direct engine, which steps groups itself (two of
    them overlapped on its physics thread), gives the Collector's episodes."""
    pushed = functools.partial(_pushed_env, "Hopper-v5", 6, groups, True)
    fast, slow = _returns(pushed, collector=False), _returns(pushed, collector=True)
    if groups == 1:
        assert fast == slow
    else:  # the policy runs on each half: its matrix products may round by batch size
        assert fast == pytest.approx(slow, rel=1e-6, abs=1e-5)
    assert fast != _returns(functools.partial(_pushed_env, "Hopper-v5", 6, groups, False), collector=False)


def test_init_noise_scale_scales_the_reset_noise_and_the_generator_moves_on_as_nominal():
    states = {}
    for k in (None, 1.0, 0.5, 0.0):
        env = make_env("Walker2d-v5", num_envs=3, seed=7, obs_norm=False,
                       condition=None if k is None else {"init_noise_scale": k})  # fmt: skip
        if k is not None:
            env.base_env.transform.start_round(7, 0)
        base = innermost(env)
        starts = []
        for _ in range(2):  # two episodes: the second from the generators the first left
            env.reset()
            sim = base.groups[0].sim
            starts.append((sim.qpos.copy() - base._init[0], sim.qvel.copy() - base._init[1]))
        states[k] = starts
        env.close()
    for episode in range(2):
        for part in range(2):
            nominal = states[None][episode][part]
            assert np.abs(nominal).max() > 0
            np.testing.assert_array_equal(states[1.0][episode][part], nominal)  # 1: not a bit changed
            np.testing.assert_allclose(states[0.5][episode][part], 0.5 * nominal, rtol=1e-12, atol=1e-15)
            np.testing.assert_array_equal(states[0.0][episode][part], 0.0)  # 0: the model's initial state


def test_init_noise_scale_changes_the_episode_and_a_range_is_drawn_per_episode():
    nominal = _rollout("Hopper-v5", None, 3)
    run = _rollout("Hopper-v5", {"init_noise_scale": [0.0, 3.0]}, 3)
    assert _first_change(nominal["obs"], run["obs"]) == [0, 0, 0]
    drawn = [run["draws"][(i, 0)]["init_noise_scale"] for i in range(3)]
    assert len(set(drawn)) == 3 and all(0.0 <= k <= 3.0 for k in drawn)


@pytest.mark.parametrize(
    ("condition", "call", "message"),
    [
        ({"push_step": 5}, "parse", r"^condition\.push_step: qualifies push, which the condition does not set: add "),
        ({"push_direction": 90}, "parse", r"^condition\.push_direction: qualifies push, "),
        ({"push": 1.0, "push_step": 2.5}, "parse", r"^condition\.push_step: push_step is a whole number of steps"),
        ({"push": 1.0, "push_step": -1}, "parse", r"^condition\.push_step: push_step must be >= 0, got -1\.$"),
        ({"init_noise_scale": -0.5}, "parse", r"^condition\.init_noise_scale: init_noise_scale must be >= 0"),
        ({"light_intensity": -1}, "parse", r"^condition\.light_intensity: light_intensity must be >= 0"),
        ({"push": 1.0, "push_direction": 90}, "check", r"^push_direction turns a push in the horizontal plane; Hopper"),
        ({"init_noise_scale": 0.5}, "gymnasium", r"^init_noise_scale set the episode's initial state, which only"),
        ({"camera_tilt": 5}, "gymnasium", r"^camera_tilt set the camera images \(camera poses, lights\), which only "),
        ({"camera_shift": 0.1}, "build", r"^camera_shift change the camera images, and Hopper-v5 is built without "),
    ],
)
def test_a_setting_the_task_cannot_take_is_one_line(condition, call, message):
    with pytest.raises(ValueError, match=message) as info:
        if call == "parse":
            Condition.parse(condition)
        elif call == "build":
            make_env("Hopper-v5", num_envs=1, condition=condition)
        else:
            check_condition("Hopper-v5", Condition.parse(condition), None if call == "check" else call)
    assert "\n" not in str(info.value)


CAMERA_CHECKS = textwrap.dedent(
    """
    import numpy as np, torch
    from simeval.conditions import Condition, episode_seed
    from simeval.envs import make_env

    def run(condition, n=3, steps=3):
        env = make_env("HalfCheetah-v5", num_envs=n, seed=3, cameras=["track"], image_size=40, obs_norm=False,
                       condition=condition)
        if condition:
            env.base_env.transform.start_round(3, 0)
        torch.manual_seed(0)
        r = env.rollout(steps, break_when_any_done=False)
        env.close()
        return r["next", "observation.images.track"], r["next", "observation.state"]

    images, state = run(None)
    # nominal values change no pixel
    same = run({"camera_shift": 0.0, "camera_tilt": 0.0, "light_intensity": 1.0, "light_direction": 0.0})
    assert torch.equal(same[0], images) and torch.equal(same[1], state)
    # each setting changes every sub-env's images and never the state
    for condition in ({"camera_shift": 0.3}, {"camera_tilt": -8}, {"light_intensity": 0.5}, {"light_direction": 40}):
        seen, seen_state = run(condition)
        assert torch.equal(seen_state, state), condition
        assert all(not torch.equal(seen[i], images[i]) for i in range(3)), condition
    # unlit, the images are darker; brighter lights, brighter
    assert run({"light_intensity": 0.0})[0].mean() < images.mean() - 0.1
    assert run({"light_intensity": 1.5})[0].mean() > images.mean()
    # where the cheetah (the only orange thing in the frame) is in the image: its pixels' mean column, mean row
    def centre(frames, axis):
        orange = (frames[..., 0, :, :] - frames[..., 2, :, :] > 0.15).float()
        at = torch.arange(frames.shape[axis], dtype=torch.float32)
        return float((orange.sum(dim=-1 if axis == -2 else -2) * at).sum() / orange.sum())
    # a shift to the camera's right moves the scene to the image's left; a tilt up moves it down
    assert centre(run({"camera_shift": 0.4})[0], -1) < centre(images, -1) - 2
    assert centre(run({"camera_tilt": 10})[0], -2) > centre(images, -2) + 2
    # per sub-env: a range's draw for sub-env i renders as that value fixed
    condition = {"camera_shift": [-0.3, 0.3]}
    ranged, _ = run(condition)
    parsed = Condition.parse(condition)
    for i in range(3):
        value = parsed.draw(episode_seed(3, i, 0))["camera_shift"]
        assert torch.equal(ranged[i], run({"camera_shift": value})[0][i]), i
    print("CAMERA TERMS OK")
    """
)


def test_camera_and_light_terms_change_each_sub_envs_images_as_claimed_and_never_the_state():
    env = dict(os.environ, PYTHONPATH=REPO, MUJOCO_GL=os.environ.get("MUJOCO_GL") or "egl")
    out = subprocess.run([sys.executable, "-c", CAMERA_CHECKS], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "CAMERA TERMS OK" in out.stdout, out.stderr[-3000:]
