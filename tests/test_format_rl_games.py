"""rl_games PPO (continuous A2C) checkpoints, as rl_games writes them, read by simeval and checked against
rl_games' own player.

Two real trainings on Pendulum-v1 (a few thousand frames each): rl_games' own layout with its defaults
(torch.compile'd model, a numpy ``last_mean_rewards`` once a best checkpoint exists), and Isaac Lab's
``logs/rl_games/<name>/<run>/{params/agent.yaml, nn/}`` with a wrapper that clips observations and actions
as Isaac Lab's ``RlGamesVecEnvWrapper`` does.
"""

from __future__ import annotations

import glob
import json
import math
import os
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from launch_helpers import cli
from rl_games.common import env_configurations, vecenv
from rl_games.common.ivecenv import IVecEnv
from rl_games.torch_runner import Runner

from simeval.checkpoints import CheckpointError, load_checkpoint, peek_step
from simeval.checkpoints.formats import rl_games as rl_games_format
from simeval.envs import make_env
from simeval.policies import factory_of

ENV = "Pendulum-v1"
NUM_ACTORS = 8
EPISODES = 16
VECENV = "SIMEVAL_TEST_PENDULUM"


class PendulumVecEnv(IVecEnv):
    """Pendulum-v1 copies for rl_games (numpy in, numpy out, same-step autoreset).

    With ``clip_obs``/``clip_actions`` its spaces and clipping are those of Isaac
    Lab's RlGamesVecEnvWrapper: Box(-clip, clip) spaces, clamped observations and actions.
    """

    def __init__(self, num_envs: int, seed: int, clip_obs: float | None = None, clip_actions: float | None = None):
        self.envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make(ENV) for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )
        self.seed_, self.clip_obs, self.clip_actions = seed, clip_obs, clip_actions
        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        if clip_obs is not None:
            obs_space = gym.spaces.Box(-clip_obs, clip_obs, obs_space.shape, np.float32)
        if clip_actions is not None:
            act_space = gym.spaces.Box(-clip_actions, clip_actions, act_space.shape, np.float32)
        self.observation_space, self.action_space = obs_space, act_space

    def _obs(self, obs):
        obs = obs.astype(np.float32)
        return obs if self.clip_obs is None else np.clip(obs, -self.clip_obs, self.clip_obs)

    def step(self, actions):
        if self.clip_actions is not None:
            actions = np.clip(actions, -self.clip_actions, self.clip_actions)
        obs, reward, terminated, truncated, _ = self.envs.step(actions)
        return self._obs(obs), reward.astype(np.float32), terminated | truncated, {"time_outs": truncated}

    def reset(self):
        return self._obs(self.envs.reset(seed=self.seed_)[0])

    def get_env_info(self):
        return {"observation_space": self.observation_space, "action_space": self.action_space}


def rl_games_config(name: str, train_dir: str, **config) -> dict:
    """An rl_games ``params:`` config for a small continuous PPO, shaped like Isaac Lab's rl_games_ppo_cfg.yaml."""
    network = config.pop("network", {})
    return {
        "params": {
            "seed": 0,
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {
                "name": "actor_critic",
                "separate": False,
                "space": {
                    "continuous": {
                        "mu_activation": "None",
                        "sigma_activation": "None",
                        "mu_init": {"name": "default"},
                        "sigma_init": {"name": "const_initializer", "val": 0},
                        "fixed_sigma": True,
                    }
                },
                "mlp": {"units": [32, 32], "activation": "elu", "d2rl": False, "initializer": {"name": "default"}},
                **network,
            },
            "config": {
                "name": name,
                "env_name": name,
                "device": "cpu",
                "device_name": "cpu",
                "ppo": True,
                "normalize_input": True,
                "normalize_value": True,
                "num_actors": NUM_ACTORS,
                "reward_shaper": {"scale_value": 0.1},
                "normalize_advantage": True,
                "gamma": 0.99,
                "tau": 0.95,
                "learning_rate": 1e-3,
                "lr_schedule": "adaptive",
                "kl_threshold": 0.008,
                "score_to_win": 100000,
                "max_epochs": 8,
                "save_best_after": 2,
                "save_frequency": 2,
                "grad_norm": 1.0,
                "entropy_coef": 0.0,
                "truncate_grads": True,
                "e_clip": 0.2,
                "horizon_length": 64,
                "minibatch_size": 256,
                "mini_epochs": 4,
                "critic_coef": 2,
                "clip_value": True,
                "bounds_loss_coef": 0.0001,
                "train_dir": train_dir,
                **config,
            },
        }
    }


def created_env(config_name: str, num_actors: int, **kwargs):
    """The vecenv rl_games asks for: the registered env's creator (Isaac Lab's RlGamesGpuEnv does the same)."""
    return env_configurations.configurations[config_name]["env_creator"](**kwargs)


def train(cfg: dict, env: PendulumVecEnv) -> Runner:
    """Train with rl_games' Runner on ``env``, registered the way Isaac Lab's train.py registers its wrapper."""
    vecenv.register(VECENV, created_env)
    env_configurations.register(
        cfg["params"]["config"]["env_name"], {"vecenv_type": VECENV, "env_creator": lambda **_: env}
    )
    runner = Runner()
    runner.load(cfg)
    runner.reset()
    runner.run({"train": True, "play": False})
    return runner


def player_of(runner: Runner, path: str):
    """rl_games' own inference path: the runner's player, restored from ``path``."""
    player = runner.create_player()
    player.restore(path)
    player.reset()
    return player


def player_actions(player, obs: np.ndarray) -> np.ndarray:
    """``get_action(obs, is_deterministic=True)`` on a batch, as Isaac Lab's play.py calls it."""
    obs_t = player.obs_to_torch(obs.astype(np.float32))
    player.get_batch_size(obs_t, 1)
    with torch.inference_mode():
        return player.get_action(obs_t, is_deterministic=True).cpu().numpy()


def simeval_actions(ck, obs: np.ndarray) -> np.ndarray:
    """The simeval actor built from ``ck`` by its factory and loaded as the evaluator loads it, on the same batch."""
    from tensordict import TensorDict

    from simeval.weights import load_weights

    env = make_env(ENV, num_envs=1, obs_norm=False)
    try:
        policy = rl_games_format.actor(env, **ck.policy_kwargs)
    finally:
        env.close()
    load_weights(policy, ck.policy, "policy")
    with torch.no_grad():
        td = policy(TensorDict({"observation": torch.as_tensor(obs, dtype=torch.float32)}, batch_size=[len(obs)]))
    return td["action"].numpy()


def observations(n: int = 512) -> np.ndarray:
    """Pendulum observations from a random-action rollout, plus samples beyond the usual range."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(ENV) for _ in range(8)])
    obs, _ = envs.reset(seed=7)
    out = [obs]
    rng = np.random.default_rng(0)
    for _ in range(n // 16):
        obs, *_ = envs.step(rng.uniform(-2, 2, size=(8, 1)).astype(np.float32))
        out.append(obs)
    envs.close()
    wide = rng.uniform([-1, -1, -8], [1, 1, 8], size=(n // 2, 3)) * rng.uniform(0.5, 3.0, size=(n // 2, 1))
    return np.concatenate([*out, wide]).astype(np.float32)


def player_returns(player, episodes: int) -> list[float]:
    """Returns of rl_games' player, deterministic, on Pendulum-v1 copies (all episodes last 200 steps)."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(ENV) for _ in range(NUM_ACTORS)])
    returns: list[float] = []
    for start in range(1000, 1000 + episodes, NUM_ACTORS):
        obs, _ = envs.reset(seed=list(range(start, start + NUM_ACTORS)))
        total = np.zeros(NUM_ACTORS)
        for _ in range(200):
            obs, reward, terminated, truncated, _ = envs.step(player_actions(player, obs))
            total += reward
        assert truncated.all() and not terminated.any()
        returns += total.tolist()
    envs.close()
    return returns


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory):
    """rl_games' own layout and defaults: <train_dir>/<name>_<time>/nn/*.pth, torch.compile on."""
    root = tmp_path_factory.mktemp("rl_games")
    cfg = rl_games_config("pendulum", str(root / "runs"))
    runner = train(cfg, PendulumVecEnv(NUM_ACTORS, seed=0))
    (run_dir,) = glob.glob(str(root / "runs" / "pendulum_*"))
    return runner, run_dir


@pytest.fixture(scope="module")
def isaac_run(tmp_path_factory):
    """Isaac Lab's layout: logs/rl_games/<name>/<run>/params/agent.yaml (dumped as Isaac Lab dumps it) and nn/."""
    root = tmp_path_factory.mktemp("isaac")
    name, run = "pendulum_isaac", "2026-01-01_00-00-00"
    cfg = rl_games_config(
        name,
        str(root / "logs" / "rl_games" / name),
        full_experiment_name=run,
        max_epochs=4,
        torch_compile=False,
        network={
            "separate": True,  # a critic MLP of its own, which the actor ignores
            "mlp": {"units": (16, 16), "activation": "tanh", "d2rl": False, "initializer": {"name": "default"}},
        },
    )
    cfg["params"]["env"] = {"clip_observations": 5.0, "clip_actions": 2.0}
    run_dir = root / "logs" / "rl_games" / name / run
    (run_dir / "params").mkdir(parents=True)
    with open(run_dir / "params" / "agent.yaml", "w") as f:
        yaml.dump(cfg, f, default_flow_style=False, sort_keys=False)  # isaaclab.utils.io.dump_yaml
    runner = train(cfg, PendulumVecEnv(NUM_ACTORS, seed=1, clip_obs=5.0, clip_actions=2.0))
    return runner, str(run_dir)


def periodic(run_dir: str) -> list[str]:
    """The run's periodic saves, last_<name>_ep_<N>_rew_<r>.pth, by epoch."""
    files = glob.glob(os.path.join(run_dir, "nn", "last_*_ep_*_rew_[!_]*.pth"))
    return sorted(files, key=lambda p: int(p.split("_ep_")[1].split("_")[0]))


def test_rl_games_run_is_read_as_written_and_acts_like_its_player(rl_run):
    runner, run_dir = rl_run
    names = sorted(os.listdir(os.path.join(run_dir, "nn")))
    assert "pendulum.pth" in names and any("_rew__" in n for n in names), names  # best, and the max_epochs save
    path = periodic(run_dir)[-1]
    with pytest.raises(pickle.UnpicklingError):  # rl_games' numpy float32 last_mean_rewards: not plain torch data
        torch.load(path, weights_only=True)
    with torch.serialization.safe_globals(rl_games_format.torch_safe_globals()):
        raw = torch.load(path, weights_only=True)
    assert isinstance(raw["last_mean_rewards"], np.float32)
    assert all(k.startswith("_orig_mod.") for k in raw["model"])  # torch.compile, rl_games' default

    ck = load_checkpoint(path)
    assert ck.meta["format"] == "rl_games" and ck.step == raw["epoch"] == 8 and peek_step(path) == 8
    assert ck.meta["architecture"].startswith("inferred from the weights")
    assert ck.policy_kwargs["units"] == [32, 32] and ck.policy_kwargs["normalize_input"] is True

    obs = observations()
    expected = player_actions(player_of(runner, path), obs)
    got = simeval_actions(ck, obs)
    assert np.abs(got - expected).max() <= 1e-5
    assert np.abs(expected).max() > 1e-3  # a real policy, not zeros
    assert (np.abs(got) <= 2.0).all()  # rescaled to Pendulum's [-2, 2]

    for older in periodic(run_dir)[:-1] + [os.path.join(run_dir, "nn", "pendulum.pth")]:
        ck_old = load_checkpoint(older)  # with and without the numpy scalar; the best file too
        assert np.abs(simeval_actions(ck_old, obs) - player_actions(player_of(runner, older), obs)).max() <= 1e-5


@pytest.mark.timeout(600)
def test_watch_evaluates_each_epoch_once_with_the_players_returns(rl_run, tmp_path):
    runner, run_dir = rl_run
    open(os.path.join(run_dir, "DONE"), "w").close()
    out = tmp_path / "out"
    proc = cli(
        "--watch", run_dir, "--env", ENV, "--episodes", str(EPISODES), "--num-envs", str(NUM_ACTORS),
        "--max-steps", "200", "--seed", "0", "--out", str(out), "--poll-interval", "0.2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in open(out / "results.jsonl")]
    assert all(r["status"] == "ok" and r["checkpoint_format"] == "rl_games" for r in records), records
    steps = [r["step"] for r in records]
    expected = [int(p.split("_ep_")[1].split("_")[0]) for p in periodic(run_dir)]
    assert steps == expected and len(set(steps)) == len(steps) and steps[-1] == 8  # once each, epoch order

    last = records[-1]
    theirs = player_returns(player_of(runner, periodic(run_dir)[-1]), EPISODES)
    ours = last["episode_returns"]
    assert len(ours) == EPISODES
    se = math.sqrt(np.var(theirs, ddof=1) / len(theirs) + np.var(ours, ddof=1) / len(ours))
    assert abs(np.mean(ours) - np.mean(theirs)) <= 4 * se + 5.0, (np.mean(ours), np.mean(theirs), se)


def test_isaac_lab_run_reads_agent_yaml_and_acts_like_its_player(isaac_run):
    runner, run_dir = isaac_run
    path = periodic(run_dir)[-1]
    with torch.serialization.safe_globals(rl_games_format.torch_safe_globals()):
        assert any(".critic_mlp." in k for k in torch.load(path, weights_only=True)["model"])
    ck = load_checkpoint(path)
    assert ck.meta["architecture"] == os.path.join("..", "params", "agent.yaml")
    kwargs = ck.policy_kwargs
    assert kwargs["units"] == [16, 16] and kwargs["activation"] == "tanh"  # tanh: not inferable from the weights
    assert kwargs["action_bound"] == 2.0 and kwargs["clip_observations"] == 5.0
    env = make_env(ENV, num_envs=1, obs_norm=False)
    try:
        assert factory_of(rl_games_format.actor(env, **kwargs)) == (rl_games_format.FACTORY, kwargs)
    finally:
        env.close()

    obs = observations()  # includes angular velocities beyond the wrapper's +-5
    wrapped = np.clip(obs, -5.0, 5.0)  # what Isaac Lab's wrapper hands the player
    expected = player_actions(player_of(runner, path), wrapped)
    assert np.abs(simeval_actions(ck, obs) - expected).max() <= 1e-5


def test_isaac_lab_run_refuses_checkpoints_that_contradict_its_agent_yaml(isaac_run):
    _, run_dir = isaac_run
    path = periodic(run_dir)[-1]
    with torch.serialization.safe_globals(rl_games_format.torch_safe_globals()):
        data = torch.load(path, weights_only=True)
    stripped = os.path.join(run_dir, "nn", "stripped.pth")
    torch.save({**data, "model": {k: v for k, v in data["model"].items() if not k.startswith("running_mean_std")}},
               stripped)  # fmt: skip
    with pytest.raises(CheckpointError, match="normalize_input.*lacks running_mean_std") as err:
        load_checkpoint(stripped)
    assert stripped in str(err.value) and "\n" not in str(err.value)

    wider = os.path.join(run_dir, "nn", "wider.pth")
    model = dict(data["model"])
    model["a2c_network.actor_mlp.0.weight"] = torch.zeros(24, 3)
    model["a2c_network.actor_mlp.0.bias"] = torch.zeros(24)
    model["a2c_network.actor_mlp.2.weight"] = torch.zeros(16, 24)
    torch.save({**data, "model": model}, wider)
    with pytest.raises(CheckpointError, match=r"units \[16, 16\], the weights have \[24, 16\]"):
        load_checkpoint(wider)


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_malicious_rl_games_file_is_refused_without_running_code(rl_run, tmp_path):
    _, run_dir = rl_run
    with torch.serialization.safe_globals(rl_games_format.torch_safe_globals()):
        data = torch.load(periodic(run_dir)[-1], weights_only=True)
    marker = tmp_path / "pwned"
    evil = tmp_path / "last_pendulum_ep_10_rew_-1.0.pth"
    torch.save({**data, "env_state": _Marker(str(marker))}, evil)
    for read in (load_checkpoint, peek_step):
        with pytest.raises(CheckpointError, match="refused to load") as err:
            read(str(evil))
        assert str(evil) in str(err.value) and "\n" not in str(err.value)
    # numpy values other than plain numbers stay refused too (an object or a string dtype)
    odd = tmp_path / "odd.pth"
    torch.save({**data, "last_mean_rewards": np.str_("x")}, odd)
    with pytest.raises(CheckpointError, match="refused to load"):
        load_checkpoint(str(odd))
    assert not marker.exists()


def test_checkpoint_that_does_not_fit_the_env_exits_2_with_one_line(rl_run, tmp_path):
    _, run_dir = rl_run
    proc = cli(
        "--checkpoint", periodic(run_dir)[-1], "--env", "MountainCarContinuous-v0", "--episodes", "2",
        "--num-envs", "2", "--max-steps", "10", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "do not fit" in lines[0] and "(32, 3) vs (32, 2)" in lines[0], proc.stderr


@pytest.mark.parametrize(
    ("model", "network", "refusal"),
    [
        ("continuous_a2c_logstd", {"rnn": {"name": "lstm", "units": 16, "layers": 1}}, "recurrent rl_games policies"),
        ("discrete_a2c", {"space": {"discrete": {}}}, "discrete-action rl_games policies"),
        (
            "continuous_a2c_logstd",
            {"mlp": {"units": [8], "activation": "elu", "d2rl": True, "initializer": {"name": "default"}}},
            "other than Linear/activation layers",
        ),
    ],
)
def test_layouts_other_than_an_mlp_continuous_actor_are_refused_in_one_line(tmp_path, model, network, refusal):
    from rl_games.algos_torch.model_builder import ModelBuilder

    params = rl_games_config("other", str(tmp_path), network=network)["params"]
    params["model"]["name"] = model
    net = (
        ModelBuilder()
        .load(params)
        .build({"actions_num": 3, "input_shape": (3,), "num_seqs": 1, "value_size": 1, "normalize_input": True})
    )
    path = tmp_path / "last_other_ep_2_rew_-1.0.pth"
    torch.save({"model": net.state_dict(), "epoch": 2, "frame": 1024, "last_mean_rewards": -1e9}, path)
    with pytest.raises(CheckpointError, match=refusal) as err:
        load_checkpoint(str(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)
