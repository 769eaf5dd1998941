"""simeval.integrations.rsl_rl in Isaac Lab's own rsl_rl training (examples/train_rsl_rl.py --eval-every).

Isaac Lab 3.0 kit-less on the CPU, its cartpole with the robot read from this repo:
four PPO iterations on 64 envs, a round every two (iterations 0 and 2) in a child
process. The rounds land in the run directory, and the numbers are the launcher's
on the checkpoint rsl_rl saved at that iteration, with the same seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TASK = "Simeval-Isaac-Cartpole-Direct"

pytestmark = [pytest.mark.required, pytest.mark.timeout(1200)]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=900, env=env, cwd=REPO)


def test_train_rsl_rl_eval_every_evaluates_beside_isaac_labs_training(tmp_path):
    proc = _run(
        os.path.join(REPO, "examples", "train_rsl_rl.py"), "--task", TASK, "--num-envs", "64",
        "--max-iterations", "4", "--save-interval", "1", "--log-root", str(tmp_path / "logs"),
        "--run-name", "run", "--eval-every", "2", "--eval-episodes", "8", "--eval-max-steps", "60",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = proc.stdout.strip().splitlines()[-1]
    rows = [json.loads(line) for line in open(os.path.join(run, "simeval", "results.jsonl"))]
    assert [r["step"] for r in rows] == [0, 2]  # rsl_rl's save_interval rule: it % every == 0
    for r in rows:
        assert r["metrics"]["num_episodes"] == 8
    out = tmp_path / "out"
    proc = _run(
        "-m", "simeval.launch", "--env", f"isaaclab:{TASK}", "--checkpoint", os.path.join(run, "model_2.pt"),
        "--episodes", "8", "--num-envs", "8", "--max-steps", "60", "--seed", "0", "--device", "cpu",
        "--backend", "thread", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rec["episode_returns"] == pytest.approx(rows[1]["episode_returns"], rel=1e-9)
