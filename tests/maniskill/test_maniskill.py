"""The real ManiSkill3 3.0.1 (SAPIEN's CPU physics, state observations) through simeval: env, Evaluator, launcher.

Runs in the venv that ``make maniskill`` builds (``make test-maniskill``); every test is
required, so CI fails if ManiSkill3 cannot run. The policy is the shipped run
``simeval/data/maniskill_pushcube_bc`` (examples/train_maniskill_bc.py: a scripted expert
cloned into simeval's MLP), whose last checkpoint pushes the cube into the goal in part
of the episodes: a success metric that breaks reads 0, 1, or another number than
ManiSkill3's own. Episodes are PushCube-v1's 50 steps; 16 per evaluation on 4 sub-envs.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RUN = os.path.join(REPO, "simeval", "data", "maniskill_pushcube_bc")
FINAL = os.path.join(RUN, "step_000001200.pt")
TASK_ID = "PushCube-v1"
TASK = f"maniskill:{TASK_ID}"
EPISODES, NUM_ENVS, SEED = 16, 4, 0

pytestmark = [pytest.mark.required, pytest.mark.timeout(600)]


def launch(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", "simeval.launch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)


def read_results(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def evaluate(backend: str, ckpt: str = FINAL, seed: int = SEED, **kwargs) -> dict:
    import simeval
    from simeval.envs import make_env
    from simeval.factories import build_policy

    ck = simeval.load_checkpoint(ckpt)
    ev = simeval.Evaluator(
        functools.partial(make_env, TASK, num_envs=NUM_ENVS, obs_norm=False),
        policy_factory=functools.partial(build_policy, ck.policy_factory, ck.policy_kwargs),
        num_trajectories=EPISODES,
        backend=backend,
        device="cpu",
        seed=seed,
        num_gpus=0,
        keep_episodes=True,  # no info_keys: ManiSkill3's simulator declares its success flag
        start_timeout=300,
        **kwargs,
    )
    try:
        return ev.evaluate(weights_dict=ck.weights_dict, step=ck.step)
    finally:
        ev.shutdown()


@pytest.fixture(scope="module")
def on_thread() -> dict:
    """The final checkpoint on the thread backend, seed 0: the reference the other tests compare with."""
    return evaluate("thread")


def ours(result: dict, name: str) -> list[float]:
    return [float(v) for v in result[f"eval/{name}"]]


def test_make_env_builds_pushcube_with_simevals_layout_seeds_and_success_flag():
    import torch

    from simeval.envs import make_env
    from simeval.envs.simulators import simulator_for

    env = make_env(TASK, num_envs=3, seed=5, obs_norm=False)
    try:
        assert [type(t).__name__ for t in env.transform] == ["DoubleToFloat", "StepCounter", "RewardSum"]  # no obs_norm
        assert env.observation_spec["observation"].shape == torch.Size([3, 35])  # PushCube's state
        assert env.action_spec.shape == torch.Size([3, 8])  # pd_joint_delta_pos: 7 arm joints + gripper
        td = env.rollout(60, break_when_any_done=False)
        done = td["next", "done"].squeeze(-1)
        # terminations ignored: every episode runs PushCube's 50 steps, then torchrl resets it
        assert done[:, 49].all() and not done[:, :49].any() and not td["next", "terminated"].any()
        assert td["next", "success"].dtype == torch.bool and td["next", "success"].shape == torch.Size([3, 60])
        first = td["observation"][:, 0]
        env.set_seed(6)  # sub-env i starts from seed + i: sub-env 0 of seed 6 is sub-env 1 of seed 5
        again = env.reset()["observation"]
        assert torch.equal(again[0], first[1]) and torch.equal(again[1], first[2])
        assert not torch.equal(again[2], first[2])
        assert simulator_for(TASK).owns(env.base_env)
    finally:
        env.close()


def maniskills_own_success(policy, episodes_per_env: int) -> tuple[list[float], list[float]]:
    """success_once / success_at_end per episode from ManiSkill3's own CPUGymWrapper(record_metrics=True).

    The same episodes as the round: sub-env i seeded with SEED + i, reset once more by the round's
    start, then its episodes one after the other, in (sub-env, episode) order.
    """
    import gymnasium as gym
    import torch
    from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

    once, at_end = [], []
    for i in range(NUM_ENVS):
        raw = gym.make(TASK_ID, num_envs=1, obs_mode="state", sim_backend="cpu", render_backend="none",
                       enhanced_determinism=True)  # fmt: skip
        env = CPUGymWrapper(raw, ignore_terminations=True, record_metrics=True)
        env.reset(seed=SEED + i)
        for _ in range(episodes_per_env):
            obs, _ = env.reset()
            truncated = False
            while not truncated:
                with torch.no_grad():
                    action = policy(torch.as_tensor(obs).unsqueeze(0))[0].numpy()
                obs, _, _, truncated, info = env.step(action)
            once.append(float(info["episode"]["success_once"]))
            at_end.append(float(info["episode"]["success_at_end"]))
        env.close()
    return once, at_end


def test_success_metrics_are_maniskills_own_and_part_of_the_episodes_succeed(on_thread):
    import simeval
    from simeval.envs import make_env
    from simeval.factories import build_policy

    once, at_end = ours(on_thread, "episode_success_once"), ours(on_thread, "episode_success_at_end")
    assert on_thread["eval/num_episodes"] == EPISODES and len(once) == EPISODES
    assert 0.0 < on_thread["eval/success_at_end"] <= on_thread["eval/success_once"] < 1.0
    assert on_thread["eval/success_once"] == pytest.approx(sum(once) / EPISODES)
    assert on_thread["eval/success_at_end"] == pytest.approx(sum(at_end) / EPISODES)
    assert all(o >= e for o, e in zip(once, at_end, strict=True))  # success at the last step is success at some step
    ck = simeval.load_checkpoint(FINAL)
    probe = make_env(TASK, num_envs=1, obs_norm=False)
    policy = build_policy(ck.policy_factory, ck.policy_kwargs, probe)
    probe.close()
    simeval.weights.load_weights(policy, ck.policy, "policy")
    want_once, want_at_end = maniskills_own_success(policy.module, EPISODES // NUM_ENVS)
    assert (once, at_end) == (want_once, want_at_end)


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_every_backend_scores_the_same_episodes(on_thread, backend):
    # One worker: with num_workers=2 each actor's policy runs on 2 rows instead of 4, and torch's CPU matmul
    # rounds a row differently by batch size (1e-7 here), which PushCube's contacts amplify into other episodes.
    other = evaluate(backend)
    for key in ("episode_returns", "episode_success_once", "episode_success_at_end"):
        assert ours(other, key) == ours(on_thread, key), key
    assert other["eval/success_once"] == on_thread["eval/success_once"]


def test_another_seed_gives_other_episodes(on_thread):
    other = evaluate("thread", seed=SEED + 100)
    assert ours(other, "episode_returns") != ours(on_thread, "episode_returns")


def test_launcher_watches_the_shipped_run_in_step_order_with_rising_success(on_thread, tmp_path):
    out = tmp_path / "out"
    proc = launch(
        "--env", TASK, "--watch", RUN, "--until-step", "1200", "--episodes", str(EPISODES),
        "--num-envs", str(NUM_ENVS), "--seed", str(SEED), "--device", "cpu",
        "--backend", "thread", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_results(out)
    assert [r["step"] for r in records] == [400, 800, 1200]
    assert all(r["status"] == "ok" and r["env"] == TASK and r["env_backend"] == "maniskill" for r in records)
    final = records[-1]["metrics"]
    # the third round of the launcher's env: its seeded resets rebuilt the scenes the earlier rounds used
    assert final["success_once"] == on_thread["eval/success_once"]  # the launcher's episodes are the Evaluator's
    assert final["reward"] == pytest.approx(float(on_thread["eval/reward"]), rel=1e-9)
    first = records[0]["metrics"]
    assert first["success_once"] < final["success_once"]  # cloning longer pushes the cube in more often


def test_suite_runs_maniskill_conditions_through_the_launcher(on_thread, tmp_path):
    out = tmp_path / "out"
    suite = os.path.join(REPO, "suites", "maniskill-pushcube.yaml")
    proc = launch("--suite", suite, "--checkpoint", FINAL, "--device", "cpu",
                  "--backend", "thread", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {r["condition"]: r for r in read_results(out)}
    assert set(cells) == {"nominal", "obs-noise", "action-noise"}
    assert all(r["status"] == "ok" and r["metrics"]["num_episodes"] == EPISODES for r in cells.values())
    # the nominal cell is the plain evaluation of the same seed: the suite adds nothing to it
    assert cells["nominal"]["episode_returns"] == pytest.approx(ours(on_thread, "episode_returns"), rel=1e-9)
    assert cells["nominal"]["metrics"]["success_once"] == on_thread["eval/success_once"]
    returns = {c: r["metrics"]["reward"] for c, r in cells.items()}
    assert len(set(returns.values())) == 3  # each condition changed the episodes
    for r in cells.values():
        assert 0.0 <= r["metrics"]["success_at_end"] <= r["metrics"]["success_once"] <= 1.0


def test_bad_maniskill_input_is_one_line(tmp_path):
    from simeval.envs import make_env
    from simeval.errors import EnvError

    with pytest.raises(EnvError, match=r"^unknown ManiSkill3 task 'NoSuchTask-v1': mani-skill 3\.0\.1 registers \d+ "):
        make_env("maniskill:NoSuchTask-v1")
    with pytest.raises(ValueError, match=r"body_mass_scale set .* maniskill:PushCube-v1 is built on the maniskill"):
        make_env(TASK, condition={"body_mass_scale": 1.5})
    suite = tmp_path / "bad.yaml"
    suite.write_text(f"name: bad\ntasks:\n  - env: {TASK}\n    conditions:\n      heavy: {{friction_scale: 0.5}}\n")
    proc = launch("--suite", str(suite), "--checkpoint", FINAL, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert "friction_scale" in line and TASK in line, line


def test_a_replayed_episode_comes_back_to_the_bit_as_promised(tmp_path):
    """``--replay``: an episode after sub-env 1's first, re-run in its recorded round (ManiSkill3's promise)."""
    out = tmp_path / "out"
    proc = launch("--checkpoint", FINAL, "--env", TASK, "--episodes", "5", "--num-envs", "2", "--seed", "1",
                  "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = read_results(out)
    assert (line["episode_sub_envs"][4], line["episode_ordinals"][4]) == (1, 2)
    proc = launch("--replay", str(out), "--replay-episode", "1:4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "promise: ManiSkill3: the same return to the bit" in proc.stdout
    assert f"replayed return {line['episode_returns'][4]!r}" in proc.stdout and "equal to the bit: yes" in proc.stdout
