"""MuJoCo Warp's steps for the worker's tensor round engine (:mod:`simeval.worker.tensor_rollout`).

:meth:`WarpBatchEnv.advance <simeval.envs.simulators.mujoco_warp.env.WarpBatchEnv.advance>`,
then the finished sub-envs reset from states drawn ahead onto the device
(:class:`~simeval.envs.simulators.mujoco_warp.resets.ResetsAhead`), driven by the done mask
without a host read. Episode returns are summed on the device in float32, as the Collector
path's RewardSum sums them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simeval.envs.layout import PlainTransforms, plain_transforms, step_cap, unwrap
from simeval.envs.simulators.base import TensorRound
from simeval.envs.simulators.mujoco_warp.resets import ResetsAhead

if TYPE_CHECKING:
    import torch
    from torchrl.envs import EnvBase


def round_source(env: EnvBase) -> TensorRound | None:
    """The tensor engine's source for ``env`` (a WarpBatchEnv without cameras under make_env's layout), else None."""
    base, transforms = unwrap(env)
    if base.cameras:  # the engine reads the observation vector only: rounds with cameras run on the Collector
        return None
    found = plain_transforms(transforms)
    return None if found is None else TensorRound(WarpSteps(base, found), found.vecnorm)


class WarpSteps:
    """Steps of the MuJoCo Warp env with finished sub-envs reset on the device (no per-step host read)."""

    running_return = True  # the Collector path reads RewardSum's float32 running sums

    log_names: list[str] = []

    def __init__(self, base: Any, transforms: PlainTransforms) -> None:
        self.base, self.transforms = base, transforms
        self.resets: ResetsAhead | None = None
        self.cap: int | None = None

    def start(self) -> None:
        """Draw the reset states ahead (the env was just reset) and read the StepCounter cap of this round."""
        self.resets = ResetsAhead(self.base)
        self.cap = step_cap(self.transforms)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, None]:
        """(next observation, reward, terminated, truncated, None); finished sub-envs are reset already."""
        reward, terminated, truncated = self.base.advance(action, self.cap)
        self.resets.take(terminated | truncated)
        return self.base.observe(), reward, terminated, truncated, None
