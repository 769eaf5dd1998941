"""The direct round engine: rounds on a grouped NumPy env without torchrl's Collector, groups overlapped.

Per step this loop does in NumPy and one policy call what a Collector over a
TransformedEnv does with a dozen TensorDict operations: on a 2-core machine at
256 envs, a third of the round's time. With an env of two groups a helper thread
steps one group's physics (one C call that releases the GIL) while this thread
reads the other group's results, resets its finished sub-envs and runs the policy
on it: EnvPool's async idea, with two fixed groups so that every sub-env's steps,
and so every number, are what a Collector over the same env gives.

The env comes from the simulator that built it: its
:meth:`~simeval.envs.simulators.Simulator.round_source` returns a
:class:`~simeval.envs.simulators.DirectRound` (the env with the grouped interface it
documents, and make_env's transforms: DoubleToFloat, StepCounter, a frozen VecNormV2 on
"observation", RewardSum) where this loop reproduces the Collector; the native MuJoCo
env is such an env. It runs only where the policy reads "observation" and writes
"action" and nothing asks for what only the Collector keeps (trajectories for
``metrics_fn``, frames, info keys, a custom collector or batch size):
:mod:`simeval.worker.engines` chooses; ``collector_cls="Collector"`` asks for the Collector.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict

from simeval.envs.layout import PlainTransforms, step_cap
from simeval.errors import Cancelled
from simeval.worker.rollout import Episodes
from simeval.worker.round_parts import loc_scale, policy_device, policy_module

if TYPE_CHECKING:
    from torchrl.envs import EnvBase
    from torchrl.envs.utils import ExplorationType


class DirectRollout:
    """Runs rounds of exactly the given per-sub-env episode quotas on a grouped env, groups overlapped.

    Args:
        env: the transformed env (reset through its transforms at each round's start).
        base: the grouped env under it (a :class:`~simeval.envs.simulators.DirectRound`'s ``base``).
        transforms: make_env's transforms around it.
        policy: the policy ("observation" -> "action").
    """

    def __init__(self, env: EnvBase, base: Any, transforms: PlainTransforms, policy: Any) -> None:
        self.env, self.base, self.t, self.policy = env, base, transforms, policy
        self.device = policy_device(policy)
        self.module = policy_module(policy)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="simeval-physics") if len(base.groups) > 1 else None
        self.counter = None  # the worker's RoundCounter (simeval.worker.rollout), told how far a round is

    def close(self) -> None:
        """Stop the physics thread (if the env has two groups)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def run(
        self, quotas: list[int], seed: int | None, stop: threading.Event, exploration_type: ExplorationType
    ) -> Episodes:
        """One round: ``quotas[i]`` episodes from sub-env ``i``, seeded with ``seed`` (None: not reseeded).

        Raises :class:`~simeval.errors.Cancelled` once ``stop`` is set.
        """
        from torchrl.envs.utils import set_exploration_type

        with set_exploration_type(exploration_type):
            return _Round(self, quotas, stop).run(seed)


class _Round:
    """One round's state: per-sub-env returns, step counts and episode records, and the step loop."""

    def __init__(self, rollout: DirectRollout, quotas: list[int], stop: threading.Event) -> None:
        self.p, self.stop = rollout, stop
        base = rollout.base
        n = base.batch_size.numel()
        self.quota = np.asarray(quotas, dtype=np.int64)
        self.completed = np.zeros(n, dtype=np.int64)
        self.returns = np.zeros(n, dtype=np.float32)  # RewardSum's float32 running sum
        self.steps = np.zeros(n, dtype=np.int64)  # StepCounter's step_count
        self.norm = None if rollout.t.vecnorm is None else loc_scale(rollout.t.vecnorm)
        self.cap = step_cap(rollout.t)
        self.obs = np.empty((n, base.obs_dim), dtype=np.float32)  # raw observations
        self.records: list[tuple] = []  # (sub-env, ordinal, return, length, terminated, truncated)
        self.env_steps = 0
        self.counter = rollout.counter  # told the kept episodes and env steps as steps land (or None)
        self.first_done: list[list] = [[] for _ in base.groups]  # per group, per step: (reward sum, any done)
        self._first_done_seen = [False] * len(base.groups)

    @property
    def finished(self) -> bool:
        return bool((self.completed >= self.quota).all())

    def run(self, seed: int | None) -> Episodes:
        p, base = self.p, self.p.base
        start = time.perf_counter()
        if seed is not None:
            p.env.set_seed(seed)
        p.env.reset()  # what Collector.reset() does: a full reset through the transforms
        for g in base.groups:
            g.observe(self.obs[g.rows])
        started_at = time.time()
        groups, executor = base.groups, p._executor
        if executor is None or self.finished:
            while not self.finished:
                self._check_stop()
                g = groups[0]
                self._launch(g)
                g.physics()
                self._land(0)
        else:
            futures = [None] * len(groups)
            for i, g in enumerate(groups):
                self._launch(g)
                futures[i] = executor.submit(g.physics)
            try:
                while True:
                    for i, g in enumerate(groups):
                        futures[i].result()
                        futures[i] = None
                        self._land(i)
                        if self.finished:
                            break
                        self._check_stop()
                        self._launch(g)
                        futures[i] = executor.submit(g.physics)
                    if self.finished:
                        break
            finally:
                for f in futures:  # never leave physics running on a batch the next round resets
                    if f is not None:
                        f.result()
        return self._episodes(time.perf_counter() - start, started_at)

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise Cancelled("evaluation cancelled by shutdown()")

    def _launch(self, g: Any) -> None:
        """Run the policy on group ``g``'s (normalised) observations and set its controls."""
        obs = torch.from_numpy(self.obs[g.rows])
        if self.norm is not None:
            loc, scale = self.norm
            obs = (obs - loc) / scale
        p = self.p
        if p.device is not None and p.device.type != "cpu":
            obs = obs.to(p.device)
        if p.module is not None:
            action = p.module(obs)
        else:
            action = p.policy(TensorDict({"observation": obs}, batch_size=[g.size], device=p.device)).get("action")
        g.begin(p.base.action_rows(action, g.size))

    def _land(self, i: int) -> None:
        """Read group ``i``'s step: rewards, ends, episode records, resets (as the Collector's env step)."""
        base = self.p.base
        g = base.groups[i]
        rows = g.rows
        reward, terminated, truncated = base.finish_group(g, self.obs[rows])
        self.env_steps += g.size
        if self.counter is not None:
            self.counter.env_steps = self.env_steps
        reward = reward.astype(np.float32)
        self.returns[rows] += reward
        steps = self.steps[rows]
        steps += 1
        if self.cap is not None:
            truncated |= steps >= self.cap
        done = terminated | truncated
        if not self._first_done_seen[i]:
            self.first_done[i].append((float(reward.astype(np.float64).sum()), bool(done.any())))
            self._first_done_seen[i] = bool(done.any())
        ended = np.flatnonzero(done)
        if not len(ended):
            return
        for local in ended.tolist():
            sub = g.first + local
            ordinal = int(self.completed[sub])
            if ordinal < self.quota[sub]:
                self.records.append(
                    (
                        sub,
                        ordinal,
                        float(self.returns[sub]),
                        int(steps[local]),
                        bool(terminated[local]),
                        bool(truncated[local]),
                    )
                )
            self.completed[sub] += 1
        if self.counter is not None:
            self.counter.episodes = len(self.records)
        base.reset_sims(ended.astype(np.int32), group=g)
        self.returns[g.first + ended] = 0.0
        steps[ended] = 0
        g.observe(self.obs[rows])  # as the env's partial reset: the whole group, unchanged rows alike

    def _first_done_reward(self) -> float:
        """Mean per-step reward over all sub-envs until any is done (see rollout.FirstDoneReward)."""
        n = self.p.base.batch_size.numel()
        total, count = 0.0, 0
        for per_group in zip(*self.first_done, strict=False):
            total += sum(r for r, _ in per_group) / n
            count += 1
            if any(d for _, d in per_group):
                break
        return total / count if count else float("nan")

    def _episodes(self, seconds: float, started_at: float) -> Episodes:
        """The kept episodes in (sub-env, ordinal) order, as ``rollout.run_round`` gives them.

        No success lists: rounds with ``info_keys`` run on the Collector.
        """
        records = sorted(self.records)
        return Episodes(
            returns=[r[2] for r in records],
            lengths=[r[3] for r in records],
            env_steps=self.env_steps,
            seconds=seconds,
            started_at=started_at,
            step_reward_to_first_done=self._first_done_reward(),
            terminated=[r[4] for r in records],
            truncated=[r[5] for r in records],
            sub_envs=[r[0] for r in records],
            ordinals=[r[1] for r in records],
        )
