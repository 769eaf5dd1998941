"""Isaac Lab's steps for the worker's tensor round engine (:mod:`simeval.worker.tensor_rollout`).

Its gymnasium env under torchrl's wrapper resets finished sub-envs inside ``step``
(torchrl's native auto-reset), so the observation a step returns is already the next
episode's first for them, and ``extras["log"]`` holds the values it logged at those
resets: the engine keeps a reference to its entries at every step and turns them into
numbers only at steps where an episode ended, once per batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchrl.envs import DoubleToFloat, RenameTransform, RewardSum, StepCounter
from torchrl.envs.libs.isaac_lab import IsaacLabWrapper
from torchrl.envs.transforms import VecGymEnvTransform, VecNormV2

from simeval.envs.layout import as_key, resets_itself, unwrap
from simeval.envs.simulators.base import TensorRound
from simeval.envs.simulators.isaaclab.log import IsaacLogReader

if TYPE_CHECKING:
    import torch
    from torchrl.envs import EnvBase


def round_source(env: EnvBase) -> TensorRound | None:
    """The tensor engine's source for ``env``, or None where its layout is not make_env's (the Collector runs).

    make_env's layout here: the wrapper's own VecGymEnvTransform, the rename of a manager-based
    task's ``policy`` group, DoubleToFloat, a StepCounter without a cap (Isaac Lab's episode
    length is its own time limit), a frozen VecNormV2 on "observation" and RewardSum, with
    simeval's log reader only.
    """
    if not resets_itself(env):
        return None
    base, transforms = unwrap(env)
    if not isinstance(base, IsaacLabWrapper) or base.from_tiled_camera:
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
            if t.max_steps is not None:
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
    readers = list(base.info_dict_reader)
    if any(type(r) is not IsaacLogReader for r in readers):
        return None
    names = readers[0].names if readers else []
    return TensorRound(IsaacLabSteps(base, names), vecnorm)


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
