"""simeval.integrations.skrl in a real skrl PPO run (skrl's Runner, an Isaac Lab-style config) on Pendulum-v1.

Four training envs, 400 timesteps, a round every 200 in a child process: the
rounds arrive for the right timesteps in the experiment directory, training steps
on while a round runs, and the numbers equal the launcher's on the checkpoint skrl
wrote at that timestep, with the same seed (the config written to
``params/agent.yaml`` as Isaac Lab's skrl train script does).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest
import yaml
from test_format_skrl import ENV, INTERVAL, ISAACLAB_CFG, TIMESTEPS

from simeval.integrations.skrl import evaluate_during_training

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVERY = INTERVAL
# Isaac Lab's skrl PPO config for its cartpole (shared model, ELU), shortened: a checkpoint every EVERY timesteps.
CFG = ISAACLAB_CFG

pytestmark = pytest.mark.timeout(600)


def test_rounds_run_beside_skrls_trainer_at_its_checkpoint_timesteps(tmp_path):
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.utils import set_seed
    from skrl.utils.runner.torch import Runner

    cfg = yaml.safe_load(CFG)
    cfg["agent"]["experiment"]["directory"], cfg["agent"]["experiment"]["experiment_name"] = str(tmp_path), "run"
    set_seed(0)
    env = wrap_env(gym.make_vec(ENV, num_envs=4, vectorization_mode="sync"), wrapper="gymnasium")
    runner = Runner(env, copy.deepcopy(cfg))
    run = tmp_path / "run"
    (run / "params").mkdir(parents=True, exist_ok=True)
    (run / "params" / "agent.yaml").write_text(yaml.safe_dump(cfg))  # as Isaac Lab's skrl train script does
    # the two lines a train script adds
    evaluation = evaluate_during_training(runner, ENV, every=EVERY, episodes=4, seed=2)
    pending = []
    update = runner.agent.update
    runner.agent.update = lambda **kw: (pending.append(evaluation.rounds.pending), update(**kw))[1]
    runner.run()

    assert [int(r["eval/step"]) for r in evaluation.results] == [EVERY, TIMESTEPS]
    assert any(pending)  # PPO updates ran while a round was outstanding: training was not blocked
    assert evaluation.rounds.evaluator is None  # the last timestep finished the rounds and stopped the worker
    rows = [json.loads(line) for line in (run / "simeval" / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [EVERY, TIMESTEPS] and rows[0]["env"] == ENV
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--env", ENV,
         "--checkpoint", str(run / "checkpoints" / f"agent_{TIMESTEPS}.pt"), "--episodes", "4", "--num-envs", "4",
         "--seed", "2", "--backend", "thread", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rec["architecture"].endswith(os.path.join("params", "agent.yaml"))  # the launcher read the run's config
    assert rec["episode_returns"] == pytest.approx(rows[1]["episode_returns"], rel=1e-9)


def test_bad_every_is_one_line():
    with pytest.raises(ValueError, match=r"^evaluate_during_training\(every=0\): a whole number of timesteps >= 1\."):
        evaluate_during_training(object(), ENV, every=0)
