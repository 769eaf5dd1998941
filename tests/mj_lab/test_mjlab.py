"""The real mjlab 1.6 (MuJoCo Warp on its CPU device) through simeval: env, Evaluator, launcher, suites, checkpoints.

Runs in the venv that ``make mjlab`` builds (``make test-mjlab``); every test is
required, so CI fails if mjlab cannot run. The checkpoints are mjlab's own: a
module fixture trains the Go1 flat velocity task with mjlab's trainer
(``python -m mjlab.scripts.train``, rsl_rl's PPO) for three iterations on 4 envs,
which writes the run layout users have (``params/agent.yaml``, ``model_<iter>.pt``
and the ONNX file of the last save). Episodes are short (MuJoCo Warp's CPU device
steps the Go1 at about 100 env-steps/s here).
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
TASK_ID = "Mjlab-Velocity-Flat-Unitree-Go1"
TASK = f"mjlab:{TASK_ID}"
ITERATIONS = 3

pytestmark = [pytest.mark.required, pytest.mark.timeout(900)]


def _env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": REPO,
        "CUDA_VISIBLE_DEVICES": "",  # mjlab's trainer picks the CPU where no GPU is visible
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def _run(*args: str, cwd: str = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=cwd)


def launch(*args: str) -> subprocess.CompletedProcess:
    return _run("-m", "simeval.launch", *args)


def read_results(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:
    """A run of mjlab's own trainer: logs/rsl_rl/go1_velocity/<time>/ with model_0..2.pt and <time>.onnx."""
    root = tmp_path_factory.mktemp("mjlab_train")
    proc = _run(
        "-m", "mjlab.scripts.train", TASK_ID, "--env.scene.num-envs", "4",
        "--agent.max-iterations", str(ITERATIONS), "--agent.save-interval", "1", "--agent.logger", "tensorboard",
        "--log-root", str(root / "logs" / "rsl_rl"),
        cwd=str(root),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (exp,) = os.listdir(root / "logs" / "rsl_rl")
    (run,) = os.listdir(root / "logs" / "rsl_rl" / exp)
    return str(root / "logs" / "rsl_rl" / exp / run)


def test_make_env_builds_the_mjlab_task_with_simevals_transform_layout():
    import torch

    from simeval.envs import OBS_NORM_ID, make_env

    env = make_env(TASK, num_envs=3, max_steps=20, seed=0, device="cpu")
    try:
        assert [type(t).__name__ for t in env.transform] == ["DoubleToFloat", "StepCounter", "VecNormV2", "RewardSum"]
        assert OBS_NORM_ID == "env.transform[2]"
        assert env.batch_size == torch.Size([3])
        assert env.observation_spec["observation"].shape == torch.Size([3, 48])  # Go1's actor group
        assert "critic" not in env.observation_spec.keys()
        assert env.action_spec.shape == torch.Size([3, 12])
        td = env.rollout(25, break_when_any_done=False)
        done = td["next", "done"].squeeze(-1)
        # max_steps became mjlab's own episode length: every sub-env times out after exactly 20 steps
        assert done[:, 19].all() and not done[:, :19].any()
        log = td["next", "log"][:, 19]
        assert log["Episode_Termination/time_out"].tolist() == [1.0, 1.0, 1.0]  # a fraction of the step's episodes
        assert log["Episode_Termination/fell_over"].tolist() == [0.0, 0.0, 0.0]
        assert torch.isfinite(log["Metrics/twist/error_vel_xy"]).all()
        assert torch.isnan(td["next", "log", "Metrics/twist/error_vel_xy"][:, 5]).all()  # logged at episode ends only
    finally:
        env.close()


def _evaluate(backend: str, ckpt: str, seed: int, episodes: int = 4, condition=None) -> dict:
    import simeval
    from simeval.envs import make_env
    from simeval.factories import build_policy

    ck = simeval.load_checkpoint(ckpt)
    ev = simeval.Evaluator(
        functools.partial(make_env, TASK, num_envs=4, max_steps=20, device="cpu", obs_norm=False, condition=condition),
        policy_factory=functools.partial(build_policy, ck.policy_factory, ck.policy_kwargs),
        num_trajectories=episodes,
        backend=backend,
        device="cpu",
        seed=seed,
        num_gpus=0,
        keep_episodes=True,
        start_timeout=300,
    )
    try:
        return ev.evaluate(weights_dict=ck.weights_dict, step=ck.step)
    finally:
        ev.shutdown()


def test_same_seed_same_episodes_on_every_backend_and_the_launcher(run_dir, tmp_path):
    ckpt = os.path.join(run_dir, "model_2.pt")
    thread = _evaluate("thread", ckpt, seed=3)
    again = _evaluate("thread", ckpt, seed=3)
    process = _evaluate("process", ckpt, seed=3)
    other = _evaluate("thread", ckpt, seed=4)
    assert thread["eval/num_episodes"] == 4
    assert thread["eval/episode_returns"].tolist() == again["eval/episode_returns"].tolist()  # common random numbers
    assert process["eval/episode_returns"].tolist() == thread["eval/episode_returns"].tolist()
    assert other["eval/episode_returns"].tolist() != thread["eval/episode_returns"].tolist()
    assert thread["eval/log/Metrics/twist/error_vel_xy"] > 0.0
    out = tmp_path / "out"
    proc = launch(
        "--env", TASK, "--checkpoint", ckpt, "--episodes", "4", "--num-envs", "4", "--max-steps", "20",
        "--seed", "3", "--device", "cpu", "--backend", "thread", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = read_results(out)
    assert rec["status"] == "ok" and rec["env"] == TASK and rec["env_backend"] == "mjlab"
    assert rec["metrics"]["reward"] == pytest.approx(float(thread["eval/reward"]), rel=1e-9)  # the same episodes
    for key in ("log/Metrics/twist/error_vel_xy", "log/Episode_Termination/fell_over", "terminated_fraction"):
        assert key in rec["metrics"], key


def test_rsl_rl_checkpoint_and_onnx_act_as_mjlabs_own_policy(run_dir):
    import dataclasses

    import torch
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.tasks.registry import load_env_cfg, load_rl_cfg, load_runner_cls

    import simeval
    from simeval.envs import make_env
    from simeval.factories import build_policy

    ckpt = os.path.join(run_dir, f"model_{ITERATIONS - 1}.pt")
    cfg = load_env_cfg(TASK_ID, play=True)
    cfg.scene.num_envs = 4
    env = RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=cfg, device="cpu"))
    runner = load_runner_cls(TASK_ID)(env, dataclasses.asdict(load_rl_cfg(TASK_ID)), device="cpu")
    runner.load(ckpt, map_location="cpu")
    theirs = runner.get_inference_policy(device="cpu")
    obs = env.get_observations()
    for _ in range(5):  # states off the initial pose
        obs, *_ = env.step(theirs(obs))
    with torch.no_grad():
        want = theirs(obs)

    probe_env = make_env(TASK, num_envs=1, obs_norm=False, device="cpu")
    ck = simeval.load_checkpoint(ckpt)
    assert ck.step == ITERATIONS - 1 and ck.meta["architecture"] == os.path.join("params", "agent.yaml")
    ours = build_policy(ck.policy_factory, ck.policy_kwargs, probe_env)
    simeval.weights.load_weights(ours, ck.policy, "policy")
    (onnx_path,) = [os.path.join(run_dir, n) for n in os.listdir(run_dir) if n.endswith(".onnx")]
    ox = simeval.load_checkpoint(onnx_path)  # the file mjlab exports on each save: the last one, model_2
    onnx_policy = build_policy(ox.policy_factory, ox.policy_kwargs, probe_env)
    simeval.weights.load_weights(onnx_policy, ox.policy, "policy")
    probe_env.close()
    from tensordict import TensorDict

    td = TensorDict({"observation": obs["actor"]}, batch_size=[4])
    with torch.no_grad():
        assert (ours(td.clone())["action"] - want).abs().max() <= 1e-5
        assert (onnx_policy(td.clone())["action"] - want).abs().max() <= 1e-4


def test_launcher_watch_evaluates_every_checkpoint_of_an_mjlab_run(run_dir, tmp_path):
    out = tmp_path / "out"
    proc = launch(
        "--env", TASK, "--watch", run_dir, "--until-step", str(ITERATIONS - 1), "--episodes", "4",
        "--num-envs", "4", "--max-steps", "20", "--device", "cpu", "--backend", "thread", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = sorted(read_results(out), key=lambda r: r["step"])
    assert [r["step"] for r in records] == list(range(ITERATIONS))  # mjlab's rsl_rl iterations, in order
    for r in records:
        assert r["status"] == "ok" and r["metrics"]["num_episodes"] == 4
        assert "log/Metrics/twist/error_vel_xy" in r["metrics"]


SUITE = f"""\
name: go1-robustness
seed: 0
episodes: 4
num_envs: 4
max_steps: 20
tasks:
  - env: {TASK}
    conditions:
      nominal: {{}}
      fast: {{cfg: {{commands.twist.ranges.lin_vel_x: [1.5, 1.5], commands.twist.rel_standing_envs: 0.0}}}}
      obs-noise: {{observation_noise: 0.2}}
      slippery: {{cfg: {{events.foot_friction_slide.params.ranges: [0.05, 0.05]}}}}
"""


def test_suite_conditions_map_to_mjlab_command_ranges_and_noise(run_dir, tmp_path):
    suite = tmp_path / "go1.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "out"
    ckpt = os.path.join(run_dir, "model_2.pt")
    proc = launch(
        "--suite", str(suite), "--checkpoint", ckpt, "--device", "cpu", "--backend", "thread", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {r["condition"]: r for r in read_results(out)}
    assert set(cells) == {"nominal", "fast", "obs-noise", "slippery"}
    assert all(r["status"] == "ok" and r["metrics"]["num_episodes"] == 4 for r in cells.values())
    returns = {c: r["metrics"]["reward"] for c, r in cells.items()}
    assert len(set(returns.values())) == 4  # each condition changed the episodes
    # the nominal cell is the plain evaluation of the same seed: the suite adds nothing to it
    nominal = _evaluate("thread", ckpt, seed=0)
    assert cells["nominal"]["episode_returns"] == pytest.approx(nominal["eval/episode_returns"].tolist(), rel=1e-9)


def test_bad_mjlab_input_is_one_line():
    from simeval.envs import make_env
    from simeval.errors import EnvError

    with pytest.raises(EnvError, match=r"^unknown mjlab task 'Mjlab-No-Such-Task': mjlab 1\.6\.0 registers .*Go1"):
        make_env("mjlab:Mjlab-No-Such-Task")
    with pytest.raises(EnvError, match=r"tracks a motion clip that mjlab does not ship"):
        make_env("mjlab:Mjlab-Tracking-Flat-Unitree-G1")
    with pytest.raises(ValueError, match=r"body_mass_scale set model physics directly; on mjlab:"):
        make_env(TASK, condition={"body_mass_scale": 1.5})
    with pytest.raises(ValueError, match=r"^cfg override 'commands\.twist\.nope': 'nope' is not in commands\.twist"):
        make_env(TASK, num_envs=1, cfg_overrides={"commands.twist.nope": 1})
    proc = launch("--env", "mjlab:Mjlab-Tracking-Flat-Unitree-G1", "--checkpoint", "none.pt")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert "Mjlab-Tracking-Flat-Unitree-G1" in line or "none.pt" in line


@pytest.mark.parametrize(
    "name, path, value, words",
    [
        ("fast", "commands.twist.ranges.lin_vel_x", "[1.5, 1.5]", None),  # data into data: loads as before
        ("evil", "events.foot_friction_slide.func", "os:system", ".func: 'func' names a callable or a class"),
        ("whole", "commands.twist.ranges", "{lin_vel_x: [1.0, 1.0]}", ": cfg override 'commands.twist.ranges': "
         "the field holds a config object (Ranges)"),
        ("entity", "events.foot_friction_slide.params.asset_cfg", "{name: robot}", ": cfg override "
         "'events.foot_friction_slide.params.asset_cfg': the field holds a config object (SceneEntityCfg)"),
        ("typo", "commands.twist.nope", "1.0", ": cfg override 'commands.twist.nope': 'nope' is not in commands.twist"),
    ],
)  # fmt: skip
def test_a_suites_cfg_overrides_are_data_checked_against_mjlabs_config_at_load(tmp_path, name, path, value, words):
    from simeval.launch.config import ConfigError
    from simeval.launch.suite import load_suite

    suite = tmp_path / "go1.yaml"
    conditions = f"      {name}: {{cfg: {{{path}: {value}}}}}\n"
    suite.write_text(f"name: go1\ntasks:\n  - env: {TASK}\n    conditions:\n{conditions}")
    if words is None:
        assert load_suite(str(suite)).cells()[0].condition.cfg == {path: [1.5, 1.5]}
        return
    with pytest.raises(ConfigError) as err:
        load_suite(str(suite))
    message = str(err.value)
    assert message.startswith(f"{suite}: tasks[0].conditions.{name}.cfg") and words in message, message
    assert "a cfg override sets data only" in message or name == "typo"
    assert "\n" not in message


def test_rsl_rl_integration_evaluates_mjlabs_runner_every_iteration_beside_training(tmp_path):
    import dataclasses

    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.tasks.registry import load_env_cfg, load_rl_cfg, load_runner_cls

    from simeval.integrations.rsl_rl import evaluate_during_training

    cfg = load_env_cfg(TASK_ID)
    cfg.scene.num_envs = 4
    agent = load_rl_cfg(TASK_ID)
    agent.save_interval, agent.logger = 1, "tensorboard"
    env = RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=cfg, device="cpu"))
    log_dir = tmp_path / "run"
    runner = load_runner_cls(TASK_ID)(env, dataclasses.asdict(agent), log_dir=str(log_dir), device="cpu")
    # the two lines a train script adds
    evaluation = evaluate_during_training(runner, TASK, every=1, episodes=4, max_steps=20, seed=3)
    pending_at_update = []
    update = runner.alg.update

    def recording_update():
        pending_at_update.append(evaluation.rounds.pending)
        return update()

    runner.alg.update = recording_update
    runner.learn(num_learning_iterations=ITERATIONS)

    assert [int(r["eval/step"]) for r in evaluation.results] == list(range(ITERATIONS))
    assert any(pending_at_update)  # PPO updates ran while a round was outstanding: training was not blocked
    lines = (log_dir / "simeval" / "results.jsonl").read_text().splitlines()
    assert len(lines) == ITERATIONS
    assert evaluation.rounds.evaluator is None  # learn() finished the last rounds and stopped the worker
    # the numbers are the launcher's on the checkpoint the runner saved at that iteration, same seed
    out = tmp_path / "out"
    proc = launch(
        "--env", TASK, "--checkpoint", str(log_dir / f"model_{ITERATIONS - 1}.pt"), "--episodes", "4",
        "--num-envs", "4", "--max-steps", "20", "--seed", "3", "--device", "cpu", "--backend", "thread",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = read_results(out)
    assert rec["episode_returns"] == pytest.approx(evaluation.results[-1]["eval/episode_returns"].tolist(), rel=1e-9)


def test_returns_equal_a_bare_loop_over_the_env_across_batches():
    """Every episode's return and length against an oracle that shares no code with the Evaluator
    (tests/returns_oracle.py: the env stepped with torchrl's own auto-reset, rewards summed per sub-env).

    mjlab resets sub-envs inside its step, so the Evaluator sums the rewards itself (its tally), carrying an
    unfinished episode's return from one Collector batch into the next. The cartpole's 20-step episodes (it only
    times out) in the default batches (20 steps: one episode each) and in batches of 7 steps, which split them.
    It also holds each step's own reward and end flags: torchrl's MJLabWrapper returns views of mjlab's buffers,
    which the next step overwrites (simeval.envs.simulators.mjlab.log copies them).
    """
    from helpers import mlp_policy
    from returns_oracle import assert_same_episodes, bare_loop

    import simeval
    from simeval.envs import make_env

    horizon, episodes, max_steps, seed = 7, 6, 20, 3
    factory = functools.partial(
        make_env, "mjlab:Mjlab-Cartpole-Balance", num_envs=3, max_steps=max_steps, device="cpu", obs_norm=False
    )

    def policy(env):
        return mlp_policy(
            seed=1, obs_dim=env.observation_spec["observation"].shape[-1], act_dim=env.action_spec.shape[-1]
        )

    env = factory()
    oracle = bare_loop(env, policy(env), episodes, seed=seed)
    env.close()
    assert oracle.lengths == [max_steps] * episodes and len(set(oracle.returns64)) == episodes
    assert oracle.straddling(horizon) == episodes
    for extra in ({}, {"frames_per_batch": 3 * horizon}):
        ev = simeval.Evaluator(
            factory, policy_factory=policy, num_trajectories=episodes, device="cpu", seed=seed, keep_episodes=True,
            **extra,
        )  # fmt: skip
        try:
            assert_same_episodes(ev.evaluate(), oracle, "float64")
        finally:
            ev.shutdown()


def _still_arm(env):
    """A policy that holds every action at zero (the arm stays at its default pose)."""
    import torch
    from tensordict.nn import TensorDictModule

    size = env.action_spec.shape[-1]
    return TensorDictModule(
        lambda obs: torch.zeros(*obs.shape[:-1], size), in_keys=["observation"], out_keys=["action"]
    )


def test_a_manipulation_tasks_episode_success_is_the_success_rate():
    import simeval
    from simeval.envs import make_env

    ev = simeval.Evaluator(
        functools.partial(
            make_env, "mjlab:Mjlab-Lift-Cube-Yam", num_envs=2, max_steps=10, device="cpu", obs_norm=False
        ),
        policy_factory=_still_arm,
        num_trajectories=2,
        device="cpu",
        seed=0,
    )
    try:
        r = ev.evaluate()
    finally:
        ev.shutdown()
    assert r["eval/num_episodes"] == 2
    assert r["eval/success_rate"] == r["eval/log/Metrics/lift_height/episode_success"] == 0.0  # it never lifts
    assert r["eval/log/Episode_Termination/time_out"] == 1.0


def test_a_replayed_episode_comes_back_to_the_bit_with_the_whole_round(run_dir, tmp_path):
    """``--replay``: sub-env 3's second episode. mjlab's sub-envs share one reset generator, drawn in the order
    episodes end, so only the whole recorded round gives it back; on the CPU device, to the bit (its promise)."""
    out = tmp_path / "out"
    proc = launch(
        "--env", TASK, "--checkpoint", os.path.join(run_dir, "model_2.pt"), "--episodes", "6", "--num-envs", "4",
        "--max-steps", "20", "--seed", "3", "--device", "cpu", "--backend", "thread", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = read_results(out)
    assert (line["episode_sub_envs"][5], line["episode_ordinals"][5]) == (3, 1)
    proc = launch("--replay", str(out), "--replay-episode", "1:5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "promise: mjlab: the same return to the bit on the CPU device, the whole round re-run" in proc.stdout
    assert f"replayed return {line['episode_returns'][5]!r}" in proc.stdout and "equal to the bit: yes" in proc.stdout
