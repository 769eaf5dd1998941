"""rsl_rl's MLP actor at inference, with rsl_rl's parameter names so its state_dict loads as is."""

from __future__ import annotations

import torch

# rsl_rl.utils.resolve_nn_activation's names.
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)
ACTIVATIONS = {
    "elu": torch.nn.ELU, "selu": torch.nn.SELU, "relu": torch.nn.ReLU, "crelu": torch.nn.CELU,
    "lrelu": torch.nn.LeakyReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid,
    "softplus": torch.nn.Softplus, "gelu": torch.nn.GELU, "swish": torch.nn.SiLU, "mish": torch.nn.Mish,
    "identity": torch.nn.Identity,
}  # fmt: skip


class EmpiricalNorm(torch.nn.Module):
    """rsl_rl's EmpiricalNormalization, frozen: ``(x - mean) / (std + 0.01)``."""

    def __init__(self, dim: int, eps: float = 1e-2) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("_mean", torch.zeros(1, dim))
        self.register_buffer("_std", torch.ones(1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise observations ``x`` (..., dim) with the stored mean and std; same shape."""
        return (x - self._mean) / (self._std + self.eps)


class RslRlActor(torch.nn.Module):
    """``observation -> [normalise] -> MLP -> Gaussian mean [-> clip to +-clip_actions]``."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_dims: list[int],
        activation: str = "elu",
        obs_normalization: bool = False,
        clip_actions: float | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown rsl_rl activation {activation!r}: one of {', '.join(ACTIVATIONS)}.")
        dims = [obs_dim, *hidden_dims]
        layers: list[torch.nn.Module] = []
        for n_in, n_out in zip(dims[:-1], dims[1:], strict=True):
            layers += [torch.nn.Linear(n_in, n_out), ACTIVATIONS[activation]()]
        layers.append(torch.nn.Linear(dims[-1], act_dim))
        self.mlp = torch.nn.Sequential(*layers)
        self.obs_normalizer = EmpiricalNorm(obs_dim) if obs_normalization else torch.nn.Identity()
        # A bound past float32's range clips nothing (and clamp could not convert it).
        self.clip_actions = clip_actions if clip_actions is None or clip_actions < _FLOAT32_MAX else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions (..., act_dim), the Gaussian's mean, for observations ``obs`` (..., obs_dim)."""
        out = self.mlp(self.obs_normalizer(obs))
        if self.clip_actions is not None:
            out = out.clamp(-self.clip_actions, self.clip_actions)
        return out
