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
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from simeval.errors import Cancelled
from simeval.worker import episode_ends

if TYPE_CHECKING:
    from torchrl.collectors import BaseCollector
    from torchrl.envs import EnvBase


class RoundCounter:
    """How far the running round is: kept episodes, their total and env steps, read by a progress channel.

    The engines set it where they already account episodes (once per batch, or per landed step of the
    direct engine): plain ints assigned whole, so another thread reads them without a lock. ``active``
    is True from a round's start to its end (the worker clears it), so a reader never takes the last
    round's counts for the next one's.
    """

    __slots__ = ("active", "episodes", "total", "env_steps")

    def __init__(self) -> None:
        self.active = False
        self.episodes = 0
        self.total = 0
        self.env_steps = 0

    def begin(self, total: int) -> None:
        """Start counting a round of ``total`` episodes."""
        self.episodes, self.env_steps, self.total = 0, 0, total
        self.active = True

    def snapshot(self) -> tuple[int, int, int] | None:
        """``(episodes, total, env_steps)`` of the running round; None between rounds."""
        if not self.active:
            return None
        return (self.episodes, self.total, self.env_steps)


@dataclass
class Episodes:
    """Finished episodes of one round, in (sub-env, order) order."""

    returns: list[float]
    lengths: list[int]
    env_steps: int
    seconds: float
    started_at: float = float("nan")  # wall clock (time.time()) when the first env step began
    trajectories: TensorDictBase | None = None  # [N, T] with ("collector", "mask")
    traj_ids: list[int] = field(default_factory=list)
    step_reward_to_first_done: float = float("nan")
    # Read at each episode's last step (see simeval.worker.episode_ends); None where the batch has no such flag.
    terminated: list[bool] | None = None
    truncated: list[bool] | None = None
    info: dict[str, list[float]] = field(default_factory=dict)  # metric name -> one float per episode
    # Where each episode ran: the LOCAL index of its sub-env, and its ordinal k there (0: the sub-env's first).
    sub_envs: list[int] = field(default_factory=list)
    ordinals: list[int] = field(default_factory=list)
    # The env's per-step success flag (see episode_ends.EndKeys.success), 0/1 per episode; None where it has none:
    # true at the episode's last step, and true at any of its steps.
    success_at_end: list[float] | None = None
    success_once: list[float] | None = None


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
        """Count one batch's [E, T] rewards up to (and including) the first step any sub-env is done."""
        if self.closed:
            return
        any_done = done.any(0).nonzero()
        upto = int(any_done[0]) + 1 if any_done.numel() else done.shape[1]
        self.total += float(reward[:, :upto].double().mean(0).sum())
        self.steps += upto
        self.closed = bool(any_done.numel())

    @property
    def value(self) -> float:
        """The mean per-step reward so far (NaN before any step)."""
        return self.total / self.steps if self.steps else float("nan")


class EpisodeTally:
    """Per-sub-env episode accounting over time-major collector batches.

    ``add`` takes [E, T] tensors; episodes that straddle batches carry their
    partial return and length over. Sub-env ``e`` keeps its first
    ``quota[e]`` finished episodes and ignores the rest. ``ends`` (the same
    names at every ``add``) are [E, T] values read at each kept episode's last step.
    ``hits`` (given at every ``add`` or at none) is an [E, T] flag tracked over
    whole episodes: whether it was true at any of an episode's steps, with the
    count of true steps of a straddling episode carried over like its return.
    """

    def __init__(self, quotas: list[int]) -> None:
        self.quota = torch.tensor(quotas, dtype=torch.long)
        n = len(quotas)
        self.completed = torch.zeros(n, dtype=torch.long)
        self.carry_return = torch.zeros(n, dtype=torch.float64)
        self.carry_length = torch.zeros(n, dtype=torch.long)
        self.carry_hits = torch.zeros(n, dtype=torch.long)  # true steps of each sub-env's unfinished episode
        self._kept: list[tuple[torch.Tensor, ...]] = []
        self._end_names: list | None = None
        self._tracks_hits: bool | None = None

    @property
    def finished(self) -> bool:
        """Whether every sub-env has finished its quota of episodes."""
        return bool((self.completed >= self.quota).all())

    def add(
        self,
        reward: torch.Tensor,
        done: torch.Tensor,
        episode_return: torch.Tensor | None = None,
        step_count: torch.Tensor | None = None,
        traj_ids: torch.Tensor | None = None,
        ends: dict | None = None,
        hits: torch.Tensor | None = None,
    ) -> None:
        """Tally one batch of [E, T] tensors.

        ``episode_return`` and ``step_count``, when given, are read at each episode's last step as its
        return and length; otherwise they are summed and counted from ``reward``. ``hits`` (bool) is
        the flag whose "true at any step" each kept episode records (see :meth:`hit_once`).
        """
        ends = ends or {}
        if self._end_names is None:
            self._end_names = list(ends)
        elif list(ends) != self._end_names:
            raise ValueError(f"EpisodeTally.add got ends {list(ends)}, earlier {self._end_names}.")
        if self._tracks_hits is None:
            self._tracks_hits = hits is not None
        elif self._tracks_hits != (hits is not None):
            raise ValueError("EpisodeTally.add got hits in some batches and not in others.")
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
        hit_counts = torch.zeros(n_env * (horizon + 1), dtype=torch.long)
        if hits is not None:  # true steps per (sub-env, episode segment): > 0 is "true at some step"
            hit_counts.index_add_(0, flat, hits.reshape(-1).long())
        hit_counts = hit_counts.view(n_env, horizon + 1)
        sums[:, 0] += self.carry_return
        counts[:, 0] += self.carry_length
        hit_counts[:, 0] += self.carry_hits

        env_idx, t_idx = done.nonzero(as_tuple=True)  # sorted by env, then time
        k = segment[env_idx, t_idx]
        returns = sums[env_idx, k] if episode_return is None else episode_return[env_idx, t_idx].double()
        lengths = counts[env_idx, k] if step_count is None else step_count[env_idx, t_idx].long()
        ordinal = self.completed[env_idx] + k
        keep = ordinal < self.quota[env_idx]
        ids = traj_ids[env_idx, t_idx] if traj_ids is not None else torch.zeros_like(k)
        at_end = torch.zeros(len(k), len(ends), dtype=torch.float64)
        for i, value in enumerate(ends.values()):
            at_end[:, i] = value[env_idx, t_idx]
        once = hit_counts[env_idx, k] > 0
        self._kept.append(
            (env_idx[keep], ordinal[keep], returns[keep], lengths[keep], ids[keep], at_end[keep], once[keep])
        )

        n_done = done_l.sum(1)
        rows = torch.arange(n_env)
        self.carry_return = sums[rows, n_done]
        self.carry_length = counts[rows, n_done]
        self.carry_hits = hit_counts[rows, n_done]
        self.completed += n_done

    def _ordered(self) -> list[torch.Tensor]:
        """Sub-envs, ordinals, returns, lengths, trajectory ids, end values and hit-once flags of the kept
        episodes, in (sub-env, order) order."""
        columns = [torch.cat(x) for x in zip(*self._kept, strict=True)]
        env_idx, ordinal = columns[:2]
        if not len(env_idx):
            return columns
        order = torch.argsort(env_idx * (int(ordinal.max()) + 1) + ordinal)
        return [c[order] for c in columns]

    def episodes(self) -> tuple[list[float], list[int], list[int]]:
        """(returns, lengths, trajectory ids) of the kept episodes, in (sub-env, order) order."""
        if not self._kept:
            return [], [], []
        returns, lengths, ids = self._ordered()[2:5]
        return returns.tolist(), lengths.tolist(), ids.tolist()

    def positions(self) -> tuple[list[int], list[int]]:
        """(sub-envs, ordinals) of the kept episodes, in (sub-env, order) order.

        The sub-env is its index in the tallied batches (local to this env); the ordinal ``k`` counts
        that sub-env's finished episodes from 0 since the tally began.
        """
        if not self._kept:
            return [], []
        env_idx, ordinal = self._ordered()[:2]
        return env_idx.tolist(), ordinal.tolist()

    def end_values(self) -> dict:
        """Each ``ends`` name -> its value at the kept episodes' last steps (floats, episode order)."""
        if not self._kept:
            return {name: [] for name in self._end_names or ()}
        at_end = self._ordered()[5]
        return {name: at_end[:, i].tolist() for i, name in enumerate(self._end_names)}

    def hit_once(self) -> list[bool] | None:
        """Whether ``hits`` was true at any step of each kept episode (episode order); None without ``hits``."""
        if not self._tracks_hits:
            return None
        return self._ordered()[6].tolist()


class StoppablePolicy(TensorDictModuleBase):
    """Wraps the eval policy so ``shutdown()`` can stop a round between two steps."""

    def __init__(self, policy: Callable, stop: threading.Event) -> None:
        super().__init__()
        self.policy = policy
        self.stop = stop
        self.in_keys = list(getattr(policy, "in_keys", []))
        self.out_keys = list(getattr(policy, "out_keys", []))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The wrapped policy's output for ``tensordict``; :class:`~simeval.errors.Cancelled` once stopped."""
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
    collector: BaseCollector,
    env: EnvBase,
    quotas: list[int],
    *,
    reward_key: tuple,
    done_key: tuple,
    episode_return_key: tuple | None,
    seed: int | None,
    keep_trajectories: bool,
    stop: threading.Event,
    info_keys: tuple = (),
    use_step_count: bool = True,
    counter: RoundCounter | None = None,
) -> Episodes:
    """Reset (and seed) every env, then collect until each sub-env met its quota.

    ``info_keys`` (relative to "next") and every leaf under ("next", "log") are
    read at each kept episode's last step, with the terminated/truncated flags.
    ``counter`` (optional) is told the kept episodes and env steps after each batch.
    """
    tally = RoundTally(
        quotas,
        len(env.batch_size),
        reward_key=reward_key,
        done_key=done_key,
        episode_return_key=episode_return_key,
        use_step_count=use_step_count,
        info_keys=info_keys,
        keep_trajectories=keep_trajectories,
    )
    tally.counter = counter
    start = time.perf_counter()
    _reset(collector, env, seed)
    started_at = time.time()
    for batch in collector:
        if stop.is_set():
            raise Cancelled("evaluation cancelled by shutdown()")
        tally.add(batch)
        if tally.finished:
            break
    return tally.episodes(time.perf_counter() - start, started_at)


def _reset(collector: BaseCollector, env: EnvBase, seed: int | None) -> None:
    """Seed every env (when ``seed`` is given) and reset them, so the round starts from fresh episodes."""
    if seed is not None:
        env.set_seed(seed)
    collector.reset()


class RoundTally:
    """What ``run_round`` gathers from its batches: kept episodes, first-done reward, env steps (and the batches)."""

    def __init__(
        self,
        quotas: list[int],
        env_ndim: int,
        *,
        reward_key: tuple,
        done_key: tuple,
        episode_return_key: tuple | None,
        use_step_count: bool,
        info_keys: tuple,
        keep_trajectories: bool,
    ) -> None:
        self.env_ndim = env_ndim
        self.reward_key = reward_key
        self.done_key = done_key
        self.episode_return_key = episode_return_key
        self.use_step_count = use_step_count
        self.info_keys = info_keys
        self.keep_trajectories = keep_trajectories
        self.end_keys: episode_ends.EndKeys | None = None  # found in the first batch
        self.tally = EpisodeTally(quotas)
        self.first_done = FirstDoneReward()
        self.batches: list[TensorDictBase] = []
        self.env_steps = 0
        self.counter: RoundCounter | None = None  # told the kept episodes and env steps after each batch

    @property
    def finished(self) -> bool:
        """Whether every sub-env met its quota."""
        return self.tally.finished

    def add(self, batch: TensorDictBase) -> None:
        """Tally one collector batch: its finished episodes, the first-done reward and its env steps."""
        env_ndim = self.env_ndim
        done = _flat_env(batch.get(self.done_key), env_ndim)
        reward = _flat_env(batch.get(self.reward_key), env_ndim)
        ep_ret = batch.get(self.episode_return_key, None) if self.episode_return_key else None
        steps = batch.get(("next", "step_count"), None) if self.use_step_count else None
        traj = batch.get(("collector", "traj_ids"), None)
        if self.end_keys is None:
            self.end_keys = episode_ends.find(batch, self.done_key, self.info_keys)
        ends = episode_ends.read(batch, self.end_keys, env_ndim, done.shape)
        self.add_steps(
            reward,
            done,
            ends,
            None if ep_ret is None else _flat_env(ep_ret, env_ndim),
            None if steps is None else _flat_env(steps, env_ndim),
            None if traj is None else _flat_env(traj, env_ndim),
        )
        if self.keep_trajectories:
            self.batches.append(batch.clone())

    def add_steps(
        self,
        reward: torch.Tensor,
        done: torch.Tensor,
        ends: dict[tuple, torch.Tensor],
        episode_return: torch.Tensor | None = None,
        step_count: torch.Tensor | None = None,
        traj_ids: torch.Tensor | None = None,
    ) -> None:
        """Tally [E, T] CPU tensors of consecutive steps, ``ends`` keyed by ``self.end_keys``'s batch keys.

        What :meth:`add` does with a collector batch, for a loop that steps the env itself
        (``end_keys`` must be set first).
        """
        success = self.end_keys.success
        self.tally.add(
            reward,
            done,
            episode_return,
            step_count,
            traj_ids,
            ends,
            None if success is None else episode_ends.is_success(ends[success]),
        )
        self.first_done.add(reward, done)
        self.env_steps += done.numel()
        if self.counter is not None:
            tally = self.tally
            self.counter.episodes = int(torch.minimum(tally.completed, tally.quota).sum())
            self.counter.env_steps = self.env_steps

    def episodes(self, seconds: float, started_at: float) -> Episodes:
        """The round's kept episodes, with their end flags, info and success, in (sub-env, order) order."""
        returns, lengths, ids = self.tally.episodes()
        sub_envs, ordinals = self.tally.positions()
        trajectories = _select_trajectories(self.batches, ids) if self.keep_trajectories else None
        ends, keys = self.tally.end_values(), self.end_keys or episode_ends.EndKeys()

        def flags(key: tuple | None) -> list[bool] | None:
            return None if key is None else [bool(v) for v in ends[key]]

        once = self.tally.hit_once()
        at_end = None
        if keys.success is not None:
            at_end = episode_ends.is_success(torch.tensor(ends[keys.success], dtype=torch.float64)).double().tolist()

        return Episodes(
            returns,
            lengths,
            self.env_steps,
            seconds,
            started_at,
            trajectories,
            ids,
            self.first_done.value,
            terminated=flags(keys.terminated),
            truncated=flags(keys.truncated),
            info={name: ends[key] for name, key in keys.info.items()},
            sub_envs=sub_envs,
            ordinals=ordinals,
            success_at_end=at_end,
            success_once=None if once is None else [float(v) for v in once],
        )


def _select_trajectories(batches: list[TensorDictBase], ids: list[int]) -> TensorDictBase:
    """The kept episodes as an [N, T] TensorDict padded with ("collector", "mask")."""
    from torchrl.collectors.utils import split_trajectories

    full = torch.cat(batches, dim=-1) if len(batches) > 1 else batches[0]
    split = split_trajectories(full)
    traj_of_row = split.get(("collector", "traj_ids"))[:, 0]
    row = {int(t): i for i, t in enumerate(traj_of_row.tolist())}
    index = torch.tensor([row[i] for i in ids], dtype=torch.long)
    return split[index]
