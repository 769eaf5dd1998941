"""rl_games' continuous A2C actor at inference, with rl_games' parameter names so its ``model`` state loads as is.

It computes what ``PpoPlayerContinuous.get_action(obs, is_deterministic=True)``
returns: ``RunningMeanStd`` normalisation (frozen), ``a2c_network.actor_mlp``,
``a2c_network.mu`` and its activation, then the player's clip to [-1, 1] and
``rescale_actions`` to the action bounds. Isaac Lab's ``RlGamesVecEnvWrapper``
clips observations before the player sees them; ``clip_observations`` does that.
"""

from __future__ import annotations

import torch

# rl_games.algos_torch.network_builder.NetworkBuilder.BaseNetwork's activations_factory.
ACTIVATIONS = {
    "relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid, "elu": torch.nn.ELU,
    "selu": torch.nn.SELU, "swish": torch.nn.SiLU, "gelu": torch.nn.GELU, "softplus": torch.nn.Softplus,
    "None": torch.nn.Identity,
}  # fmt: skip


class RunningMeanStd(torch.nn.Module):
    """rl_games' RunningMeanStd in eval mode: ``clamp((x - mean) / sqrt(var + eps), -5, 5)``; float64 statistics."""

    def __init__(self, dim: int, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.register_buffer("running_mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("running_var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.ones((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised and clamped observations, same shape as ``x`` (..., dim)."""
        y = (x - self.running_mean.float()) / torch.sqrt(self.running_var.float() + self.epsilon)
        return torch.clamp(y, min=-5.0, max=5.0)


class A2CActor(torch.nn.Module):
    """The actor half of rl_games' ``A2CBuilder.Network`` (MLP, no RNN/CNN): ``obs -> mu_act(mu(actor_mlp(obs)))``."""

    def __init__(self, obs_dim: int, act_dim: int, units: list[int], activation: str, mu_activation: str) -> None:
        super().__init__()
        for name in (activation, mu_activation):
            if name not in ACTIVATIONS:
                raise ValueError(f"unknown rl_games activation {name!r}: one of {', '.join(ACTIVATIONS)}.")
        layers: list[torch.nn.Module] = []
        n_in = obs_dim
        for unit in units:
            layers += [torch.nn.Linear(n_in, unit), ACTIVATIONS[activation]()]
            n_in = unit
        self.actor_mlp = torch.nn.Sequential(*layers)
        self.mu = torch.nn.Linear(n_in, act_dim)
        self.mu_act = ACTIVATIONS[mu_activation]()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The action mean (..., act_dim) for observations ``obs`` (..., obs_dim)."""
        return self.mu_act(self.mu(self.actor_mlp(obs)))


class RlGamesActor(torch.nn.Module):
    """``observation -> [clip obs] -> [normalise] -> A2C actor -> mu [-> clip to [-1, 1] -> rescale to bounds]``."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        units: list[int],
        activation: str,
        mu_activation: str,
        normalize_input: bool,
        clip_actions: bool,
        low: torch.Tensor,
        high: torch.Tensor,
        clip_observations: float | None = None,
    ) -> None:
        super().__init__()
        self.a2c_network = A2CActor(obs_dim, act_dim, units, activation, mu_activation)
        self.running_mean_std = RunningMeanStd(obs_dim) if normalize_input else torch.nn.Identity()
        self.clip_actions = clip_actions
        self.clip_observations = clip_observations
        self.register_buffer("actions_low", low.float().clone(), persistent=False)
        self.register_buffer("actions_high", high.float().clone(), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic actions (..., act_dim) for observations ``obs`` (..., obs_dim)."""
        if self.clip_observations is not None:
            obs = torch.clamp(obs, -self.clip_observations, self.clip_observations)
        mu = self.a2c_network(self.running_mean_std(obs))
        if not self.clip_actions:
            return mu
        # rl_games.algos_torch.players.rescale_actions, term for term.
        d = (self.actions_high - self.actions_low) / 2.0
        m = (self.actions_high + self.actions_low) / 2.0
        return torch.clamp(mu, -1.0, 1.0) * d + m
