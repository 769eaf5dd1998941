"""The tensor round engine: rounds on tensor-batched envs without torchrl's Collector, with the Collector's numbers.

A Collector over ``make_env("isaaclab:...")`` pays per step for a dozen
TensorDict operations, the transforms, and a TensorDict of Isaac Lab's log
scalars built every step: 3 to 15 ms per step on a 2-core machine, which on a
GPU would be most of a step. This loop steps the env as a user's own loop
would: one policy call on the (frozen-normalised) observation tensor and one
env step per step, with the rewards and done flags written into buffers on the
env's device, and nothing copied to the host until a batch of steps is over.
Then the same :class:`~simeval.worker.rollout.RoundTally` that reads the
Collector's batches reads these, batch by batch of the same size, so every
number (returns, lengths, flags, Isaac Lab's ``extras["log"]`` at each
episode's end, the first-done reward, the env steps) is the Collector path's,
bit for bit.

The steps come from the simulator that built the env: its
:meth:`~simeval.envs.simulators.Simulator.round_source` returns a
:class:`~simeval.envs.simulators.TensorRound` (the steps, the frozen VecNormV2) where
this loop reproduces the Collector over its env, e.g. Isaac Lab's own ``step`` (finished
sub-envs reset inside it, ``extras["log"]`` read at episode ends) or MuJoCo Warp's device
steps with resets drawn ahead.

It runs only where nothing asks for what only the Collector gives
(:func:`simeval.worker.round_parts.collector_only`); :mod:`simeval.worker.engines` chooses.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict

from simeval.errors import Cancelled
from simeval.worker import episode_ends
from simeval.worker.rollout import Episodes, RoundTally
from simeval.worker.round_parts import loc_scale, policy_device, policy_module

if TYPE_CHECKING:
    from torchrl.envs import EnvBase
    from torchrl.envs.utils import ExplorationType


class TensorRollout:
    """Runs rounds of exactly the given per-sub-env episode quotas on a tensor-batched env (see the module docstring).

    Args:
        env: the transformed env (reset through its transforms at each round's start).
        steps: where the steps come from (a :class:`~simeval.envs.simulators.TensorRound`'s ``steps``).
        vecnorm: the frozen VecNormV2 on "observation", or None.
        policy: the policy ("observation" -> "action").
        steps_per_batch: the Collector's batch length, the tally's unit.
    """

    def __init__(self, env: EnvBase, steps: Any, vecnorm: Any, policy: Any, steps_per_batch: int) -> None:
        self.env, self.steps, self.vecnorm = env, steps, vecnorm
        self.log_names = list(steps.log_names)
        self.policy, self.module, self.device = policy, policy_module(policy), policy_device(policy)
        self.steps_per_batch = int(steps_per_batch)
        self.counter = None  # the worker's RoundCounter (simeval.worker.rollout), told how far a round is
        self.end_keys = episode_ends.EndKeys(
            ("next", "terminated"),
            ("next", "truncated"),
            {"log/" + name: ("next", "log", name) for name in self.log_names},
        )

    def close(self) -> None:
        """Nothing to stop: the loop runs on the calling thread."""

    def run(
        self, quotas: list[int], seed: int | None, stop: threading.Event, exploration_type: ExplorationType
    ) -> Episodes:
        """One round: ``quotas[i]`` episodes from sub-env ``i``, seeded with ``seed`` (None: not reseeded).

        Raises :class:`~simeval.errors.Cancelled` once ``stop`` is set.
        """
        from torchrl.envs.utils import set_exploration_type

        with set_exploration_type(exploration_type):
            return self._round(quotas, seed, stop)

    def _act(self, obs: torch.Tensor) -> torch.Tensor:
        if self.device is not None and obs.device != self.device:
            obs = obs.to(self.device)
        if self.module is not None:
            return self.module(obs)
        td = TensorDict({"observation": obs}, batch_size=obs.shape[:1], device=obs.device)
        return self.policy(td).get("action")

    def _round(self, quotas: list[int], seed: int | None, stop: threading.Event) -> Episodes:
        n = len(quotas)
        tally = RoundTally(
            quotas,
            1,
            reward_key=("next", "reward"),
            done_key=("next", "done"),
            episode_return_key=None,
            use_step_count=False,
            info_keys=(),
            keep_trajectories=False,
        )
        tally.end_keys = self.end_keys
        tally.counter = self.counter
        start = time.perf_counter()
        if seed is not None:
            self.env.set_seed(seed)
        obs = self.env.reset().get("observation")  # what Collector.reset() does: through the transforms
        device = obs.device
        norm = None
        if self.vecnorm is not None:
            loc, scale = loc_scale(self.vecnorm)
            norm = loc.to(device), scale.to(device)
        source, T = self.steps, self.steps_per_batch
        source.start()
        reward = torch.empty(T, n, dtype=torch.float32, device=device)
        terminated = torch.empty(T, n, dtype=torch.bool, device=device)
        truncated = torch.empty(T, n, dtype=torch.bool, device=device)
        returns = running = None
        if source.running_return:  # RewardSum's float32 sums, as the Collector path reads them
            returns = torch.empty(T, n, dtype=torch.float32, device=device)
            running = torch.zeros(n, dtype=torch.float32, device=device)
        started_at = time.time()
        while not tally.finished:
            logs = []
            for t in range(T):
                if stop.is_set():
                    raise Cancelled("evaluation cancelled by shutdown()")
                obs, r, te, tr, log = source.step(self._act(obs))
                reward[t] = r.reshape(n)
                terminated[t] = te.reshape(n)
                truncated[t] = tr.reshape(n)
                logs.append(log)  # its entries now; Isaac Lab replaces them at resets
                if running is not None:
                    running += reward[t]
                    returns[t] = running
                    running.masked_fill_(terminated[t] | truncated[t], 0.0)
                if norm is not None:
                    obs = (obs - norm[0]) / norm[1]
            r_cpu, te_cpu, tr_cpu = (x.T.cpu() for x in (reward, terminated, truncated))
            done = te_cpu | tr_cpu
            ends = self._ends(te_cpu, tr_cpu, done, logs)
            tally.add_steps(r_cpu, done, ends, None if returns is None else returns.T.cpu())
        return tally.episodes(time.perf_counter() - start, started_at)

    def _ends(
        self, terminated: torch.Tensor, truncated: torch.Tensor, done: torch.Tensor, logs: list[dict | None]
    ) -> dict[tuple, torch.Tensor]:
        """The end values of one batch, [E, T] float64, as the Collector's batch gives them at episode ends.

        torchrl's log reader writes each logged scalar (float32, its first element) for every sub-env
        at every step; only steps where an episode ended are read, so only those are filled here.
        """
        n, horizon = done.shape
        ends = {self.end_keys.terminated: terminated.double(), self.end_keys.truncated: truncated.double()}
        if not self.log_names:
            return ends
        steps = done.any(0).nonzero().flatten().tolist()
        for name in self.log_names:
            column = torch.full((horizon,), math.nan, dtype=torch.float64)
            if steps:
                values = [_first(None if logs[t] is None else logs[t].get(name)) for t in steps]
                device = next((v.device for v in values if v.device.type != "cpu"), torch.device("cpu"))
                column[steps] = torch.stack([v.to(device) for v in values]).cpu().double()  # one copy
            ends[("next", "log", name)] = column.expand(n, horizon)
        return ends


def _first(value: Any) -> torch.Tensor:
    """A logged value as torchrl's log reader stores it: float32, its first element (NaN where none was logged)."""
    if value is None:
        return torch.tensor(math.nan, dtype=torch.float32)
    return torch.as_tensor(value, dtype=torch.float32).reshape(-1)[0]
