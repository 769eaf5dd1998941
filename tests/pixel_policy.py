"""A policy that sees pixels, for the camera tests: a small CNN on each camera's images beside the state vector."""

from __future__ import annotations


def pixel_actor(env, camera: str = "track", channels: int = 4):
    """A deterministic TensorDictModule: conv features of ``observation.images.<camera>`` and ``observation.state``
    to a tanh action."""
    import torch
    from tensordict.nn import TensorDictModule

    spec = env.observation_spec
    image = spec[f"observation.images.{camera}"].shape
    state_dim = spec["observation.state"].shape[-1]
    act_dim = env.action_spec.shape[-1]

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(image[-3], channels, kernel_size=4, stride=4)
            features = channels * (image[-2] // 4) * (image[-1] // 4)
            self.head = torch.nn.Linear(state_dim + features, act_dim)

        def forward(self, state: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
            features = torch.relu(self.conv(pixels)).flatten(-3)
            return torch.tanh(self.head(torch.cat([state, features], -1)))

    return TensorDictModule(Net(), in_keys=["observation.state", f"observation.images.{camera}"], out_keys=["action"])
