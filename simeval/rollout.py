"""The rollout core every backend runs: exactly N complete episodes per round.

A torchrl Collector steps the (batched) env; :class:`EpisodeTally` turns its
batches into finished episodes. Each sub-env's share of episodes is fixed
before the round (see ``metrics.episode_quotas``), every env is reset at the
start of the round, and episodes are reported in (sub-env, order) order, so
the outcome does not depend on timing, batching or backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from simeval.errors import Cancelled


@dataclass
class Episodes:
    """Finished episodes of one round, in (sub-env, order) order."""

    returns: list[float]
    lengths: list[int]
    env_steps: int
    seconds: float
    trajectories: TensorDictBase | None = None  # [N, T] with ("collector", "mask")
    traj_ids: list[int] = field(default_factory=list)
    step_reward_to_first_done: float = float("nan")


class FirstDoneReward:
    """Mean per-step reward (over sub-envs) from the round's start until any sub-env is done.

    The figure torchrl's ``RayEvalWorker`` reports as ``reward``: a rollout that
    stops at the first done. Kept for ``simeval.RayEvalWorker``'s drop-in
    ``reward`` key; it is biased towards short episodes, unlike the episode returns.
    """

    def __init__(self) -> None:
        self.total = 0.0
        self.steps = 0
        self.closed = False

    def add(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        if self.closed:
            return
        any_done = done.any(0).nonzero()
        upto = int(any_done[0]) + 1 if any_done.numel() else done.shape[1]
        self.total += float(reward[:, :upto].double().mean(0).sum())
        self.steps += upto
        self.closed = bool(any_done.numel())

    @property
    def value(self) -> float:
        return self.total / self.steps if self.steps else float("nan")


class EpisodeTally:
    """Per-sub-env episode accounting over time-major collector batches.

    ``add`` takes [E, T] tensors; episodes that straddle batches carry their
    partial return and length over. Sub-env ``e`` keeps its first
    ``quota[e]`` finished episodes and ignores the rest.
    """

    def __init__(self, quotas: list[int]) -> None:
        self.quota = torch.tensor(quotas, dtype=torch.long)
        n = len(quotas)
        self.completed = torch.zeros(n, dtype=torch.long)
        self.carry_return = torch.zeros(n, dtype=torch.float64)
        self.carry_length = torch.zeros(n, dtype=torch.long)
        self._kept: list[tuple[torch.Tensor, ...]] = []

    @property
    def finished(self) -> bool:
        return bool((self.completed >= self.quota).all())

    def add(
        self,
        reward: torch.Tensor,
        done: torch.Tensor,
        episode_return: torch.Tensor | None = None,
        step_count: torch.Tensor | None = None,
        traj_ids: torch.Tensor | None = None,
    ) -> None:
        n_env, horizon = done.shape
        done_l = done.long()
        segment = done_l.cumsum(1) - done_l  # episode index within this batch
        flat = (torch.arange(n_env).unsqueeze(1) * (horizon + 1) + segment).reshape(-1)
        sums = torch.zeros(n_env * (horizon + 1), dtype=torch.float64)
        sums.index_add_(0, flat, reward.reshape(-1).double())
        sums = sums.view(n_env, horizon + 1)
        counts = torch.zeros(n_env * (horizon + 1), dtype=torch.long)
        counts.index_add_(0, flat, torch.ones_like(flat))
        counts = counts.view(n_env, horizon + 1)
        sums[:, 0] += self.carry_return
        counts[:, 0] += self.carry_length

        env_idx, t_idx = done.nonzero(as_tuple=True)  # sorted by env, then time
        k = segment[env_idx, t_idx]
        returns = sums[env_idx, k] if episode_return is None else episode_return[env_idx, t_idx].double()
        lengths = counts[env_idx, k] if step_count is None else step_count[env_idx, t_idx].long()
        ordinal = self.completed[env_idx] + k
        keep = ordinal < self.quota[env_idx]
        ids = traj_ids[env_idx, t_idx] if traj_ids is not None else torch.zeros_like(k)
        self._kept.append((env_idx[keep], ordinal[keep], returns[keep], lengths[keep], ids[keep]))

        n_done = done_l.sum(1)
        rows = torch.arange(n_env)
        self.carry_return = sums[rows, n_done]
        self.carry_length = counts[rows, n_done]
        self.completed += n_done

    def episodes(self) -> tuple[list[float], list[int], list[int]]:
        if not self._kept:
            return [], [], []
        env_idx, ordinal, returns, lengths, ids = (torch.cat(x) for x in zip(*self._kept, strict=True))
        order = torch.argsort(env_idx * (int(ordinal.max()) + 1) + ordinal)
        return returns[order].tolist(), lengths[order].tolist(), ids[order].tolist()


class StoppablePolicy(TensorDictModuleBase):
    """Wraps the eval policy so ``shutdown()`` can stop a round between two steps."""

    def __init__(self, policy: Callable, stop: threading.Event) -> None:
        super().__init__()
        self.policy = policy
        self.stop = stop
        self.in_keys = list(getattr(policy, "in_keys", []))
        self.out_keys = list(getattr(policy, "out_keys", []))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.stop.is_set():
            raise Cancelled("evaluation cancelled by shutdown()")
        return self.policy(tensordict)


def _flat_env(t: torch.Tensor, env_ndim: int) -> torch.Tensor:
    """[*env_batch, T, (1)] -> [E, T], on the CPU (a GPU env's rewards and flags are small; the tally is CPU work)."""
    t = t.cpu()
    if t.ndim > env_ndim + 1:
        t = t.squeeze(-1)
    if env_ndim == 0:
        return t.unsqueeze(0)
    return t.reshape(-1, t.shape[-1])


def run_round(
    collector,
    env,
    quotas: list[int],
    *,
    reward_key: tuple,
    done_key: tuple,
    episode_return_key: tuple | None,
    seed: int | None,
    keep_trajectories: bool,
    stop: threading.Event,
) -> Episodes:
    """Reset (and seed) every env, then collect until each sub-env met its quota."""
    env_ndim = len(env.batch_size)
    tally = EpisodeTally(quotas)
    first_done = FirstDoneReward()
    batches: list[TensorDictBase] = []
    env_steps = 0
    start = time.perf_counter()
    if seed is not None:
        env.set_seed(seed)
    collector.reset()
    for batch in collector:
        if stop.is_set():
            raise Cancelled("evaluation cancelled by shutdown()")
        done = _flat_env(batch.get(done_key), env_ndim)
        reward = _flat_env(batch.get(reward_key), env_ndim)
        ep_ret = batch.get(episode_return_key, None) if episode_return_key else None
        steps = batch.get(("next", "step_count"), None)
        traj = batch.get(("collector", "traj_ids"), None)
        tally.add(
            reward,
            done,
            None if ep_ret is None else _flat_env(ep_ret, env_ndim),
            None if steps is None else _flat_env(steps, env_ndim),
            None if traj is None else _flat_env(traj, env_ndim),
        )
        first_done.add(reward, done)
        env_steps += done.numel()
        if keep_trajectories:
            batches.append(batch.clone())
        if tally.finished:
            break
    seconds = time.perf_counter() - start
    returns, lengths, ids = tally.episodes()
    trajectories = _select_trajectories(batches, ids) if keep_trajectories else None
    return Episodes(returns, lengths, env_steps, seconds, trajectories, ids, first_done.value)


def _select_trajectories(batches: list[TensorDictBase], ids: list[int]) -> TensorDictBase:
    """The kept episodes as an [N, T] TensorDict padded with ("collector", "mask")."""
    from torchrl.collectors.utils import split_trajectories

    full = torch.cat(batches, dim=-1) if len(batches) > 1 else batches[0]
    split = split_trajectories(full)
    traj_of_row = split.get(("collector", "traj_ids"))[:, 0]
    row = {int(t): i for i, t in enumerate(traj_of_row.tolist())}
    index = torch.tensor([row[i] for i in ids], dtype=torch.long)
    return split[index]
