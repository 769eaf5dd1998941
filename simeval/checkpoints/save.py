"""``save_checkpoint``: simeval's own format, written atomically (see :mod:`simeval.checkpoints.base`).

Writes go to a temporary file in the same directory, are fsync'd and renamed,
so a watcher never sees half a file.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from simeval.atomic import write_atomically
from simeval.checkpoints.base import FORMAT, flatten
from simeval.policies import factory_of

if TYPE_CHECKING:
    from tensordict import TensorDictBase
    from torch import nn


def save_checkpoint(
    path: str | os.PathLike,
    policy: nn.Module | TensorDictBase,
    step: int,
    obs_norm: nn.Module | TensorDictBase | None = None,
    env: str | None = None,
    *,
    policy_factory: str | None = None,
    policy_kwargs: dict | None = None,
) -> str:
    """Write a checkpoint atomically and return its path.

    ``policy`` is an nn.Module (or a weights TensorDict); ``obs_norm`` the
    training env's VecNorm transform, whose running statistics are kept.
    The factory defaults to the one stamped on the policy by
    ``simeval.policies``.
    """
    import torch

    from simeval.weights import as_weights

    if policy_factory is None and factory_of(policy) is not None:
        policy_factory, stamped_kwargs = factory_of(policy)
        policy_kwargs = stamped_kwargs if policy_kwargs is None else policy_kwargs
    policy_kwargs = dict(policy_kwargs or {})
    try:
        json.dumps(policy_kwargs)
    except TypeError as exc:
        raise ValueError(f"policy_kwargs must be plain data (JSON-able) to load safely: {exc}.") from None
    payload = {
        "format": FORMAT,
        "step": int(step),
        "env": env,
        "policy": flatten(as_weights(policy)),
        "obs_norm": None if obs_norm is None else flatten(as_weights(obs_norm)),
        "policy_factory": policy_factory,
        "policy_kwargs": policy_kwargs,
    }

    return write_atomically(path, lambda f: torch.save(payload, f))
