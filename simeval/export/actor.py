"""A policy's deterministic action as a plain ``obs -> actions`` module that torch.onnx and TorchScript export.

The evaluator runs policies under ``ExplorationType.DETERMINISTIC``. For the
policies simeval builds that is rebuilt here from tensor operations alone:

* a TensorDictModule ``observation -> action``: its network as is (rsl_rl's
  actor, ``mlp_policy``);
* a ProbabilisticActor over a TanhNormal (``gaussian_actor``): torchrl's
  ``TanhNormal.deterministic_sample``, i.e. ``tanh(loc)`` clamped to
  ``+-(1 - finfo.resolution)`` (``SafeTanhTransform``), then the affine map to
  ``[low, high]`` when the bounds are not +-1; over a Normal: ``loc``.

Anything else is called through its TensorDict interface and traced; the
exporter checks every export against the policy itself, so a trace that
misses a branch is refused, not written.
"""

from __future__ import annotations

import torch
from torch import nn

OBS, ACTION = "observation", "action"


class Normalise(nn.Module):
    """make_env's VecNormV2, frozen: ``(obs - loc) / scale`` with VecNormV2's own loc and scale (it does not clip)."""

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("loc", loc.detach().clone())
        self.register_buffer("scale", scale.detach().clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalised observations, same shape as ``obs`` (batch, obs_dim)."""
        return (obs - self.loc) / self.scale


class Output(nn.Module):
    """Output ``index`` of a network that returns a tuple (``(loc, scale)``), or its only output."""

    def __init__(self, net: nn.Module, index: int | None) -> None:
        super().__init__()
        self.net, self.index = net, index

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The chosen output of the network for ``obs`` (batch, obs_dim)."""
        out = self.net(obs)
        return out if self.index is None else out[self.index]


class TanhNormalMode(nn.Module):
    """``TanhNormal(loc, scale, low, high, tanh_loc, upscale).deterministic_sample`` from ``loc`` (torchrl 0.14)."""

    def __init__(self, loc: nn.Module, low: torch.Tensor, high: torch.Tensor, tanh_loc: bool, upscale: float) -> None:
        super().__init__()
        self.loc_net = loc
        self.affine = bool((high != 1.0).any() or (low != -1.0).any())  # TanhNormal.non_trivial_max/min
        self.tanh_loc, self.upscale = tanh_loc, float(upscale)
        self.register_buffer("low", low.detach().clone().float())
        self.register_buffer("high", high.detach().clone().float())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The TanhNormal's deterministic sample (batch, act_dim) for ``obs`` (batch, obs_dim)."""
        loc = self.loc_net(obs)
        if self.tanh_loc:  # TanhNormal.update
            loc = (loc / self.upscale).tanh() * self.upscale
            if self.affine:
                loc = loc + (self.high - self.low) / 2 + self.low
        lim = 1.0 - torch.finfo(loc.dtype).resolution  # safetanh_noeps
        y = loc.tanh().clamp(-lim, lim)
        if self.affine:  # AffineTransform(loc=(high + low) / 2, scale=(high - low) / 2)
            y = (self.high + self.low) / 2 + (self.high - self.low) / 2 * y
        return y


class TensorDictCall(nn.Module):
    """Any TensorDict policy, called on ``{"observation": obs}`` under DETERMINISTIC (traced, then checked)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's "action" (batch, act_dim) for ``obs`` (batch, obs_dim)."""
        from tensordict import TensorDict
        from torchrl.envs.utils import ExplorationType, set_exploration_type

        with set_exploration_type(ExplorationType.DETERMINISTIC):
            return self.policy(TensorDict({OBS: obs}, batch_size=obs.shape[:-1]))[ACTION]


class Exported(nn.Module):
    """What is written: ``obs -> [normalise] -> deterministic action``."""

    def __init__(self, actor: nn.Module, normalise: nn.Module | None) -> None:
        super().__init__()
        self.normalise = normalise if normalise is not None else nn.Identity()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic actions (batch, act_dim) for raw observations ``obs`` (batch, obs_dim)."""
        return self.actor(self.normalise(obs))


def deterministic_actor(policy: nn.Module) -> tuple[nn.Module, str]:
    """(``obs -> action`` module, how it was derived) for a policy built by a simeval factory."""
    from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModule, TensorDictSequential

    if isinstance(policy, ProbabilisticTensorDictSequential):
        found = _probabilistic(policy)
        if found is not None:
            return found
    elif isinstance(policy, TensorDictModule) and not isinstance(policy, TensorDictSequential):
        if _reads_obs(policy) and ACTION in policy.out_keys and not getattr(policy, "safe", False):
            index = None if len(policy.out_keys) == 1 else policy.out_keys.index(ACTION)
            return Output(policy.module, index), "its network"
    return TensorDictCall(policy), f"a trace of {type(policy).__name__} under ExplorationType.DETERMINISTIC"


def _reads_obs(module: nn.Module) -> bool:
    from tensordict.nn import TensorDictModule, TensorDictSequential

    return (
        isinstance(module, TensorDictModule)
        and not isinstance(module, TensorDictSequential)
        and list(module.in_keys) == [OBS]
    )


def _probabilistic(policy: nn.Module) -> tuple[nn.Module, str] | None:
    """The explicit deterministic sample of ``params -> distribution`` actors (TanhNormal, Normal), else None."""
    from tensordict.nn import ProbabilisticTensorDictModule
    from torchrl.modules import IndependentNormal, TanhNormal

    modules = list(policy.module)
    if len(modules) != 2 or not _reads_obs(modules[0]) or not isinstance(modules[1], ProbabilisticTensorDictModule):
        return None
    params, dist = modules
    if getattr(dist, "safe", False) or dist.out_keys[0] != ACTION or "loc" not in dist.dist_keys:
        return None
    loc_key = dist.in_keys[dist.dist_keys.index("loc")]
    if loc_key not in params.out_keys:
        return None
    loc = Output(params.module, None if len(params.out_keys) == 1 else params.out_keys.index(loc_key))
    kwargs = dict(dist.distribution_kwargs or {})
    if dist.distribution_class is TanhNormal:
        low = torch.as_tensor(kwargs.get("low", -1.0), dtype=torch.float32)
        high = torch.as_tensor(kwargs.get("high", 1.0), dtype=torch.float32)
        mode = TanhNormalMode(loc, low, high, bool(kwargs.get("tanh_loc", False)), kwargs.get("upscale", 5.0))
        return mode, "TanhNormal's deterministic sample: tanh(loc), clamped, scaled to the action bounds"
    if dist.distribution_class in (torch.distributions.Normal, IndependentNormal) and "tanh_loc" not in kwargs:
        return loc, "the Normal's mean (loc)"
    return None
