"""What the round loops without torchrl's Collector share (the native loop and the tensor loops).

Whether a round may run without the Collector (:func:`collector_only`), make_env's
transforms as such a loop reproduces them (:func:`plain_transforms`), a frozen VecNormV2's
arithmetic (:func:`loc_scale`), and the policy's plain module and device. Neither loop
owns these: :mod:`simeval.worker.direct_rollout` (native MuJoCo) and
:mod:`simeval.worker.tensor_rollout` (Isaac Lab, mjlab, MuJoCo Warp) both read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from tensordict.nn import TensorDictModule

if TYPE_CHECKING:
    from torchrl.envs import EnvBase
    from torchrl.envs.transforms import VecNormV2

    from simeval.settings import EvalSettings


@dataclass
class PlainTransforms:
    """The transforms of make_env's layout that a loop without the Collector reproduces."""

    counters: list  # StepCounters (their max_steps caps are read at each round's start)
    vecnorm: object | None  # a VecNormV2 on "observation", frozen during rounds


def as_key(key: str | tuple[str, ...]) -> tuple:
    """A key as a tuple."""
    return (key,) if isinstance(key, str) else tuple(key)


def layout(env: EnvBase) -> tuple[EnvBase, list]:
    """The base env under every TransformedEnv layer, and every transform, innermost first."""
    from torchrl.envs import Compose, TransformedEnv

    layers = []
    while isinstance(env, TransformedEnv):
        layers.append(env.transform)
        env = env.base_env
    flat = [t for layer in reversed(layers) for t in (layer if isinstance(layer, Compose) else [layer])]
    return env, flat


def plain_transforms(transforms: list) -> PlainTransforms | None:
    """make_env's transforms (DoubleToFloat, StepCounters, a frozen VecNormV2 on "observation", RewardSum).

    None if any other transform, or any of these with other keys or settings, is among ``transforms``.
    DoubleToFloat is taken for a no-op: the base env must have no float64 outputs.
    """
    from torchrl.envs import DoubleToFloat, RewardSum, StepCounter
    from torchrl.envs.transforms import VecNormV2

    found = PlainTransforms([], None)
    for t in transforms:
        if isinstance(t, DoubleToFloat):
            continue
        if isinstance(t, StepCounter):
            if t.step_count_key != "step_count" or not t.update_done:
                return None
            found.counters.append(t)
        elif isinstance(t, RewardSum):
            if [as_key(k) for k in t.in_keys] != [("reward",)] or t.reset_keys not in (None, ["_reset"]):
                return None
        elif type(t) is VecNormV2:
            if found.vecnorm is not None or not t.stateful or [as_key(k) for k in t.in_keys] != [("observation",)]:
                return None
            if [as_key(k) for k in t.out_keys] != [("observation",)]:
                return None
            found.vecnorm = t
        else:
            return None
    return found


def step_cap(transforms: PlainTransforms) -> int | None:
    """The smallest ``max_steps`` of the StepCounters (read at a round's start: the worker sets it), or None."""
    caps = [c.max_steps for c in transforms.counters if c.max_steps is not None]
    return min(caps) if caps else None


def collector_only(policy: Any, settings: EvalSettings, recording: bool) -> bool:
    """Whether ``settings`` ask for what only the Collector gives, or ``policy`` is not "observation" -> "action".

    A custom collector or batch size, trajectories for ``metrics_fn``, info keys, frames,
    other reward or done keys: the loops without the Collector (this module's and
    :mod:`simeval.worker.tensor_rollout`'s) run only where none of these is asked for.
    """
    return (
        settings.collector_cls is not None
        or bool(settings.collector_kwargs)
        or settings.frames_per_batch is not None
        or settings.metrics_fn is not None
        or bool(settings.info_keys)
        or recording
        or tuple(settings.reward_key) != ("next", "reward")
        or tuple(settings.done_key) != ("next", "done")
        or [as_key(k) for k in getattr(policy, "in_keys", [])] != [("observation",)]
        or ("action",) not in [as_key(k) for k in getattr(policy, "out_keys", [])]
    )


def policy_module(policy: Any) -> Any:
    """The module of a plain TensorDictModule from "observation" to "action" (None for any other policy).

    Calling it on the tensor skips the TensorDict bookkeeping, a third of a small MLP's per-step time.
    """
    plain = type(policy) is TensorDictModule and list(policy.out_keys) == ["action"]
    return policy.module if plain else None


def loc_scale(vecnorm: VecNormV2) -> tuple[torch.Tensor, torch.Tensor]:
    """A frozen VecNormV2's "observation" location and scale, by torchrl's own arithmetic (``VecNormV2._norm``).

    Computed once per round; ``(obs - loc) / scale`` then gives the transform's output bit for bit
    (tests/test_direct_rollout.py checks it against the Collector with loaded statistics).
    """
    loc, var = vecnorm._loc["observation"], vecnorm._var["observation"]
    if vecnorm.decay < 1.0:
        count = vecnorm._count["observation"]
        bias_correction = (1 - (count * math.log(vecnorm.decay)).exp()).to(loc.dtype)
    else:
        bias_correction = 1
    var = var - loc.pow(2)
    loc = loc / bias_correction
    var = var / bias_correction
    return loc, var.sqrt().clamp_min(vecnorm.eps)


def policy_device(policy: Any) -> torch.device | None:
    """The device of ``policy``'s first parameter (None: no parameters)."""
    try:
        return next(policy.parameters()).device
    except (AttributeError, StopIteration):
        return None
