"""simeval.integrations.sb3.EvalCallback in a real Stable-Baselines3 PPO run on real MuJoCo.

PPO on InvertedPendulum-v5 under VecNormalize, two training envs, a round every
64 calls (128 timesteps) in a child process: the results arrive for the trigger
steps in SB3's own ``evaluations.npz`` layout, training steps on while rounds run,
``best_model.zip`` is the snapshot that scored best, and the launcher gives the same
numbers on it with the same seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from simeval.integrations.sb3 import EvalCallback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = "InvertedPendulum-v5"

pytestmark = pytest.mark.timeout(600)


class Count(BaseCallback):
    """Counts its calls; with ``evaluator_of``, also the training steps taken while a round was outstanding."""

    def __init__(self, evaluator_of: EvalCallback | None = None) -> None:
        super().__init__()
        self.calls = 0
        self.of = evaluator_of
        self.steps_while_pending = 0

    def _on_step(self) -> bool:
        self.calls += 1
        if self.of is not None and self.of.rounds.pending:
            self.steps_while_pending += 1
        return True


def test_rounds_run_beside_ppo_and_land_in_sb3s_layout(tmp_path):
    train_env = VecNormalize(make_vec_env(TASK, n_envs=2, seed=0))
    on_best = Count()
    cb = EvalCallback(
        train_env, callback_on_new_best=on_best, n_eval_episodes=4, eval_freq=64,
        log_path=str(tmp_path / "logs"), best_model_save_path=str(tmp_path / "best"), verbose=0,
    )  # fmt: skip
    watch = Count(evaluator_of=cb)
    model = PPO("MlpPolicy", train_env, n_steps=64, batch_size=64, n_epochs=2, seed=0, verbose=0)
    model.learn(total_timesteps=640, callback=CallbackList([cb, watch]))

    with np.load(tmp_path / "logs" / "evaluations.npz") as f:
        timesteps, results, lengths = f["timesteps"], f["results"], f["ep_lengths"]
    assert timesteps.tolist() == [128, 256, 384, 512, 640]  # every 64 calls of 2 envs, the last one included
    assert results.shape == (5, 4) and lengths.shape == (5, 4)
    assert np.allclose(results.mean(axis=1), [np.mean(r) for r in cb.evaluations_results])
    assert (lengths >= 1).all() and (lengths <= 1000).all()
    assert watch.steps_while_pending > 0  # training stepped while rounds ran: it was not blocked by them
    best = int(np.argmax(results.mean(axis=1)))
    assert cb.best_mean_reward == pytest.approx(results[best].mean())
    improvements = sum(results[i].mean() > max([-np.inf, *results[:i].mean(axis=1)]) for i in range(5))
    assert on_best.calls == improvements >= 1  # callback_on_new_best: once per new best

    # best_model.zip is the snapshot that scored best: SB3 loads it, and the launcher scores it the same
    best_dir = tmp_path / "best"
    assert PPO.load(best_dir / "best_model.zip").num_timesteps == timesteps[best]
    out = tmp_path / "launch"
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--checkpoint", str(best_dir / "best_model.zip"),  # its env: recorded
         "--episodes", "4", "--num-envs", "4", "--seed", "0", "--backend", "thread", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rec["step"] == timesteps[best] and rec["checkpoint_format"] == "sb3" and rec["env"] == TASK
    assert rec["episode_returns"] == pytest.approx(results[best].tolist(), rel=1e-9)  # the same 4 episodes
    assert rec["episode_lengths"] == lengths[best].tolist()


def test_same_seed_same_episodes_in_every_round_on_the_thread_backend(tmp_path, sb3_logger_dir):
    model = PPO("MlpPolicy", make_vec_env(TASK, n_envs=1, seed=1), n_steps=32, batch_size=32, seed=1, verbose=0)
    cb = EvalCallback(TASK, n_eval_episodes=3, eval_freq=10_000, backend="thread", verbose=0)
    model.learn(total_timesteps=32, callback=cb)  # no round triggered: training ends cleanly
    assert model.logger.dir == sb3_logger_dir  # SB3's logger under pytest's temporary directory, not /tmp/SB3-<date>
    assert cb.evaluations_timesteps == [] and cb.rounds.evaluator is None
    cb = EvalCallback(TASK, n_eval_episodes=3, eval_freq=16, backend="thread", log_path=str(tmp_path), verbose=0)
    model.learn(total_timesteps=32, callback=cb, reset_num_timesteps=False)
    assert len(cb.evaluations_results) == 2


def test_bad_arguments_are_one_line():
    with pytest.raises(ValueError, match=r"^EvalCallback\(deterministic=False\): simeval plays SB3's deterministic"):
        EvalCallback(TASK, deterministic=False)
    with pytest.raises(ValueError, match=r"this env has none; pass the id"):
        EvalCallback(object())
    with pytest.raises(ValueError, match=r"^EvalCallback\(eval_env='HalfCheeta-v5'\): .*HalfCheeta-v5"):
        EvalCallback("HalfCheeta-v5")  # a typo fails when the callback is built, not mid-training
