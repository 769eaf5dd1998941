"""Native batched MuJoCo envs (simulators.mujoco_native.env) against gymnasium, and inside the Evaluator."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers import mlp_policy
from tensordict import TensorDict
from torchrl.envs.transforms import DoubleToFloat, RewardSum, StepCounter, VecNormV2

from simeval import Evaluator
from simeval.envs import OBS_NORM_ID, make_env, tasks
from simeval.envs.simulators.mujoco_native.env import MujocoBatchEnv
from simeval.envs.simulators.mujoco_native.tasks import TASKS

NATIVE_TASKS = tasks("native")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 11
NUM_ENVS = 4  # sub-env i is seeded with SEED + i: four seeds per task
STEPS = 1000
# Where the contact forces sit in the observation: [start, end) per task.
CONTACT_BLOCK = {"Ant-v5": (27, 105), "Humanoid-v5": (270, 348)}


def _actions(env, steps: int, seed: int = SEED) -> torch.Tensor:
    """Uniform random float32 actions in the action space, [steps, num_envs, act_dim]."""
    gen = torch.Generator().manual_seed(seed)
    low, high = env.action_spec.space.low, env.action_spec.space.high
    return low + (high - low) * torch.rand((steps, *low.shape), generator=gen)


def _drive(env, actions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Step through ``actions`` with torchrl's auto-reset (partial resets), recording everything compared."""
    td = env.reset()
    out = {"first": td["observation"].clone()}
    rows = []
    for action in actions:
        td["action"] = action
        td, td_next = env.step_and_maybe_reset(td)
        nxt = td["next"]
        rows.append(
            {
                "observation": nxt["observation"].clone(),
                "reward": nxt["reward"].clone(),
                "terminated": nxt["terminated"].clone(),
                "truncated": nxt["truncated"].clone(),
                "after_reset": td_next["observation"].clone(),  # the auto-reset observation where done
            }
        )
        td = td_next
    out.update({k: torch.stack([r[k] for r in rows]) for k in rows[0]})
    return out


@functools.lru_cache(maxsize=None)
def _gymnasium_run(name: str) -> dict[str, torch.Tensor]:
    env = make_env(name, num_envs=NUM_ENVS, seed=SEED, obs_norm=False, backend="gymnasium")
    try:
        return _drive(env, _actions(env, STEPS))
    finally:
        env.close()


def _assert_same(mine: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    # 1e-6 relative, no absolute slack: the native env repeats gymnasium's float64
    # arithmetic in the same order, so in practice both agree to the last bit.
    assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, what
    torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=0, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", NATIVE_TASKS)
def test_native_env_matches_gymnasium_step_for_step(name):
    """Same seed, same random actions, 1000 steps with resets: same observations, rewards, flags."""
    # Ant and Humanoid: gymnasium's cfrc_ext is only reproduced with exact_contact_forces=True
    # (the default takes contact forces one RK4 stage earlier; checked on its own below).
    env = make_env(
        name, num_envs=NUM_ENVS, seed=SEED, obs_norm=False, backend="native", exact_contact_forces=name in CONTACT_BLOCK
    )
    assert isinstance(env.base_env, MujocoBatchEnv)
    theirs = _gymnasium_run(name)
    mine = _drive(env, _actions(env, STEPS))
    env.close()
    for key in ("first", "observation", "reward", "after_reset"):
        _assert_same(mine[key], theirs[key], key)
    for key in ("terminated", "truncated"):
        assert torch.equal(mine[key], theirs[key]), key
    ended = (theirs["terminated"] | theirs["truncated"]).sum().item()
    if name == "HalfCheetah-v5":  # never terminates: the registry's TimeLimit truncates at step 1000
        assert not theirs["terminated"].any()
        assert theirs["truncated"][-1].all() and not theirs["truncated"][:-1].any()
    else:
        assert theirs["terminated"].any() and ended > NUM_ENVS, "no resets happened: a weak comparison"
    assert mine["observation"].dtype == torch.float32 and mine["reward"].shape == (STEPS, NUM_ENVS, 1)


@pytest.mark.parametrize("name", sorted(CONTACT_BLOCK))
def test_default_contact_forces_are_those_at_the_start_of_the_last_substep(name):
    """Without exact_contact_forces everything but the contact forces (and the contact cost) is
    gymnasium's, and the forces are MuJoCo's own mj_rnePostConstraint at the last substep's start."""
    import mujoco

    lo, hi = CONTACT_BLOCK[name]
    steps = 300
    fast = MujocoBatchEnv(name, NUM_ENVS)
    exact = MujocoBatchEnv(name, NUM_ENVS, exact_contact_forces=True)
    runs = []
    for env in (fast, exact):
        env.set_seed(SEED)
        runs.append(_drive(env, _actions(env, steps)))
    mine, ref = runs
    exact.close()
    keep = torch.ones(mine["observation"].shape[-1], dtype=torch.bool)
    keep[lo:hi] = False
    assert torch.equal(mine["observation"][..., keep], ref["observation"][..., keep])
    assert torch.equal(mine["terminated"], ref["terminated"])
    assert not torch.equal(mine["observation"][..., lo:hi], ref["observation"][..., lo:hi])  # a real difference

    def contact_cost(obs):  # the world body's row (not observed) is always zero
        forces = obs[..., lo:hi].double()
        return (5e-4 if name == "Ant-v5" else 5e-7) * forces.square().sum(-1, keepdim=True)

    # Humanoid caps its contact cost at 10; it stays far below here.
    expected = ref["reward"].double() + contact_cost(ref["observation"]) - contact_cost(mine["observation"])
    torch.testing.assert_close(mine["reward"].double(), expected, rtol=1e-6, atol=1e-5)  # float32 obs/rewards

    # Independent reference for sub-env 0: plain mj_step, forces from a copy of the data
    # forwarded at the start of each env step's last substep (resynced after each reset).
    fast.set_seed(SEED)
    td = fast.reset()
    model = fast._model
    data, scratch = fast.groups[0].batch.get_data(0), mujoco.MjData(model)
    in_contact = 0
    for t, action in enumerate(_actions(fast, steps)):
        td["action"] = action
        td, td_next = fast.step_and_maybe_reset(td)
        data.ctrl[:] = action[0].numpy()
        mujoco.mj_step(model, data, nstep=TASKS[name].frame_skip - 1)
        mujoco.mj_copyData(scratch, model, data)
        mujoco.mj_forward(model, scratch)
        mujoco.mj_rnePostConstraint(model, scratch)
        mujoco.mj_step(model, data)
        forces = scratch.cfrc_ext[1:]
        if name == "Ant-v5":
            forces = np.clip(forces, -1.0, 1.0)
        observed = td["next", "observation"][0, lo:hi].numpy()
        assert np.array_equal(observed, forces.reshape(-1).astype(np.float32)), t
        in_contact += bool(observed.any())
        if td["next", "done"][0]:
            data = fast.groups[0].batch.get_data(0)  # sub-env 0 was reset
        td = td_next
    assert in_contact > steps // 4
    fast.close()


def test_partial_reset_resets_only_the_masked_sub_envs():
    """A "_reset" mask resets those sub-envs only: the others go on exactly as a twin env's that
    was not reset, and the reset one starts a fresh noisy initial state."""
    twin, env = MujocoBatchEnv("Hopper-v5", 3), MujocoBatchEnv("Hopper-v5", 3)
    actions = _actions(env, 10)
    tds = []
    for e in (twin, env):
        e.set_seed(SEED)
        td = e.reset()
        for action in actions[:5]:
            td["action"] = action
            td = e.step(td)["next"]
        tds.append(td)
    mask = torch.tensor([[False], [True], [False]])
    before = tds[1]["observation"].clone()
    tds[1]["_reset"] = mask
    obs = env.reset(tds[1])["observation"]
    assert torch.equal(obs[[0, 2]], before[[0, 2]]) and not torch.equal(obs[1], before[1])
    # sub-env 1 is back at a noisy initial state: z 1.25 +- 0.005, velocities within +-0.005
    assert abs(obs[1, 0].item() - 1.25) <= 5e-3 and obs[1, 5:].abs().max() <= 5e-3
    outs = []
    for e, td in zip((twin, env), tds, strict=True):
        td = td.exclude("_reset")
        for action in actions[5:]:
            td["action"] = action
            td = e.step(td)["next"]
        outs.append(td["observation"])
    assert torch.equal(outs[0][[0, 2]], outs[1][[0, 2]]) and not torch.equal(outs[0][1], outs[1][1])
    # and its episode clock restarted: sub-envs 0 and 2 truncate 5 steps before sub-env 1 would
    short = MujocoBatchEnv("Hopper-v5", 3, max_episode_steps=8)
    short.set_seed(SEED)
    td = short.reset()
    truncated = []
    for t, action in enumerate(torch.zeros(8, 3, 3)):
        if t == 3:
            short.reset(TensorDict({"_reset": torch.tensor([[False], [True], [False]])}, batch_size=[3]))
        td["action"] = action
        nxt = short.step(td)["next"]
        truncated.append(nxt["truncated"].squeeze(-1))
        td = nxt
    truncated = torch.stack(truncated)
    assert truncated[7, 0] and truncated[7, 2] and not truncated[:, 1].any()
    for e in (twin, env, short):
        e.close()


def test_seeding_is_reproducible_and_gives_each_sub_env_its_own_stream():
    a, b, c = (make_env("Walker2d-v5", num_envs=3, seed=s, obs_norm=False) for s in (5, 5, 6))
    actions = _actions(a, 40)
    ra, rb, rc = (_drive(e, actions) for e in (a, b, c))
    assert torch.equal(ra["first"], rb["first"]) and torch.equal(ra["observation"], rb["observation"])
    assert not torch.equal(ra["first"], rc["first"])
    assert not torch.equal(ra["first"][0], ra["first"][1])
    # sub-env i is seeded with seed + i, as gymnasium's vector envs: seed 6's sub-env 0 is seed 5's sub-env 1
    assert torch.equal(rc["first"][0], ra["first"][1])
    a.set_seed(5)
    assert torch.equal(a.reset()["observation"], ra["first"])  # set_seed restarts the streams
    for e in (a, b, c):
        e.close()


@pytest.mark.parametrize("name", NATIVE_TASKS)
def test_specs_float32_batch_shape_and_time_limit(name):
    import gymnasium as gym

    env = make_env(name, num_envs=2, obs_norm=False, device="cpu")
    theirs = gym.make(name)
    try:
        assert env.batch_size == torch.Size([2])
        step = env.rand_step(env.reset())
        assert step["next", "observation"].device.type == "cpu" and step.batch_size == (2,)
        obs_dim = theirs.observation_space.shape[0]
        assert env.observation_spec["observation"].shape == (2, obs_dim)
        assert env.observation_spec["observation"].dtype == torch.float32
        assert env.action_spec.shape == (2, theirs.action_space.shape[0])
        assert torch.equal(env.action_spec.space.low[0], torch.as_tensor(theirs.action_space.low))
        assert env.full_reward_spec["reward"].dtype == torch.float32
        assert TASKS[name].max_episode_steps == gym.registry[name].max_episode_steps
        assert TASKS[name].frame_skip == theirs.unwrapped.frame_skip
    finally:
        env.close()
        theirs.close()


def test_make_env_picks_a_backend_and_keeps_one_transform_layout():
    native = make_env("Hopper-v5", num_envs=2)
    gym_env = make_env("Hopper-v5", num_envs=2, backend="gymnasium")
    swimmer = make_env("Swimmer-v5", num_envs=1)
    try:
        assert isinstance(native.base_env, MujocoBatchEnv)
        assert not isinstance(gym_env.base_env, MujocoBatchEnv) and not isinstance(swimmer.base_env, MujocoBatchEnv)
        layout = [DoubleToFloat, StepCounter, VecNormV2, RewardSum]
        assert [type(t) for t in native.transform] == [type(t) for t in gym_env.transform] == layout
        assert OBS_NORM_ID == "env.transform[2]"
        assert set(NATIVE_TASKS) == set(TASKS)
    finally:
        for e in (native, gym_env, swimmer):
            e.close()
    with pytest.raises(ValueError, match=r"backend='native' has no 'Swimmer-v5': it runs .*; use backend='gymnasium'"):
        make_env("Swimmer-v5", backend="native")
    with pytest.raises(ValueError, match="unknown backend 'mjx'"):
        make_env("Hopper-v5", backend="mjx")


def test_import_simeval_envs_loads_no_simulator():
    code = (
        "import sys, simeval, simeval.envs; "
        "print([m for m in ('torch', 'mujoco', 'torchrl', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO)
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


CAP = 14
POLICY = functools.partial(mlp_policy, obs_dim=4, act_dim=1, seed=1)


def _pendulum(backend: str):
    return make_env("InvertedPendulum-v5", num_envs=2, max_steps=CAP, seed=3, backend=backend)


@functools.lru_cache(maxsize=None)
def _stats_and_reference():
    """VecNorm statistics from a short 'training' run, and the gymnasium backend's evaluation with them."""
    train = make_env("InvertedPendulum-v5", num_envs=2, seed=7)
    torch.manual_seed(7)  # rollout() without a policy draws random actions from torch's generator
    train.rollout(30, break_when_any_done=False)
    stats = Evaluator.extract_weights(train.transform[2])
    train.close()
    ev = Evaluator(functools.partial(_pendulum, "gymnasium"), policy_factory=POLICY, num_trajectories=6, seed=1)
    try:
        reference = ev.evaluate(weights_dict={OBS_NORM_ID: stats})
    finally:
        ev.shutdown()
    return stats, reference


def test_native_env_gives_gymnasium_numbers_on_every_evaluator_backend(backend):
    """Thread, process and Ray workers evaluating the native env with VecNorm statistics loaded,
    a RewardSum and a StepCounter cap report exactly the gymnasium backend's episodes."""
    stats, reference = _stats_and_reference()
    ev = Evaluator(
        functools.partial(_pendulum, "native"),
        policy_factory=POLICY,
        num_trajectories=6,
        seed=1,
        backend=backend,
        keep_episodes=True,
        num_gpus=0,
    )
    try:
        result = ev.evaluate(weights_dict={OBS_NORM_ID: stats})
    finally:
        ev.shutdown()
    lengths = result["eval/episode_lengths"].tolist()
    assert len(lengths) == 6 and max(lengths) == CAP and min(lengths) < CAP  # the cap and terminations
    assert result["eval/reward"] == reference["eval/reward"]
    assert result["eval/episode_length"] == reference["eval/episode_length"]


RENDER = textwrap.dedent(
    """
    import numpy as np
    from simeval.envs import make_env
    from simeval.worker.frames import render_first

    frames = {}
    for backend in ("native", "gymnasium"):
        env = make_env("Hopper-v5", num_envs=2, seed=4, render=True, backend=backend)
        env.reset()
        frames[backend] = render_first(env.base_env)
        env.close()
    native = frames["native"]
    assert native.shape == (240, 240, 3) and native.dtype == np.uint8 and native.std() > 0
    assert np.array_equal(native, frames["gymnasium"])  # sub-env 0, same state, same tracking camera
    print("RENDERED")
    """
)


def test_native_env_renders_sub_env_0_like_gymnasium():
    env = dict(os.environ, PYTHONPATH=REPO, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    out = subprocess.run([sys.executable, "-c", RENDER], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "RENDERED" in out.stdout, out.stderr[-3000:]


def test_launch_cli_evaluates_256_native_envs_with_the_gymnasium_backends_numbers(tmp_path):
    """``--env HalfCheetah-v5 --num-envs 256``: native by default; --env-backend gymnasium gives the same episodes."""
    import json

    from launch_helpers import in_process

    from simeval.checkpoints.shipped import shipped_checkpoint

    records = {}
    for backend in ("default", "gymnasium"):
        args = ["--env", "HalfCheetah-v5", "--checkpoint", shipped_checkpoint()]
        args += ["--num-envs", "256", "--episodes", "256", "--max-steps", "40"]
        args += ["--out", str(tmp_path / backend)] + (["--env-backend", backend] if backend != "default" else [])
        proc = in_process(*args)
        assert proc.returncode == 0, proc.stderr[-2000:]
        (records[backend],) = [json.loads(x) for x in open(tmp_path / backend / "results.jsonl")]
    native, gym = records["default"], records["gymnasium"]
    assert (native["env_backend"], gym["env_backend"]) == ("native", "gymnasium")
    assert len(native["episode_returns"]) == 256 and set(native["episode_lengths"]) == {40}
    assert native["episode_returns"] == pytest.approx(gym["episode_returns"], rel=1e-5)
    bad = in_process("--env", "Reacher-v5", "--env-backend", "physx", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2
    expected = "simeval-launch: error: unknown env backend 'physx': choose one of native, gymnasium, warp."
    assert bad.stderr.strip() == expected
    (tmp_path / "ckpt").mkdir()
    unsupported = in_process("--env", "Reacher-v5", "--env-backend", "native", "--watch", str(tmp_path / "ckpt"))
    assert unsupported.returncode == 2 and "use backend='gymnasium'" in unsupported.stderr


@pytest.mark.parametrize("name", NATIVE_TASKS)
def test_models_are_gymnasiums_without_its_deprecation_warning(name):
    """HalfCheetah's XML asks for settotalmass (deprecated in MuJoCo 4, warned about at every load):
    simeval drops the attribute and scales the masses as MuJoCo's notice says, to the same model."""
    import mujoco

    from simeval.envs.simulators.mujoco_native.tasks import assets_dir, load_model

    code = f"from simeval.envs import make_env; make_env({name!r}, num_envs=2).rollout(3)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "deprecated" not in out.stdout + out.stderr
    task = TASKS[name]
    ours = load_model(task)
    theirs = mujoco.MjModel.from_xml_path(os.path.join(assets_dir(), task.xml))
    fields = [
        n
        for n in dir(theirs)
        if not n.startswith("_")
        and isinstance(getattr(theirs, n, None), np.ndarray)
        and getattr(theirs, n).dtype != object
    ]
    assert len(fields) > 100
    assert [n for n in fields if not np.array_equal(getattr(ours, n), getattr(theirs, n), equal_nan=True)] == []
