"""torchrl's mjlab wrapper with mjlab's ``extras["log"]`` as per-step entries under ``("log", name)``."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Composite, Unbounded
from torchrl.envs.libs.mjlab import MJLabWrapper

# mjlab logs these as counts of the sub-envs that reset in the step; simeval reports fractions of episodes.
TERMINATION_PREFIX = "Episode_Termination/"


class MjlabLogWrapper(MJLabWrapper):
    """``MJLabWrapper`` on mjlab's own auto-reset, writing the step's ``extras["log"]`` per sub-env.

    mjlab logs a value when sub-envs reset (inside the step that ended their
    episode), as a mean over those sub-envs; every sub-env gets the step's value
    and the rollout core reads it at each episode's last step. ``Episode_Termination/<term>``
    is logged as a count of the sub-envs the term ended: it is divided by the sub-envs
    that finished in the step, so its mean over episodes is the fraction of episodes
    the term ended. A name not logged in a step reads NaN. The names are fixed when
    the env is built (from a first reset), so the spec is known.

    Args:
        env: a built ``mjlab.envs.ManagerBasedRlEnv``.
    """

    def __init__(self, env: Any) -> None:
        if not env.extras.get("log"):
            env.reset()  # the first reset is what fills extras["log"] with the task's names
        self.log_names = sorted(str(k) for k in env.extras.get("log", {}))
        super().__init__(env, native_autoreset=True)

    def _make_specs(self, env: Any) -> None:
        super()._make_specs(env)
        if self.log_names:
            leaves = {n: Unbounded(self.batch_size, device=self.device) for n in self.log_names}
            # step_mdp_static: "log" moves as one sub-tensordict, which also keeps torchrl's native-autoreset
            # path from overwriting it with NaN at episode ends (it does so to observation tensors there).
            self.observation_spec["log"] = Composite(
                leaves, shape=self.batch_size, device=self.device, step_mdp_static=True
            )

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        out = super()._reset(tensordict, **kwargs)
        if self.log_names:
            out.set("log", self._log({}, None))
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        # MJLabWrapper hands out views of mjlab's reward and termination buffers, which mjlab overwrites in
        # place at its next step: a Collector batch, which keeps each step's tensors, would hold the batch's
        # last reward and flags at every step. Each step keeps its own values.
        for key in ("reward", "terminated", "truncated"):
            out.set(key, out.get(key).clone())
        if self.log_names:
            out.set("log", self._log(self._env.extras.get("log", {}), out.get("done")))
        return out

    def _log(self, log: dict, done: torch.Tensor | None) -> TensorDictBase:
        """The step's ``log`` as one float per sub-env and name (NaN where the step logged none)."""
        finished = int(done.sum()) if done is not None else 0
        values = {}
        for name in self.log_names:
            value = torch.as_tensor(log.get(name, math.nan), dtype=torch.float32, device=self.device)
            value = value.reshape(-1)[:1]
            if name.startswith(TERMINATION_PREFIX) and name in log:
                value = value / finished if finished else torch.full_like(value, math.nan)
            values[name] = value.expand(self.batch_size).clone()
        return TensorDict(values, batch_size=self.batch_size, device=self.device)
