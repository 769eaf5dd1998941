"""skrl checkpoints (``<run>/checkpoints/agent_<timestep>.pt``) read as skrl writes them, checked against skrl.

Three short real skrl PPO runs on gymnasium's Pendulum, each with a
RunningStandardScaler on the observations, each checkpointed by skrl's agent:

* ``isaaclab``: skrl's Runner from an Isaac Lab-style config (shared policy/value
  model, 1.x-style ``state_preprocessor`` key), the config written to
  ``<run>/params/agent.yaml`` the way Isaac Lab's skrl train script does;
* ``instantiated``: skrl's model instantiators and PPO API, no config file:
  the architecture is inferred from the weights;
* ``handwritten``: skrl's documented hand-written Pendulum models (ReLU,
  ``2 * tanh`` output), described in a ``params/agent.yaml`` by the user.

simeval's actor must give the actions skrl's agent gives in eval mode
(``mean_actions``) and score like skrl's own deterministic play loop.
"""

from __future__ import annotations

import copy
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

from simeval.checkpoints import CheckpointError, load_checkpoint, peek_step

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "Pendulum-v1"
TIMESTEPS, INTERVAL, NUM_ENVS = 400, 200, 4
LAST = f"agent_{TIMESTEPS}.pt"
pytestmark = pytest.mark.timeout(600)

# Isaac Lab's skrl_ppo_cfg.yaml for its cartpole (shared model, ELU), shortened. skrl 2.x's runner needs
# the network input OBSERVATIONS (1.x's configs say STATES); it renames 1.x's state_preprocessor to
# observation_preprocessor.
ISAACLAB_CFG = f"""
seed: 0
models:
  separate: False
  policy:
    class: GaussianMixin
    clip_actions: False
    clip_log_std: True
    min_log_std: -20.0
    max_log_std: 2.0
    initial_log_std: 0.0
    network:
      - name: net
        input: OBSERVATIONS
        layers: [32, 32]
        activations: elu
    output: ACTIONS
  value:
    class: DeterministicMixin
    clip_actions: False
    network:
      - name: net
        input: OBSERVATIONS
        layers: [32, 32]
        activations: elu
    output: ONE
memory:
  class: RandomMemory
  memory_size: -1
agent:
  class: PPO
  rollouts: 32
  learning_epochs: 2
  mini_batches: 2
  discount_factor: 0.99
  lambda: 0.95
  learning_rate: 1.0e-03
  state_preprocessor: RunningStandardScaler
  state_preprocessor_kwargs: null
  value_preprocessor: RunningStandardScaler
  value_preprocessor_kwargs: null
  experiment:
    directory: ""
    experiment_name: ""
    write_interval: {INTERVAL}
    checkpoint_interval: {INTERVAL}
trainer:
  class: SequentialTrainer
  timesteps: {TIMESTEPS}
  disable_progressbar: True
  headless: True
  close_environment_at_exit: False
"""

# How a user describes skrl's hand-written Pendulum policy (below) in the model instantiator's terms.
HANDWRITTEN_CFG = """
models:
  policy:
    class: GaussianMixin
    network:
      - name: net
        input: OBSERVATIONS
        layers: [32, 32]
        activations: relu
    output: 2 * tanh(ACTIONS)
agent:
  class: PPO
  observation_preprocessor: RunningStandardScaler
"""


def _env(num_envs: int, seed: int):
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.utils import set_seed

    set_seed(seed)  # skrl's wrapper seeds the first reset from it
    return wrap_env(gym.make_vec(ENV, num_envs=num_envs, vectorization_mode="sync"), wrapper="gymnasium")


def _isaaclab_runner(cfg: dict, env):
    from skrl.utils.runner.torch import Runner

    return Runner(env, copy.deepcopy(cfg))


def _ppo(env, models: dict, directory: str = "", interval: int = 0):
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.memories.torch import RandomMemory
    from skrl.resources.preprocessors.torch import RunningStandardScaler

    cfg = PPO_CFG(
        rollouts=32,
        learning_epochs=2,
        mini_batches=2,
        learning_rate=1e-3,
        observation_preprocessor=RunningStandardScaler,
        observation_preprocessor_kwargs={"size": env.observation_space, "device": env.device},
        value_preprocessor=RunningStandardScaler,
        value_preprocessor_kwargs={"size": 1, "device": env.device},
    )
    cfg.experiment.directory, cfg.experiment.experiment_name = os.path.split(directory) if directory else ("", "")
    cfg.experiment.write_interval = cfg.experiment.checkpoint_interval = interval
    memory = RandomMemory(memory_size=32, num_envs=env.num_envs, device=env.device)
    spaces = {"observation_space": env.observation_space, "action_space": env.action_space, "device": env.device}
    return PPO(models=models, memory=memory, cfg=cfg, **spaces)


def _instantiated_models(env) -> dict:
    from skrl.utils.model_instantiators.torch import deterministic_model, gaussian_model

    spaces = {"observation_space": env.observation_space, "action_space": env.action_space, "device": env.device}
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}]
    models = {"policy": gaussian_model(network=net, output="ACTIONS", **spaces)}
    models["value"] = deterministic_model(network=net, output="ONE", **spaces)
    for role, model in models.items():
        model.init_state_dict(role=role)  # materialise the instantiator's lazy layers
    return models


def _handwritten_models(env) -> dict:
    """skrl's documented Pendulum models, written by hand (skrl 2.x names the observations "observations")."""
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model

    class Policy(GaussianMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            GaussianMixin.__init__(self, clip_actions=False)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(self.num_observations, 32), torch.nn.ReLU(),
                torch.nn.Linear(32, 32), torch.nn.ReLU(),
                torch.nn.Linear(32, self.num_actions),
            )  # fmt: skip
            self.log_std_parameter = torch.nn.Parameter(torch.zeros(self.num_actions))

        def compute(self, inputs, role=""):
            return 2 * torch.tanh(self.net(inputs["observations"])), {"log_std": self.log_std_parameter}

    class Value(DeterministicMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            DeterministicMixin.__init__(self, clip_actions=False)
            self.net = torch.nn.Sequential(torch.nn.Linear(self.num_observations, 32), torch.nn.ReLU())
            self.out = torch.nn.Linear(32, 1)

        def compute(self, inputs, role=""):
            return self.out(self.net(inputs["observations"])), {}

    spaces = {"observation_space": env.observation_space, "action_space": env.action_space, "device": env.device}
    return {"policy": Policy(**spaces), "value": Value(**spaces)}


def _train_ppo(run_dir: str, make_models) -> None:
    from skrl.trainers.torch import SequentialTrainer

    env = _env(NUM_ENVS, seed=0)
    agent = _ppo(env, make_models(env), run_dir, INTERVAL)
    cfg = {"timesteps": TIMESTEPS, "disable_progressbar": True, "headless": True, "close_environment_at_exit": False}
    SequentialTrainer(env=env, agents=agent, cfg=cfg).train()
    env.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("skrl")
    # Isaac Lab's layout: logs/skrl/<experiment>/<run>/{params/agent.yaml, checkpoints/agent_<timestep>.pt}
    isaaclab = root / "logs" / "skrl" / "pendulum" / "2026-01-01_00-00-00_ppo_torch"
    cfg = yaml.safe_load(ISAACLAB_CFG)
    cfg["agent"]["experiment"].update(directory=str(isaaclab.parent), experiment_name=isaaclab.name)
    os.makedirs(isaaclab / "params")
    with open(isaaclab / "params" / "agent.yaml", "w") as f:
        yaml.dump(cfg, f)  # Isaac Lab's train.py dumps the agent config before the runner starts
    _isaaclab_runner(cfg, _env(NUM_ENVS, seed=0)).run()

    _train_ppo(str(root / "instantiated"), _instantiated_models)
    _train_ppo(str(root / "handwritten"), _handwritten_models)
    os.makedirs(root / "handwritten" / "params")
    (root / "handwritten" / "params" / "agent.yaml").write_text(HANDWRITTEN_CFG)
    return {
        "isaaclab": isaaclab,
        "instantiated": root / "instantiated",
        "handwritten": root / "handwritten",
        "cfg": cfg,
    }


def _skrl_agent(runs, kind: str, path):
    """skrl's agent restored from ``path`` in eval mode, as Isaac Lab's skrl play script or a skrl user does."""
    env = _env(2, seed=0)
    if kind == "isaaclab":
        cfg = copy.deepcopy(runs["cfg"])
        cfg["agent"]["experiment"].update(write_interval=0, checkpoint_interval=0)
        agent = _isaaclab_runner(cfg, env).agent
    else:
        agent = _ppo(env, (_instantiated_models if kind == "instantiated" else _handwritten_models)(env))
    agent.load(str(path))
    agent.enable_training_mode(False)
    return agent


def _skrl_mean_actions(agent, obs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        outputs = agent.act(obs, None, timestep=0, timesteps=0)
    return outputs[-1].get("mean_actions", outputs[0])  # Isaac Lab's play.py


def _simeval_actions(ck, obs: torch.Tensor) -> torch.Tensor:
    from tensordict import TensorDict

    from simeval.envs import make_env
    from simeval.factories import build_policy
    from simeval.weights import load_weights

    env = make_env(ENV, num_envs=2, obs_norm=False)
    policy = build_policy(ck.policy_factory, ck.policy_kwargs, env)
    load_weights(policy, ck.policy, "policy")
    with torch.no_grad():
        return policy(TensorDict({"observation": obs}, [obs.shape[0]]))["action"]


def _observations(n: int = 256) -> torch.Tensor:
    """Pendulum's (cos, sin, velocity) and beyond, so the scaler's clipping is exercised too."""
    gen = torch.Generator().manual_seed(0)
    return (torch.rand(n, 3, generator=gen) * 2 - 1) * torch.tensor([4.0, 4.0, 30.0])


@pytest.mark.parametrize(
    ("kind", "ckpt_dir", "architecture", "normaliser"),
    [
        ("isaaclab", "checkpoints", os.path.join("..", "params", "agent.yaml"), "observation_preprocessor"),
        ("isaaclab-alone", "", "inferred from the weights", "observation_preprocessor"),
        ("instantiated", "checkpoints", "inferred from the weights", "observation_preprocessor"),
        ("handwritten", "checkpoints", os.path.join("..", "params", "agent.yaml"), "observation_preprocessor"),
    ],
)
def test_actions_match_skrls_eval_mode_mean_actions(runs, tmp_path, kind, ckpt_dir, architecture, normaliser):
    if kind == "isaaclab-alone":  # the same file with no params/ near it: its architecture is inferred
        kind, path = "isaaclab", tmp_path / LAST
        shutil.copy(runs["isaaclab"] / "checkpoints" / LAST, path)
    else:
        path = runs[kind] / ckpt_dir / LAST
    ck = load_checkpoint(path)
    assert ck.meta["format"] == "skrl" and ck.step == TIMESTEPS and ck.obs_norm is None
    assert ck.meta["architecture"].startswith(architecture)
    assert ck.meta["obs_normaliser"].startswith(normaliser) and ck.policy_kwargs["obs_norm"] is not None
    assert ck.policy_kwargs["hidden_dims"] == [32, 32]
    obs = _observations()
    expected = _skrl_mean_actions(_skrl_agent(runs, kind, path), obs)
    assert expected.std() > 1e-3  # a policy whose actions depend on the observation
    assert (_simeval_actions(ck, obs) - expected).abs().max() <= 1e-5
    # skrl's model API in eval mode gives the same: policy.act on preprocessed observations, role "policy"
    agent = _skrl_agent(runs, kind, path)
    with torch.no_grad():
        _, outputs = agent.policy.act({"observations": agent._observation_preprocessor(obs)}, role="policy")
    assert (outputs["mean_actions"] - expected).abs().max() == 0


def _skrl_play_returns(agent, n: int, seed: int) -> list[float]:
    """skrl's deterministic play loop (Isaac Lab's play.py): mean_actions on the env, one 200-step episode each."""
    env = _env(n, seed)
    obs, _ = env.reset()
    total = torch.zeros(n, dtype=torch.float64)
    for _ in range(200):  # Pendulum-v1 truncates every episode at 200 steps
        obs, reward, terminated, truncated, _ = env.step(_skrl_mean_actions(agent, obs))
        total += reward.double().flatten()
    assert bool(truncated.all()) and not bool(terminated.any())
    env.close()
    return total.tolist()


def test_watch_scores_each_checkpoint_like_skrls_play_loop(runs, tmp_path):
    run = runs["isaaclab"]
    assert (run / "checkpoints" / "best_agent.pt").exists()  # skrl's best-so-far copy: no step, not watched
    (run / "DONE").write_text("")
    out, n = tmp_path / "out", 16
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--env", ENV, "--watch", str(run), "--episodes", str(n),
         "--num-envs", "8", "--max-steps", "200", "--seed", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=400, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    names = [f"checkpoints/agent_{t}.pt" for t in range(INTERVAL, TIMESTEPS + 1, INTERVAL)]
    assert [r["checkpoint_name"] for r in records] == names
    assert all(r["status"] == "ok" and r["checkpoint_format"] == "skrl" for r in records)
    assert [r["step"] for r in records] == list(range(INTERVAL, TIMESTEPS + 1, INTERVAL))
    theirs = _skrl_play_returns(_skrl_agent(runs, "isaaclab", run / "checkpoints" / LAST), n, seed=11)
    ours = records[-1]["episode_returns"]
    se = (statistics.pvariance(theirs) / n + statistics.pvariance(ours) / len(ours)) ** 0.5
    assert abs(statistics.fmean(theirs) - statistics.fmean(ours)) <= 4 * se + 1.0


def test_recognised_as_skrl_and_nothing_else(runs, tmp_path):
    from simeval import save_checkpoint
    from simeval.checkpoints import formats
    from simeval.checkpoints.formats import skrl
    from simeval.envs import make_env
    from simeval.policies import gaussian_actor

    best = runs["isaaclab"] / "checkpoints" / "best_agent.pt"
    assert load_checkpoint(best).step == 0 and peek_step(best) == 0  # skrl records no timestep for it
    assert peek_step(runs["instantiated"] / "checkpoints" / LAST) == TIMESTEPS
    assert {"checkpoints/agent_*.pt", "agent_*.pt"} <= set(formats.watch_patterns())
    # simeval's own files and a torchrl actor's state_dict under "policy" stay theirs
    env = make_env(ENV, num_envs=1, obs_norm=False)
    native = save_checkpoint(tmp_path / "step_1.pt", gaussian_actor(env), 1)
    data = torch.load(native, weights_only=True)
    assert not skrl.recognises(native, None, data) and formats.detect(native, None, data) == "simeval"
    torch.save({"policy": gaussian_actor(env).state_dict()}, tmp_path / "torchrl.pt")
    data = torch.load(tmp_path / "torchrl.pt", weights_only=True)
    assert not skrl.recognises(str(tmp_path / "torchrl.pt"), None, data)
    with pytest.raises(CheckpointError, match="step_1.pt: not an skrl checkpoint"):
        load_checkpoint(native, format="skrl")


def _copy_run(src, dst, agent_yaml: str | None = None):
    os.makedirs(dst / "checkpoints")
    shutil.copy(src / "checkpoints" / LAST, dst / "checkpoints" / LAST)
    if agent_yaml is not None:
        os.makedirs(dst / "params")
        (dst / "params" / "agent.yaml").write_text(agent_yaml)
    return dst / "checkpoints" / LAST


def test_bad_skrl_input_is_one_line(runs, tmp_path):
    isaaclab_yaml = (runs["isaaclab"] / "params" / "agent.yaml").read_text()

    # The run says it normalised observations, the file has no statistics: refused, not evaluated unnormalised.
    path = _copy_run(runs["isaaclab"], tmp_path / "nonorm", isaaclab_yaml)
    data = torch.load(path, weights_only=True)
    del data["observation_preprocessor"]
    torch.save(data, path)
    with pytest.raises(CheckpointError, match=f"{LAST}: the run used observation normalisation"):
        load_checkpoint(path)

    # A config that does not describe these weights.
    other = copy.deepcopy(runs["cfg"])
    other["models"]["policy"]["network"][0]["layers"] = [64, 64]
    path = _copy_run(runs["isaaclab"], tmp_path / "other", yaml.dump(other))
    with pytest.raises(CheckpointError, match=r"says hidden layers \[64, 64\], the weights have \[32, 32\]"):
        load_checkpoint(path)

    # A hand-written model without a description: its forward pass is code, so it is not guessed.
    path = _copy_run(runs["handwritten"], tmp_path / "undescribed")
    with pytest.raises(CheckpointError, match=f"{LAST}: a hand-written skrl model"):
        load_checkpoint(path)

    # The output expression is parsed, never run.
    marker = tmp_path / "ran-output"
    evil = HANDWRITTEN_CFG.replace("2 * tanh(ACTIONS)", f"__import__('os').system('touch {marker}') + ACTIONS")
    path = _copy_run(runs["handwritten"], tmp_path / "evil-output", evil)
    with pytest.raises(CheckpointError, match="output expression .* is not supported"):
        load_checkpoint(path)
    assert not marker.exists()

    # Numbers are floats with bounded exponents: 10 ** 10 ** 8 (a Python integer on every step: a hang) is refused
    # at load, and so is an expression that overflows into non-finite actions.
    for expression, refusal in (
        ("ACTIONS + 0 * (10 ** 10 ** 8)", r"the exponent 10 \*\* 8 is not a number of at most 16 in size"),
        ("ACTIONS * 1e300 * 1e300", r"gives non-finite actions for network outputs"),
    ):
        path = _copy_run(runs["handwritten"], tmp_path / f"big-{len(refusal)}", HANDWRITTEN_CFG.replace(
            "2 * tanh(ACTIONS)", expression))
        with pytest.raises(CheckpointError, match=refusal):
            load_checkpoint(path)

    # Layer sizes that do not fit the env: exit 2, one line.
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--env", "HalfCheetah-v5", "--checkpoint",
         str(runs["instantiated"] / "checkpoints" / LAST), "--episodes", "2", "--num-envs", "2",
         "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "do not fit" in proc.stderr.strip().splitlines()[-1]


def test_code_in_an_skrl_checkpoint_is_never_run(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "checkpoints" / "agent_100.pt"
    os.makedirs(path.parent)
    torch.save({"policy": {"log_std_parameter": torch.zeros(1)}, "x": Payload()}, path, pickle_module=pickle)
    for fmt in (None, "skrl"):
        with pytest.raises(CheckpointError, match="agent_100.pt: refused to load") as err:
            load_checkpoint(path, format=fmt)
        assert "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match="refused to load"):
        peek_step(path)
    assert not marker.exists()
