"""Isaac Lab's ``extras["log"]`` as per-step tensordict entries under ``("log", name)``."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Composite, Unbounded
from torchrl.envs.gym_like import BaseInfoDictReader


class IsaacLogReader(BaseInfoDictReader):
    """Writes the scalars Isaac Lab logs in ``extras["log"]``, one float per sub-env.

    Isaac Lab logs a value when sub-envs reset (inside the step that ended
    their episode), as a mean over those sub-envs; the rollout core reads it at
    each episode's last step. A name the task did not log reads NaN. The names
    are fixed when the env is built (from its first reset), so the spec is known.
    """

    def __init__(self, names: list[str], batch_size: torch.Size, device: torch.device | None) -> None:
        self.names = list(names)
        self.batch_size = torch.Size(batch_size)
        self.device = device
        leaves = {n: Unbounded(self.batch_size, device=device) for n in self.names}
        # step_mdp_static: "log" moves as one sub-tensordict, which also keeps torchrl's native-autoreset
        # path from overwriting it with NaN at episode ends (it does so to observation tensors there).
        log_spec = Composite(leaves, shape=self.batch_size, step_mdp_static=True)
        self._info_spec = Composite({"log": log_spec}, shape=self.batch_size)

    def __call__(self, info_dict: dict[str, Any], tensordict: TensorDictBase) -> TensorDictBase:
        """Set ``("log", name)`` in ``tensordict`` from ``info_dict["log"]`` (NaN where missing) and return it."""
        log = info_dict.get("log", {}) if isinstance(info_dict, dict) else {}
        values = {}
        for name in self.names:
            value = torch.as_tensor(log.get(name, math.nan), dtype=torch.float32, device=self.device)
            values[name] = value.reshape(-1)[:1].expand(self.batch_size).clone()
        tensordict.set("log", TensorDict(values, batch_size=self.batch_size, device=self.device))
        return tensordict

    def reset(self) -> None:
        """Nothing to forget: the names and spec are fixed."""

    @property
    def info_spec(self) -> Composite:
        """The spec of the ``"log"`` entries, one float per sub-env and name."""
        return self._info_spec
