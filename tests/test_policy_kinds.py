"""The policy seam: what a policy declares (observation history, action chunks) runs per sub-env, on every backend.

Oracles: torchrl's own CatFrames stacks the history the same way (so a history-declaring policy
returns what the same network returns on a CatFrames env, bit for bit); an action chunk's
entries encode their index, so every step of every episode says which entry it played.
"""

from __future__ import annotations

import functools
import sys
import textwrap

import pytest
import torch
from helpers import write_dist_info
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs import CatFrames, TransformedEnv

from simeval import Evaluator
from simeval.envs import make_env
from simeval.errors import EvalError
from simeval.policy_kinds import Acting, acting_of, declare, kind_of, registered

ENV = "InvertedPendulum-v5"  # 4 observations, 1 action, episodes that end early: sub-envs restart mid-round
OBS, ACT = 4, 1


def pendulums(num_envs: int = 3, history: int = 1):
    env = make_env(ENV, num_envs=num_envs, max_steps=25, obs_norm=False)
    if history > 1:  # the oracle: torchrl stacks the last frames, the first repeated at a restart
        env = TransformedEnv(
            env, CatFrames(N=history, dim=-1, in_keys=["observation"], padding="same"), auto_unwrap=False
        )
    return env


class History(nn.Module):
    """Reads [n, k, obs] (or the same flattened to [n, k * obs]); the oldest frame weighs most."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.linear = nn.Linear(OBS, ACT)
        with torch.no_grad():  # the same network wherever it is built
            self.linear.weight.copy_(torch.tensor([[0.3, -0.8, 1.1, 0.4]]))
            self.linear.bias.fill_(0.05)
        self.weights = torch.linspace(1.0, 0.2, k).reshape(1, k, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        frames = obs.reshape(obs.shape[0], self.k, OBS)
        return torch.tanh(self.linear((frames * self.weights).sum(1)))


class Chunks(nn.Module):
    """Answers [n, chunk, 1]: entry j is j / 10, whatever the observation; counts the rows it is called on."""

    def __init__(self, chunk: int, shape_ok: bool = True) -> None:
        super().__init__()
        self.chunk, self.shape_ok, self.rows = chunk, shape_ok, 0
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.rows += obs.shape[0]
        entries = torch.arange(self.chunk, dtype=torch.float32) / 10 * self.scale
        out = entries.reshape(1, self.chunk, 1).expand(obs.shape[0], -1, -1)
        return out if self.shape_ok else out[:, 0]


def module(net: nn.Module) -> TensorDictModule:
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


@pytest.mark.parametrize("backend", ["thread", "process", "ray"])
def test_a_policy_that_reads_its_last_observations_returns_what_catframes_gives_it(backend, request):
    common = dict(num_trajectories=9, max_steps=25, seed=4, keep_episodes=True, backend=backend)
    if backend == "ray":  # two workers split each round: each keeps its own sub-envs' histories
        request.getfixturevalue("ray_cluster")
        common.update(num_gpus=0, num_workers=2, ray_kwargs={"num_cpus": 0.5})
    stacked = functools.partial(pendulums, history=3)
    with Evaluator(pendulums, policy_factory=lambda env: declare(module(History(3)), history=3), **common) as ev:
        declared = ev.evaluate()
    with Evaluator(stacked, policy_factory=lambda env: module(History(3)), **common) as ev:
        oracle = ev.evaluate()
    for key in ("eval/episode_returns", "eval/episode_lengths"):
        assert list(map(float, declared[key])) == list(map(float, oracle[key])), key
    assert min(declared["eval/episode_lengths"]) < 25  # episodes ended and restarted mid-round: the history reset


def test_every_step_plays_the_entry_of_its_chunk_that_the_episode_has_reached():
    chunks = Chunks(chunk=4)
    policy = declare(module(chunks), chunk=4, execute=3)
    played = {}

    def check(trajectories):
        mask = trajectories.get(("collector", "mask"))
        actions = trajectories.get("action")[..., 0]
        mismatches = 0
        for row in range(mask.shape[0]):
            steps = int(mask[row].sum())
            got = actions[row, :steps]
            want = (torch.arange(steps) % 3).float() / 10
            mismatches += int((got - want).abs().gt(1e-6).sum())
        played["steps"] = int(mask.sum())
        return {"mismatches": float(mismatches)}

    with Evaluator(pendulums, policy=policy, num_trajectories=9, max_steps=25, seed=1, metrics_fn=check) as ev:
        result = ev.evaluate()
    assert result["eval/mismatches"] == 0.0
    assert played["steps"] > 9
    assert chunks.rows < played["steps"]  # one call per three steps, not one per step


def test_a_chunk_of_the_wrong_shape_is_one_line():
    policy = declare(module(Chunks(chunk=4, shape_ok=False)), chunk=4)
    with Evaluator(pendulums, policy=policy, num_trajectories=3, max_steps=10) as ev:
        with pytest.raises(EvalError, match=r"declares chunks of 4 actions but answered an action of shape \(3, 1\)"):
            ev.evaluate()


def test_declarations_are_checked_and_read_back():
    policy = module(Chunks(chunk=2))
    assert acting_of(policy).plain and kind_of(policy).name == "module"
    assert acting_of(declare(policy, chunk=2)) == Acting(chunk=2)
    for bad, words in (
        (dict(chunk=0), "Acting.chunk must be a whole number >= 1, got 0"),
        (dict(history=1.5), "Acting.history must be a whole number >= 1, got 1.5"),
        (dict(chunk=4, execute=5), r"Acting.execute must be a whole number in \[1, chunk=4\], got 5"),
    ):
        with pytest.raises(ValueError, match=words):
            Acting(**bad)


PLUGIN = """
from simeval.policy_kinds import Acting, PolicyKind


class Stacked(PolicyKind):
    name = "stacked"
    title = "a policy of two frames"

    def owns(self, policy):
        return getattr(policy, "frames", None) == 2

    def acting(self, policy):
        return Acting(history=2)
"""


def test_a_third_party_policy_kind_is_found_by_its_entry_point(tmp_path, monkeypatch):
    (tmp_path / "stacked_kind.py").write_text(textwrap.dedent(PLUGIN))
    write_dist_info(tmp_path, "stacked_kind", "simeval.policy_kinds", "stacked = stacked_kind:Stacked")
    monkeypatch.syspath_prepend(str(tmp_path))
    registered.cache_clear()
    try:
        policy = module(History(2))
        object.__setattr__(policy, "frames", 2)
        assert kind_of(policy).name == "stacked" and acting_of(policy) == Acting(history=2)
        assert kind_of(module(History(2))).name == "module"
        with Evaluator(pendulums, policy=policy, num_trajectories=3, max_steps=10, seed=0) as ev:
            assert ev.evaluate()["eval/num_episodes"] == 3
    finally:
        sys.modules.pop("stacked_kind", None)
        registered.cache_clear()
