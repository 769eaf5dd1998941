"""rsl_rl checkpoints (OnPolicyRunner's ``model_<iteration>.pt``) read as they are, checked against rsl_rl.

A real rsl_rl PPO run (rsl-rl-lib, a few iterations on gymnasium's Pendulum
through a small VecEnv adapter, empirical observation normalisation on) writes
its checkpoints; Isaac Lab's layout adds ``params/agent.yaml``. simeval's actor
must give rsl_rl's inference-policy actions and score like rsl_rl's play loop.
The Isaac Lab cartpole version of this check is in tests/isaac_lab.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
import yaml

from simeval.checkpoints import CheckpointError, load_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT_YAML = os.path.join(REPO, "simeval", "data", "isaaclab_cartpole_rsl_rl", "params", "agent.yaml")
ENV = "Pendulum-v1"
ITERATIONS = 6
LAST = ITERATIONS - 1  # rsl_rl numbers iterations from 0: its last save is model_5.pt
pytestmark = pytest.mark.timeout(600)


class PendulumVecEnv:
    """rsl_rl's VecEnv over gymnasium's vector Pendulum (observations under the "policy" group)."""

    def __init__(self, num_envs: int, seed: int) -> None:
        from rsl_rl.env import VecEnv

        VecEnv.register(PendulumVecEnv)
        self.env = gym.make_vec(
            ENV, num_envs=num_envs, vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )  # fmt: skip
        self.num_envs, self.num_actions, self.device, self.cfg = num_envs, 1, "cpu", {}
        self.max_episode_length = 200
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self._obs, _ = self.env.reset(seed=seed)

    def _td(self):
        from tensordict import TensorDict

        return TensorDict({"policy": torch.as_tensor(self._obs, dtype=torch.float32)}, [self.num_envs])

    def get_observations(self):
        return self._td()

    def step(self, actions: torch.Tensor):
        self._obs, reward, terminated, truncated, _ = self.env.step(actions.detach().cpu().numpy())
        done = torch.as_tensor(terminated | truncated)
        self.episode_length_buf = torch.where(done, 0, self.episode_length_buf + 1)
        extras = {"time_outs": torch.as_tensor(truncated)}
        return self._td(), torch.as_tensor(reward, dtype=torch.float32), done.long(), extras


def _agent_cfg() -> dict:
    """Isaac Lab's own rsl_rl config for the cartpole (shipped run), with normalisation on and few iterations."""
    from simeval.checkpoints.formats.yaml_params import load_params

    cfg = load_params(AGENT_YAML)
    cfg.update(max_iterations=ITERATIONS, save_interval=2, num_steps_per_env=64, logger="tensorboard")
    cfg["actor"]["obs_normalization"] = cfg["critic"]["obs_normalization"] = True
    return cfg


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(0)
    log_dir = tmp_path_factory.mktemp("rsl_rl") / "pendulum"
    cfg = _agent_cfg()
    runner = OnPolicyRunner(PendulumVecEnv(16, seed=0), cfg, log_dir=str(log_dir), device="cpu")
    runner.learn(num_learning_iterations=ITERATIONS)
    os.makedirs(log_dir / "params")
    with open(log_dir / "params" / "agent.yaml", "w") as f:
        yaml.safe_dump(cfg, f)  # what Isaac Lab's train.py writes beside the checkpoints
    return log_dir, runner


def _rsl_rl_returns(runner, n: int, seed: int) -> list[float]:
    """rsl_rl's play loop: its inference policy stepping the env; each sub-env's first episode."""
    env = PendulumVecEnv(n, seed)
    policy = runner.get_inference_policy(device="cpu")
    total, returns = torch.zeros(n, dtype=torch.float64), [None] * n
    obs = env.get_observations()
    with torch.inference_mode():
        while any(r is None for r in returns):
            obs, reward, done, _ = env.step(policy(obs))
            total += reward.double()
            for e in done.nonzero().flatten().tolist():
                returns[e] = float(total[e]) if returns[e] is None else returns[e]
                total[e] = 0.0
    return returns


def test_actions_match_rsl_rls_inference_policy_with_and_without_agent_yaml(run, tmp_path):
    from tensordict import TensorDict

    from simeval.envs import make_env
    from simeval.factories import build_policy
    from simeval.weights import load_weights

    log_dir, runner = run
    ckpt = log_dir / f"model_{LAST}.pt"
    alone = tmp_path / f"model_{LAST}.pt"
    shutil.copy(ckpt, alone)  # no params/ beside it: the architecture is inferred from the weights
    policy = runner.get_inference_policy(device="cpu")
    obs = torch.randn(64, 3) * 3
    expected = policy(TensorDict({"policy": obs}, [64]))
    env = make_env(ENV, num_envs=2, obs_norm=False)
    for path, source in ((ckpt, os.path.join("params", "agent.yaml")), (alone, "inferred from the weights")):
        ck = load_checkpoint(path)
        assert ck.meta["format"] == "rsl_rl" and ck.step == LAST
        assert ck.meta["architecture"].startswith(source)
        assert ck.policy_kwargs["hidden_dims"] == [32, 32] and ck.policy_kwargs["obs_normalization"] is True
        ours = build_policy(ck.policy_factory, ck.policy_kwargs, env)
        load_weights(ours, ck.policy, "policy")
        with torch.no_grad():
            got = ours(TensorDict({"observation": obs}, [64]))["action"]
        assert (got - expected).abs().max() <= 1e-5


def test_watch_scores_each_checkpoint_like_rsl_rls_play_loop(run, tmp_path):
    log_dir, runner = run
    (log_dir / "DONE").write_text("")
    out, n = tmp_path / "out", 12
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--env", ENV, "--watch", str(log_dir), "--episodes", str(n),
         "--num-envs", "4", "--max-steps", "200", "--seed", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=400, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # rsl_rl's file naming: every model_<iteration>.pt once, in training order, nothing else in the run dir
    assert [r["checkpoint_name"] for r in records] == [f"model_{i}.pt" for i in (0, 2, 4, LAST)]
    assert all(r["status"] == "ok" and r["checkpoint_format"] == "rsl_rl" for r in records)
    theirs, ours = _rsl_rl_returns(runner, n, seed=11), records[-1]["episode_returns"]
    se = (statistics.pvariance(theirs) / n + statistics.pvariance(ours) / len(ours)) ** 0.5
    assert abs(statistics.fmean(theirs) - statistics.fmean(ours)) <= 4 * se + 1.0


def test_bad_rsl_rl_input_is_one_line(run, tmp_path):
    log_dir, _ = run
    # The run says it normalised observations, the file has no statistics: refused, not evaluated unnormalised.
    data = torch.load(log_dir / "model_0.pt", weights_only=True)
    data["actor_state_dict"] = {k: v for k, v in data["actor_state_dict"].items() if "normalizer" not in k}
    os.makedirs(tmp_path / "params")
    shutil.copy(log_dir / "params" / "agent.yaml", tmp_path / "params" / "agent.yaml")
    torch.save(data, tmp_path / "model_0.pt")
    with pytest.raises(CheckpointError, match="model_0.pt: the run used observation normalisation but"):
        load_checkpoint(tmp_path / "model_0.pt")

    # Layer sizes that do not fit the env: exit 2, one line naming the file.
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--env", "HalfCheetah-v5", "--checkpoint",
         str(log_dir / "model_0.pt"), "--episodes", "2", "--num-envs", "2", "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "model_0.pt" in last and "do not fit" in last

    # Code in the file is never run.
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"actor_state_dict": {}, "iter": 1, "x": Payload()}, tmp_path / "evil.pt", pickle_module=pickle)
    with pytest.raises(CheckpointError, match="evil.pt: refused to load"):
        load_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()


def test_a_suite_line_names_its_checkpoint_as_a_plain_runs_line_does(run, tmp_path):
    """Suite and plain runs write the same checkpoint fields (a suite line once lacked ``architecture``)."""
    log_dir, _ = run
    suite = tmp_path / "pendulum.yaml"
    suite.write_text(f"name: p\nepisodes: 2\nnum_envs: 2\nmax_steps: 20\ntasks:\n  - env: {ENV}\n")
    ckpt = str(log_dir / f"model_{LAST}.pt")
    lines = {}
    for kind, extra in (("plain", ["--env", ENV, "--episodes", "2", "--num-envs", "2", "--max-steps", "20"]),
                        ("suite", ["--suite", str(suite)])):
        proc = subprocess.run(
            [sys.executable, "-m", "simeval.launch", "--checkpoint", ckpt, *extra, "--out", str(tmp_path / kind)],
            capture_output=True, text=True, timeout=300, cwd=REPO,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        (lines[kind],) = [json.loads(line) for line in (tmp_path / kind / "results.jsonl").read_text().splitlines()]
    fields = ("checkpoint", "checkpoint_name", "checkpoint_sha256", "checkpoint_format", "architecture")
    assert lines["suite"]["architecture"].startswith(os.path.join("params", "agent.yaml"))
    assert {k: lines["suite"][k] for k in fields} == {k: lines["plain"][k] for k in fields}
