"""Stable-Baselines3's deterministic MLP actors, with SB3's parameter names so ``policy.pth`` loads as is.

What ``model.predict(obs, deterministic=True)`` computes for a Box action space:

* PPO/A2C (ActorCriticPolicy): ``action_net(mlp_extractor.policy_net(obs))``, the Gaussian's mean,
  clipped to the action bounds (tanh and rescaling instead with ``squash_output``, gSDE only);
* SAC: ``tanh(actor.mu(actor.latent_pi(obs)))`` rescaled from [-1, 1] to the bounds;
* TD3/DDPG: ``actor.mu(obs)`` (it ends in tanh) rescaled from [-1, 1] to the bounds.

VecNormalize's observation normalisation, when the run used it, is folded in front, in float64 as
VecNormalize computes it: ``clip((obs - mean) / sqrt(var + epsilon), +-clip_obs)``.
"""

from __future__ import annotations

import torch
from torch import nn

# torch.nn activation classes an SB3 ``activation_fn`` may name (parameter-free ones).
ACTIVATIONS = (
    "Tanh", "ReLU", "ELU", "LeakyReLU", "SiLU", "GELU", "Sigmoid", "Softplus", "SELU", "CELU", "Mish",
    "Hardtanh", "Hardswish", "Softsign", "Tanhshrink", "ReLU6", "Identity",
)  # fmt: skip
ALGORITHMS = ("ppo", "sac", "td3")


def _mlp(n_in: int, hidden: list[int], activation: str) -> list[nn.Module]:
    """SB3's ``create_mlp(n_in, -1, hidden, activation)``: Linear, activation, ... (no output layer)."""
    layers: list[nn.Module] = []
    for n_out in hidden:
        layers += [nn.Linear(n_in, n_out), getattr(nn, activation)()]
        n_in = n_out
    return layers


class ObsRms(nn.Module):
    """VecNormalize's observation statistics, frozen (float64, as SB3 keeps them)."""

    def __init__(self, dim: int, clip_obs: float, epsilon: float) -> None:
        super().__init__()
        self.clip_obs = clip_obs
        self.epsilon = epsilon
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalised, clipped observations (float32), same shape as ``obs`` (..., dim)."""
        out = (obs.double() - self.mean) / torch.sqrt(self.var + self.epsilon)
        return out.clamp(-self.clip_obs, self.clip_obs).float()


class SB3Actor(nn.Module):
    """``observation -> [VecNormalize] -> SB3 actor -> clip or tanh-rescale to the action bounds``."""

    def __init__(
        self,
        algorithm: str,
        obs_dim: int,
        act_dim: int,
        hidden_dims: list[int],
        activation: str,
        low: list[float],
        high: list[float],
        squash_output: bool = False,
        obs_norm: dict | None = None,
    ) -> None:
        super().__init__()
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown SB3 algorithm family {algorithm!r}: one of {', '.join(ALGORITHMS)}.")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unsupported SB3 activation {activation!r}: one of {', '.join(ACTIVATIONS)}.")
        self.algorithm = algorithm
        last = hidden_dims[-1] if hidden_dims else obs_dim
        hidden = _mlp(obs_dim, list(hidden_dims), activation)
        if algorithm == "ppo":
            self.mlp_extractor = nn.Module()
            self.mlp_extractor.policy_net = nn.Sequential(*hidden)
            self.action_net = nn.Linear(last, act_dim)
        else:
            self.actor = nn.Module()
            if algorithm == "sac":
                self.actor.latent_pi = nn.Sequential(*hidden)
                self.actor.mu = nn.Linear(last, act_dim)
            else:
                self.actor.mu = nn.Sequential(*hidden, nn.Linear(last, act_dim), nn.Tanh())
        self.squash = squash_output or algorithm != "ppo"  # SAC and TD3 policies always squash
        self.obs_rms = ObsRms(obs_dim, **obs_norm) if obs_norm is not None else None
        self.register_buffer("low", torch.tensor(low, dtype=torch.float32), persistent=False)
        self.register_buffer("high", torch.tensor(high, dtype=torch.float32), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic actions (..., act_dim) within the bounds, for observations ``obs`` (..., obs_dim)."""
        x = self.obs_rms(obs) if self.obs_rms is not None else obs.float()
        if self.algorithm == "ppo":
            out = self.action_net(self.mlp_extractor.policy_net(x))
            if not self.squash:
                return out.clamp(self.low, self.high)
            out = torch.tanh(out)
        elif self.algorithm == "sac":
            out = torch.tanh(self.actor.mu(self.actor.latent_pi(x)))
        else:
            out = self.actor.mu(x)
        return self.low + (0.5 * (out + 1.0) * (self.high - self.low))  # BasePolicy.unscale_action
