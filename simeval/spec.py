"""What a worker needs to run evaluation rounds, as plain picklable data."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NestedKey = Any  # str | tuple[str, ...]; kept loose so this module imports no torch


def as_key(key: NestedKey) -> tuple[str, ...]:
    """Normalise a nested key to a tuple (``"reward"`` -> ``("reward",)``)."""
    if isinstance(key, str):
        return (key,)
    if isinstance(key, (list, tuple)) and len(key) == 1 and isinstance(key[0], (list, tuple)):
        return as_key(key[0])
    if isinstance(key, (list, tuple)) and all(isinstance(k, str) for k in key):
        return tuple(key)
    raise ValueError(f"expected a nested key such as ('next', 'reward'), got {key!r}; pass one key.")


@dataclass
class EvalSpec:
    """Settings shared by every backend; the rollout core reads only this."""

    num_trajectories: int = 10
    max_steps: int | None = None
    frames_per_batch: int | None = None
    collector_cls: Any = None
    collector_kwargs: dict = field(default_factory=dict)
    reward_key: tuple[str, ...] = ("next", "reward")
    done_key: tuple[str, ...] = ("next", "done")
    device: str | None = None
    exploration_type: str = "DETERMINISTIC"
    metrics_fn: Callable | None = None
    dump_video: bool = True
    seed: int | None = None
    results_path: str | None = None


def resolve_callable(ref: str | Callable, what: str) -> Callable:
    """Turn ``"package.module:function"`` into the function it names."""
    if callable(ref):
        return ref
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise ValueError(f"{what} must be a callable or a 'module:function' string, got {ref!r}.")
    module_name, attr = ref.split(":")
    module = importlib.import_module(module_name)
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{what} {ref!r}: module {module_name!r} has no attribute {attr!r}.") from None
    if not callable(fn):
        raise ValueError(f"{what} {ref!r} is not callable.")
    return fn
