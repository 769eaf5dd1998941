"""Rounds on tensor-batched envs (Isaac Lab, MuJoCo Warp) without torchrl's Collector: the Collector's numbers.

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

The env steps come from one of two sources:

* Isaac Lab (:class:`IsaacLabSteps`): its gymnasium env under torchrl's
  wrapper. It resets finished sub-envs inside ``step`` (torchrl's native
  auto-reset), so the observation a step returns is already the next episode's
  first for them, and ``extras["log"]`` holds the values it logged at those
  resets: a reference to its entries is kept at every step, and turned into
  numbers only at steps where an episode ended, once per batch.
* the MuJoCo Warp env (:class:`WarpSteps`): :meth:`WarpBatchEnv.advance
  <simeval.envs.warp.WarpBatchEnv.advance>`, then the finished sub-envs reset
  from states drawn ahead onto the device (:class:`~simeval.envs.warp_resets.ResetsAhead`),
  driven by the done mask without a host read. Episode returns are summed on
  the device in float32, as the Collector path's RewardSum sums them.

It runs where it reproduces the Collector: the env is one of these under
:func:`simeval.envs.make_env`'s layout (DoubleToFloat, a StepCounter, a frozen
VecNormV2 on "observation", RewardSum; on Isaac Lab also the wrapper's own
VecGymEnvTransform and the rename of a manager-based task's ``policy`` group,
and no StepCounter cap), and nothing asks for what only the Collector gives
(:func:`simeval.worker.round_parts.collector_only`). A suite condition
(``Perturb``) runs on the Collector.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict

from simeval.errors import Cancelled
from simeval.worker import episode_ends
from simeval.worker.rollout import Episodes, RoundTally
from simeval.worker.round_parts import (
    as_key,
    collector_only,
    layout,
    loc_scale,
    plain_transforms,
    policy_device,
    policy_module,
    step_cap,
)

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


def _warp_parts(env: EnvBase) -> tuple[Any, Any] | None:
    """(the WarpBatchEnv, its plain transforms), or None if the layout differs."""
    warp_envs = sys.modules.get("simeval.envs.warp")  # not loaded: no Warp env was built
    base, transforms = layout(env)
    if warp_envs is None or type(base) is not warp_envs.WarpBatchEnv:
        return None
    found = plain_transforms(transforms)
    return None if found is None else (base, found)


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
    if found is not None:
        wrapper, vecnorm, names = found
        return TensorRollout(env, IsaacLabSteps(wrapper, names), vecnorm, policy, steps_per_batch)
    found = _warp_parts(env)
    if found is not None:
        base, transforms = found
        return TensorRollout(env, WarpSteps(base, transforms), transforms.vecnorm, policy, steps_per_batch)
    return None


class IsaacLabSteps:
    """Steps of an Isaac Lab env under torchrl's IsaacLabWrapper: its gymnasium env's own ``step``."""

    running_return = False  # the Collector path sums rewards itself on natively auto-reset envs

    def __init__(self, wrapper: Any, log_names: list[str]) -> None:
        self.gym_env, self.log_names = wrapper._env, list(log_names)

    def start(self) -> None:
        """Nothing to prepare: Isaac Lab resets finished sub-envs itself."""

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """(next observation, reward, terminated, truncated, Isaac Lab's log entries or None)."""
        observations, reward, terminated, truncated, extras = self.gym_env.step(action)
        log = extras.get("log") if isinstance(extras, dict) else None
        return observations["policy"], reward, terminated, truncated, dict(log) if log else None


class WarpSteps:
    """Steps of the MuJoCo Warp env with finished sub-envs reset on the device (no per-step host read)."""

    running_return = True  # the Collector path reads RewardSum's float32 running sums

    log_names: list[str] = []

    def __init__(self, base: Any, transforms: Any) -> None:
        self.base, self.transforms = base, transforms
        self.resets = None
        self.cap: int | None = None

    def start(self) -> None:
        """Draw the reset states ahead (the env was just reset) and read the StepCounter cap of this round."""
        from simeval.envs.warp_resets import ResetsAhead

        self.resets = ResetsAhead(self.base)
        self.cap = step_cap(self.transforms)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, None]:
        """(next observation, reward, terminated, truncated, None); finished sub-envs are reset already."""
        reward, terminated, truncated = self.base.advance(action, self.cap)
        self.resets.take(terminated | truncated)
        return self.base.observe(), reward, terminated, truncated, None


class TensorRollout:
    """Runs rounds of exactly the given per-sub-env episode quotas on a tensor-batched env (see the module docstring).

    Args:
        env: the transformed env (reset through its transforms at each round's start).
        steps: where the steps come from (:class:`IsaacLabSteps` or :class:`WarpSteps`).
        vecnorm: the frozen VecNormV2 on "observation", or None.
        policy: the policy ("observation" -> "action").
        steps_per_batch: the Collector's batch length, the tally's unit.
    """

    def __init__(self, env: EnvBase, steps: Any, vecnorm: Any, policy: Any, steps_per_batch: int) -> None:
        self.env, self.steps, self.vecnorm = env, steps, vecnorm
        self.log_names = list(steps.log_names)
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
