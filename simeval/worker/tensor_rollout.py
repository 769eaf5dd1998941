"""Rounds on Isaac Lab without torchrl's Collector: the bare loop's work, and the Collector's numbers.

A Collector over ``make_env("isaaclab:...")`` pays per step for a dozen
TensorDict operations, the transforms, and a TensorDict of Isaac Lab's log
scalars built every step: 3 to 15 ms per step on a 2-core machine, which on a
GPU would be most of a step. This loop steps the gymnasium env under
torchrl's wrapper itself, as a user's own loop would: one policy call on the
(frozen-normalised) observation tensor and one ``env.step`` per step, with the
rewards and done flags written into buffers on the env's device, and nothing
copied to the host until a batch of steps is over. Then the same
:class:`~simeval.worker.rollout.RoundTally` that reads the Collector's batches
reads these, batch by batch of the same size, so every number (returns,
lengths, flags, Isaac Lab's ``extras["log"]`` at each episode's end, the
first-done reward, the env steps) is the Collector path's, bit for bit.

Isaac Lab resets finished sub-envs inside ``step`` (torchrl's native
auto-reset), so the observation a step returns is already the next episode's
first for them, and ``extras["log"]`` holds the values it logged at those
resets: a reference to its entries is kept at every step, and turned into
numbers only at steps where an episode ended, once per batch.

It runs where it reproduces the Collector: the env is Isaac Lab under
:func:`simeval.envs.make_env`'s layout (the wrapper's own VecGymEnvTransform, the
rename of a manager-based task's ``policy`` group, DoubleToFloat, a StepCounter
without a cap, a frozen VecNormV2 on "observation", RewardSum), and nothing asks
for what only the Collector gives (:func:`simeval.worker.direct_rollout.collector_only`).
A suite condition (``Perturb``) runs on the Collector.
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
from simeval.worker.direct_rollout import as_key, collector_only, layout, loc_scale, policy_device, policy_module
from simeval.worker.rollout import Episodes, RoundTally

if TYPE_CHECKING:
    from torchrl.envs import EnvBase
    from torchrl.envs.utils import ExplorationType

    from simeval.settings import EvalSettings


def _isaaclab_parts(env: EnvBase) -> tuple[Any, Any, list[str]] | None:
    """(torchrl's IsaacLabWrapper, the VecNormV2 or None, Isaac Lab's log names), or None if the layout differs."""
    from torchrl.envs import DoubleToFloat, RenameTransform, RewardSum, StepCounter
    from torchrl.envs.transforms import VecGymEnvTransform, VecNormV2

    if not env.__dict__.get("_torchrl_native_autoreset", False):
        return None
    try:
        from torchrl.envs.libs.isaac_lab import IsaacLabWrapper
    except ImportError:
        return None
    env, transforms = layout(env)
    if not isinstance(env, IsaacLabWrapper) or env.from_tiled_camera:
        return None
    vecnorm = None
    for t in transforms:
        if isinstance(t, (VecGymEnvTransform, DoubleToFloat)):  # no-ops on Isaac Lab's float32 data here
            continue
        if type(t) is RenameTransform:
            keys = [[as_key(k) for k in ks] for ks in (t.in_keys, t.out_keys)]
            if keys != [[("policy",)], [("observation",)]]:
                return None
        elif type(t) is StepCounter:
            if t.max_steps is not None:  # Isaac Lab's episode length is its own time limit
                return None
        elif type(t) is RewardSum:
            if [as_key(k) for k in t.in_keys] != [("reward",)]:
                return None
        elif type(t) is VecNormV2:
            keys = [[as_key(k) for k in ks] for ks in (t.in_keys, t.out_keys)]
            if vecnorm is not None or not t.stateful or keys != [[("observation",)], [("observation",)]]:
                return None
            vecnorm = t
        else:
            return None
    from simeval.envs.isaaclab_log import IsaacLogReader

    readers = list(env.info_dict_reader)
    if any(type(r) is not IsaacLogReader for r in readers):
        return None
    names = readers[0].names if readers else []
    return env, vecnorm, names


def plan(
    env: EnvBase, policy: Any, settings: EvalSettings, recording: bool, steps_per_batch: int
) -> TensorRollout | None:
    """A tensor-loop rollout for ``env`` and ``policy``, or None where the Collector must run.

    ``steps_per_batch`` is the Collector's batch length (frames per batch / sub-envs): the
    tally reads the steps in batches of that many, as it reads the Collector's.
    """
    if collector_only(policy, settings, recording):
        return None
    found = _isaaclab_parts(env)
    if found is None:
        return None
    wrapper, vecnorm, names = found
    return TensorRollout(env, wrapper, vecnorm, names, policy, steps_per_batch)


class TensorRollout:
    """Runs rounds of exactly the given per-sub-env episode quotas on an Isaac Lab env (see the module docstring)."""

    def __init__(
        self, env: EnvBase, wrapper: Any, vecnorm: Any, log_names: list[str], policy: Any, steps_per_batch: int
    ) -> None:
        self.env, self.wrapper, self.vecnorm, self.log_names = env, wrapper, vecnorm, list(log_names)
        self.policy, self.module, self.device = policy, policy_module(policy), policy_device(policy)
        self.steps_per_batch = int(steps_per_batch)
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
        start = time.perf_counter()
        if seed is not None:
            self.env.set_seed(seed)
        obs = self.env.reset().get("observation")  # what Collector.reset() does: through the transforms
        device = obs.device
        norm = None
        if self.vecnorm is not None:
            loc, scale = loc_scale(self.vecnorm)
            norm = loc.to(device), scale.to(device)
        gym_env, T = self.wrapper._env, self.steps_per_batch
        reward = torch.empty(T, n, dtype=torch.float32, device=device)
        terminated = torch.empty(T, n, dtype=torch.bool, device=device)
        truncated = torch.empty(T, n, dtype=torch.bool, device=device)
        started_at = time.time()
        while not tally.finished:
            logs = []
            for t in range(T):
                if stop.is_set():
                    raise Cancelled("evaluation cancelled by shutdown()")
                observations, r, te, tr, extras = gym_env.step(self._act(obs))
                reward[t] = r.reshape(n)
                terminated[t] = te.reshape(n)
                truncated[t] = tr.reshape(n)
                log = extras.get("log") if isinstance(extras, dict) else None
                logs.append(dict(log) if log else None)  # its entries now; Isaac Lab replaces them at resets
                obs = observations["policy"]
                if norm is not None:
                    obs = (obs - norm[0]) / norm[1]
            r_cpu, te_cpu, tr_cpu = (x.T.cpu() for x in (reward, terminated, truncated))
            done = te_cpu | tr_cpu
            tally.add_steps(r_cpu, done, self._ends(te_cpu, tr_cpu, done, logs))
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
