"""Stable-Baselines3 zips (PPO, SAC, TD3) read as SB3 writes them, checked against SB3 itself.

Real SB3 runs on gymnasium's Pendulum write their checkpoints: PPO under VecNormalize
through CheckpointCallback (``rl_model_<N>_steps.zip`` with ``save_vecnormalize=True``),
SAC and TD3 with ``model.save``. simeval's actor must give ``model.predict(obs,
deterministic=True)``'s actions and score like ``evaluate_policy``; code in a zip or in
a VecNormalize pickle must never run.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO, SAC, TD3
from stable_baselines3.common.callbacks import CheckpointCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

from simeval.checkpoints import CheckpointError, load_checkpoint
from simeval.checkpoints.formats import sb3 as sb3_format

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "Pendulum-v1"
EPISODES, NUM_ENVS = 32, 16  # Pendulum episodes are 200 steps
PPO_STEPS = (1024, 2048)
CASES = {
    "ppo": (PPO, "ppo/rl_model_2048_steps.zip"),
    "ppo_relu": (PPO, "ppo_relu/model.zip"),
    "sac": (SAC, "sac/model.zip"),
    "td3": (TD3, "td3/model.zip"),
}
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sb3")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small nets: intra-op threads only contend on a shared machine
    try:
        venv = VecNormalize(make_vec_env(ENV, n_envs=1, seed=0))
        callback = CheckpointCallback(PPO_STEPS[0], str(root / "ppo"), save_vecnormalize=True)
        PPO("MlpPolicy", venv, n_steps=PPO_STEPS[0], seed=0).learn(PPO_STEPS[-1], callback=callback)
        # Unnormalised, ReLU: unbounded Gaussian means, which SB3 clips to the action bounds.
        relu = PPO("MlpPolicy", ENV, n_steps=PPO_STEPS[0], seed=0, policy_kwargs={"activation_fn": torch.nn.ReLU})
        relu.learn(PPO_STEPS[0])
        (root / "ppo_relu").mkdir()
        relu.save(root / "ppo_relu" / "model")
        off_policy = {"seed": 0, "learning_starts": 1000, "train_freq": 8, "batch_size": 64}
        for algo, extra in ((SAC, {"activation_fn": torch.nn.ELU}), (TD3, {})):
            model = algo("MlpPolicy", ENV, policy_kwargs={"net_arch": [64, 64], **extra}, **off_policy)
            model.learn(3000)
            (root / algo.__name__.lower()).mkdir()
            model.save(root / algo.__name__.lower() / "model")
    finally:
        torch.set_num_threads(threads)
    return root


def _vecnormalize(path, n_envs: int = 1) -> VecNormalize:
    """SB3's own evaluation env around the saved statistics: frozen, rewards as the task gives them."""
    env = VecNormalize.load(str(path), make_vec_env(ENV, n_envs=n_envs, seed=0))
    env.training, env.norm_reward = False, False
    return env


def _simeval_actions(ck, obs: np.ndarray) -> np.ndarray:
    from tensordict import TensorDict

    from simeval.envs import make_env
    from simeval.factories import build_policy
    from simeval.weights import load_weights

    env = make_env(ENV, num_envs=2, obs_norm=False)
    policy = build_policy(ck.policy_factory, ck.policy_kwargs, env)
    load_weights(policy, ck.policy, "policy")
    env.close()
    with torch.no_grad():
        return policy(TensorDict(observation=torch.as_tensor(obs), batch_size=[len(obs)]))["action"].numpy()


def _observations() -> np.ndarray:
    obs = np.random.default_rng(0).uniform(-1, 1, (256, 3)) * [1, 1, 8]
    obs[:32] *= 40  # far outside the Box: VecNormalize clips these to +-clip_obs, the policies saturate
    return obs.astype(np.float32)


def _launch(*args: str) -> subprocess.CompletedProcess:
    common = ["--env", ENV, "--episodes", str(EPISODES), "--num-envs", str(NUM_ENVS), "--max-steps", "200"]
    return subprocess.run(
        [sys.executable, "-m", "simeval.launch", *common, "--seed", "0", *args],
        capture_output=True, text=True, timeout=400, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize("algo", CASES)
def test_actions_match_sb3_predict(runs, algo):
    cls, name = CASES[algo]
    obs = _observations()
    seen = obs
    if algo == "ppo":
        seen = _vecnormalize(runs / "ppo" / "rl_model_vecnormalize_2048_steps.pkl").normalize_obs(obs)
    expected, _ = cls.load(runs / name, device="cpu").predict(seen, deterministic=True)
    if algo != "ppo":  # the bounds are reached: clipping (PPO) or tanh rescaling at work
        assert (np.abs(expected) > 1.999).any()
    ck = load_checkpoint(runs / name)
    assert np.abs(_simeval_actions(ck, obs) - expected).max() <= 1e-5
    assert ck.meta["format"] == "sb3" and ck.meta["algorithm"] == cls.__name__ and ck.env is None
    assert ck.step == {"ppo": 2048, "ppo_relu": 1024, "sac": 3000, "td3": 3000}[algo]
    activation = {
        "ppo": "PPO's default (Tanh)",
        "ppo_relu": "ReLU from policy_kwargs",
        "sac": "ELU from policy_kwargs",
        "td3": "TD3's default (ReLU)",
    }
    assert ck.meta["architecture"].endswith(activation[algo])
    assert ck.meta["vecnormalize"] == ("rl_model_vecnormalize_2048_steps.pkl" if algo == "ppo" else None)


def _sb3_returns(cls, path, vecnormalize=None) -> list[float]:
    """SB3's ``evaluate_policy``, deterministic, on as many seeded sub-envs as simeval's run."""
    env = _vecnormalize(vecnormalize, NUM_ENVS) if vecnormalize else make_vec_env(ENV, n_envs=NUM_ENVS, seed=0)
    model = cls.load(path, device="cpu")
    returns, _ = evaluate_policy(model, env, n_eval_episodes=EPISODES, deterministic=True, return_episode_rewards=True)
    env.close()
    return [float(r) for r in returns]


def _assert_same_returns(theirs: list[float], ours: list[float]) -> None:
    se = (statistics.pvariance(theirs) / len(theirs) + statistics.pvariance(ours) / len(ours)) ** 0.5
    assert abs(statistics.fmean(theirs) - statistics.fmean(ours)) <= 4 * se + 1.0, (theirs, ours)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_returns_match_evaluate_policy(runs, algo, tmp_path):
    cls, name = CASES[algo]
    proc = _launch("--checkpoint", str(runs / name), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((tmp_path / "results.jsonl").read_text())
    assert record["status"] == "ok" and record["checkpoint_format"] == "sb3" and record["step"] == 3000
    _assert_same_returns(_sb3_returns(cls, runs / name), record["episode_returns"])


def test_watch_scores_each_vecnormalized_ppo_checkpoint_like_evaluate_policy(runs, tmp_path):
    (runs / "ppo" / "DONE").write_text("")
    proc = _launch("--watch", str(runs / "ppo"), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    # CheckpointCallback's zips, once each, in step order; the pickles beside them are statistics, not checkpoints.
    assert [(r["checkpoint_name"], r["step"]) for r in records] == [(f"rl_model_{n}_steps.zip", n) for n in PPO_STEPS]
    for step, record in zip(PPO_STEPS, records, strict=True):
        assert record["status"] == "ok" and record["checkpoint_format"] == "sb3"
        stats = runs / "ppo" / f"rl_model_vecnormalize_{step}_steps.pkl"  # each checkpoint its own statistics
        _assert_same_returns(_sb3_returns(PPO, record["checkpoint"], stats), record["episode_returns"])


def test_vecnormalize_statistics_are_found_or_their_absence_refused(runs, tmp_path, monkeypatch):
    ppo = runs / "ppo"
    # A CheckpointCallback run whose step file is missing while another step has one: refused.
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("rl_model_1024_steps.zip", "rl_model_vecnormalize_1024_steps.pkl", "rl_model_2048_steps.zip"):
        shutil.copy(ppo / name, partial / name)
    with pytest.raises(CheckpointError, match=r"rl_model_2048_steps.zip: the run saved VecNormalize statistics .* "
                       r"but rl_model_vecnormalize_2048_steps.pkl is missing"):  # fmt: skip
        load_checkpoint(partial / "rl_model_2048_steps.zip")
    # The zip alone: PPO's data records that it trained under VecNormalize, so it is not evaluated unnormalised.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(ppo / "rl_model_2048_steps.zip", alone / "ppo.zip")
    with pytest.raises(CheckpointError, match=r"ppo.zip: it was trained under VecNormalize .* no statistics"):
        load_checkpoint(alone / "ppo.zip")
    # The safe alternative to the pickle, vecnormalize.npz beside the zip: the same actor.
    stats = _vecnormalize(ppo / "rl_model_vecnormalize_2048_steps.pkl")
    np.savez(alone / "vecnormalize.npz", mean=stats.obs_rms.mean, var=stats.obs_rms.var, clip_obs=stats.clip_obs,
             epsilon=stats.epsilon)  # fmt: skip
    from_npz, from_pkl = load_checkpoint(alone / "ppo.zip"), load_checkpoint(ppo / "rl_model_2048_steps.zip")
    assert from_npz.meta["vecnormalize"] == "vecnormalize.npz"
    obs = _observations()
    assert np.array_equal(_simeval_actions(from_npz, obs), _simeval_actions(from_pkl, obs))
    # A file the user names that is not there.
    monkeypatch.setenv("SIMEVAL_SB3_VECNORMALIZE", str(tmp_path / "nope.pkl"))
    with pytest.raises(CheckpointError, match=r"ppo.zip: \$SIMEVAL_SB3_VECNORMALIZE names .*nope.pkl"):
        load_checkpoint(alone / "ppo.zip")


def test_code_in_a_zip_or_a_vecnormalize_pickle_is_never_run(runs, tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    # policy.pth carrying a pickled call instead of tensors.
    evil_zip = tmp_path / "model.zip"
    with zipfile.ZipFile(runs / "td3" / "model.zip") as src, zipfile.ZipFile(evil_zip, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "policy.pth":
                buf = io.BytesIO()
                torch.save({"actor.mu.0.weight": Payload()}, buf)
                data = buf.getvalue()
            dst.writestr(item, data)
    with pytest.raises(CheckpointError, match=r"model.zip: refused to load policy.pth: it references \w+.system"):
        load_checkpoint(evil_zip)

    # A VecNormalize pickle beside a clean zip: a bare payload, and SB3's own VecNormalize.save of one carrying it.
    directory = tmp_path / "run"
    directory.mkdir()
    shutil.copy(runs / "ppo" / "rl_model_2048_steps.zip", directory / "rl_model_2048_steps.zip")
    pkl = directory / "rl_model_vecnormalize_2048_steps.pkl"
    pkl.write_bytes(pickle.dumps(Payload()))
    carrier = _vecnormalize(runs / "ppo" / "rl_model_vecnormalize_2048_steps.pkl")
    carrier.note = Payload()
    for write in (lambda: None, lambda: carrier.save(str(pkl))):
        write()
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(directory / "rl_model_2048_steps.zip")
        message = str(refused.value)
        assert message.startswith(f"{pkl}: refused to read VecNormalize statistics: it names ") and "\n" not in message
        assert "system, which could run code" in message and "np.savez(" in message
    assert not marker.exists()


def test_a_network_that_does_not_fit_the_env_is_one_line(tmp_path):
    # Trained on MountainCarContinuous (2 observations), evaluated on Pendulum (3): exit 2, one line.
    model = PPO("MlpPolicy", "MountainCarContinuous-v0", n_steps=64, batch_size=64, n_epochs=1, seed=0)
    model.learn(64)
    model.save(tmp_path / "car")
    proc = _launch("--checkpoint", str(tmp_path / "car.zip"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "policy takes 2 observations and gives 1 actions; this env has 3 and 1" in last


def test_the_env_recorded_in_a_zip_is_read_bounded_and_sb3_still_loads_it(runs, tmp_path):
    """simeval's EvalCallback adds ``simeval.json`` naming the env: the reader takes it, SB3 ignores it."""
    raw = (runs / "td3" / "model.zip").read_bytes()
    named = tmp_path / "named.zip"
    named.write_bytes(sb3_format.with_env(raw, ENV))
    assert load_checkpoint(named).env == ENV and load_checkpoint(runs / "td3" / "model.zip").env is None
    assert TD3.load(named).num_timesteps == TD3.load(runs / "td3" / "model.zip").num_timesteps
    for member, match in (
        (b"[1, 2]", r"simeval.json is not a JSON object naming the env"),
        (b'{"env": 3}', r"simeval.json names no env"),
        (b'{"env": "' + b"x" * (70 << 10) + b'"}', r"simeval.json is larger than"),
    ):
        bad = tmp_path / "bad.zip"
        shutil.copy(runs / "td3" / "model.zip", bad)
        with zipfile.ZipFile(bad, "a") as z:
            z.writestr("simeval.json", member)
        with pytest.raises(CheckpointError, match=match):
            load_checkpoint(bad)
