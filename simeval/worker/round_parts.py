"""What the round loops without torchrl's Collector share (the direct loop and the tensor loop).

Whether a round may run without the Collector (:func:`collector_only`), a frozen VecNormV2's
arithmetic (:func:`loc_scale`), and the policy's plain module and device. Neither loop
owns these: :mod:`simeval.worker.direct_rollout` and :mod:`simeval.worker.tensor_rollout`
both read them. make_env's transforms as such a loop reproduces them are read by
:mod:`simeval.envs.layout`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from tensordict.nn import TensorDictModule

from simeval.envs.layout import as_key

if TYPE_CHECKING:
    from torchrl.envs.transforms import VecNormV2

    from simeval.settings import EvalSettings


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
