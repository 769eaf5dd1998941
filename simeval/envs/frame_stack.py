"""``StackFrames``: each camera's last ``k`` images, stacked along the channels, per sub-env.

torchrl's ``CatFrames`` keeps its frames in buffers named after its keys, and a buffer's
name may hold no dot, so it cannot take LeRobot's ``observation.images.<camera>`` keys;
this is the same stacking for those keys, with partial resets: a sub-env that resets
starts its stack from its first image repeated ``k`` times.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Composite
from torchrl.envs.transforms import Transform


class StackFrames(Transform):
    """Replace each of ``keys`` (``(B, C, H, W)`` images) by its last ``frames`` images, ``(B, frames * C, H, W)``,
    oldest first.

    Args:
        keys: the image keys (flat, dots allowed).
        frames: how many images each stack holds (>= 2).
    """

    def __init__(self, keys: list[str], frames: int) -> None:
        if frames < 2:
            raise ValueError(f"frames must be >= 2, got {frames}.")
        super().__init__(in_keys=list(keys), out_keys=list(keys))
        self.frames = int(frames)
        self._stacks: dict[str, torch.Tensor] = {}

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """The images' channels times ``frames``."""
        for key in self.in_keys:
            spec = observation_spec[key]
            *batch, channels, height, width = spec.shape
            shape = (*batch, channels * self.frames, height, width)
            observation_spec[key] = Bounded(
                low=spec.space.low.min().item(),
                high=spec.space.high.max().item(),
                shape=shape,
                dtype=spec.dtype,
                device=spec.device,
            )
        return observation_spec

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        for key in self.in_keys:
            image = tensordict_reset.get(key)
            fresh = image.unsqueeze(1).expand(-1, self.frames, *image.shape[1:]).clone()
            stack = self._stacks.get(key)
            if stack is None or mask is None or stack.shape != fresh.shape:
                stack = fresh
            else:  # a new tensor: the stack given out at the last step is an observation a rollout keeps
                rows = mask.reshape(-1).to(stack.device)
                stack = torch.where(rows.view(-1, *[1] * (stack.dim() - 1)), fresh, stack)
            self._stacks[key] = stack
            tensordict_reset.set(key, stack.flatten(1, 2))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys:
            image = next_tensordict.get(key)
            stack = torch.cat([self._stacks[key][:, 1:], image.unsqueeze(1)], dim=1)
            self._stacks[key] = stack
            next_tensordict.set(key, stack.flatten(1, 2))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Nothing outside an env: the stacks follow env steps only."""
        return tensordict
