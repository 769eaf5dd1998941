"""A torchrl checkpoint as torchrl users write it (actor state_dict + VecNormV2 state_dict), read as is.

The test trains torchrl's PPO MuJoCo-style actor for a few thousand frames with
torchrl's own Collector, GAE and ClipPPOLoss, saves ``{"actor": state_dict,
"vecnorm": state_dict, "frames": n}``, then checks simeval against torchrl's own
evaluation (``env.rollout`` under ``ExplorationType.DETERMINISTIC``).
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import subprocess
import sys

import pytest
import torch

from simeval.checkpoints import CheckpointError, load_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "Pendulum-v1"
FRAMES = 4096
pytestmark = pytest.mark.timeout(600)


def _train_env(seed: int):
    from torchrl.envs import Compose, DoubleToFloat, GymEnv, RewardSum, StepCounter, TransformedEnv
    from torchrl.envs.transforms import VecNormV2

    env = TransformedEnv(
        GymEnv(ENV),
        Compose(DoubleToFloat(), VecNormV2(in_keys=["observation"]), RewardSum(), StepCounter()),
    )
    env.set_seed(seed)
    return env


def _actor(env):
    from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal

    spec = env.action_spec
    net = torch.nn.Sequential(
        MLP(in_features=3, out_features=1, num_cells=[32, 32], activation_class=torch.nn.Tanh),
        AddStateIndependentNormalScale(1, scale_lb=1e-8),
    )
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high, "tanh_loc": False},
        return_log_prob=True,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real torchrl PPO run (tiny), saved the way torchrl users save: state_dicts."""
    from torchrl.collectors import Collector
    from torchrl.modules import MLP, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.manual_seed(0)
    env = _train_env(0)
    actor = _actor(env)
    critic = ValueOperator(MLP(in_features=3, out_features=1, num_cells=[32, 32]), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    opt = torch.optim.Adam(loss.parameters(), lr=3e-4)
    collector = Collector(env, actor, frames_per_batch=1024, total_frames=FRAMES)
    for batch in collector:
        with torch.no_grad():
            gae(batch)
        for _ in range(4):
            for mb in batch.reshape(-1).split(256):
                out = loss(mb)
                (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
                opt.step()
                opt.zero_grad()
    collector.shutdown()
    vecnorm = env.transform[1]
    path = tmp_path_factory.mktemp("torchrl") / "ppo_4096.pt"
    torch.save({"actor": actor.state_dict(), "vecnorm": vecnorm.state_dict(), "frames": FRAMES}, path)
    return path, actor, vecnorm


def _simeval_policy(path):
    from simeval.envs import make_env
    from simeval.factories import build_policy
    from simeval.weights import load_weights

    ck = load_checkpoint(path)
    env = make_env(ENV, num_envs=2, obs_norm=False)
    policy = build_policy(ck.policy_factory, ck.policy_kwargs, env)
    load_weights(policy, ck.policy, "policy")
    return ck, policy


def test_actions_match_torchrls_deterministic_actor(trained):
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    path, actor, _ = trained
    ck, ours = _simeval_policy(path)
    assert ck.meta["format"] == "torchrl" and ck.step == FRAMES
    assert ck.policy_factory == "simeval.policies:gaussian_actor" and ck.policy_kwargs == {"hidden": [32, 32]}
    assert ck.obs_norm is not None
    obs = torch.randn(64, 3) * 2
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        theirs = actor(TensorDict({"observation": obs}, [64]))["action"]
        mine = ours(TensorDict({"observation": obs}, [64]))["action"]
    assert (mine - theirs).abs().max() <= 1e-5


def test_returns_match_torchrls_own_evaluation(trained, tmp_path):
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    path, actor, vecnorm = trained
    n = 12
    theirs = []
    env = _train_env(123)
    env.transform[1].load_state_dict(vecnorm.state_dict())
    env.transform[1].freeze()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        for _ in range(n):
            td = env.rollout(200, actor)
            theirs.append(float(td["next", "reward"].sum()))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--env", ENV, "--checkpoint", str(path), "--episodes", str(n),
         "--num-envs", "4", "--max-steps", "200", "--seed", "7", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rec["checkpoint_format"] == "torchrl" and rec["step"] == FRAMES
    ours = rec["episode_returns"]
    se = (statistics.pvariance(theirs) / n + statistics.pvariance(ours) / len(ours)) ** 0.5
    assert abs(statistics.fmean(theirs) - statistics.fmean(ours)) <= 4 * se + 1.0


def test_unknown_actor_layouts_and_code_are_refused_in_one_line(tmp_path):
    odd = tmp_path / "odd.pt"
    torch.save({"actor": {"module.encoder.weight": torch.zeros(2, 2)}}, odd)
    with pytest.raises(CheckpointError, match="odd.pt: a torchrl state_dict whose actor layout") as info:
        load_checkpoint(odd)
    assert "simeval.save_checkpoint" in str(info.value) and "\n" not in str(info.value)

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "bad.pt"
    torch.save({"actor": {"module.0.0.weight": torch.zeros(2, 2)}, "x": Payload()}, bad, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="bad.pt: refused to load"):
        load_checkpoint(bad)
    assert not marker.exists()
