"""Freeze VecNorm in eval envs, and refuse to evaluate with empty statistics.

Evaluation must read normalisation statistics, never update them. Freezing
works on the eval env's own transforms and on the sub-envs of SerialEnv /
ParallelEnv (ParallelEnv workers are frozen through their env factories,
wrapped before the workers start). A caller's env instance is frozen only for
the duration of a round and then restored, so an env shared with training
keeps updating its statistics between rounds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from torchrl.envs import EnvBase, TransformedEnv
from torchrl.envs.batched_envs import BatchedEnvBase, SerialEnv
from torchrl.envs.transforms import Compose, Transform, VecNormV2

from simeval.envs.layout import innermost

try:  # the legacy VecNorm class (torchrl keeps it for old checkpoints)
    from torchrl.envs.transforms.transforms import VecNorm as _LegacyVecNorm
except ImportError:  # pragma: no cover - newer torchrl
    _LegacyVecNorm = None

_VECNORM_TYPES = tuple(t for t in (VecNormV2, _LegacyVecNorm) if isinstance(t, type))


def _transforms(transform: Transform) -> Iterator[Transform]:
    if isinstance(transform, Compose):
        for t in transform:
            yield from _transforms(t)
    else:
        yield transform


def iter_transforms(env: EnvBase) -> Iterator[Transform]:
    """Every transform of ``env``, its nested TransformedEnvs and started SerialEnv sub-envs."""
    while True:
        if isinstance(env, TransformedEnv):
            yield from _transforms(env.transform)
            env = env.base_env
            continue
        if isinstance(env, SerialEnv) and not env.is_closed:
            for sub in env._envs:
                yield from iter_transforms(sub)
        return


def vecnorms(env: EnvBase) -> list[Transform]:
    """The VecNorm transforms (``VecNormV2`` or the legacy ``VecNorm``) of ``env`` and its sub-envs."""
    return [t for t in iter_transforms(env) if isinstance(t, _VECNORM_TYPES)]


def _freeze_all(env: EnvBase) -> EnvBase:
    for t in vecnorms(env):
        t.freeze()
    return env


class _FrozenFactory:
    """Env factory whose product has every VecNorm frozen (picklable for ParallelEnv)."""

    def __init__(self, factory: Callable[..., EnvBase]) -> None:
        self.factory = factory

    def __call__(self, *args, **kwargs) -> EnvBase:
        return freeze_owned(self.factory(*args, **kwargs))


def _batched(env: EnvBase) -> BatchedEnvBase | None:
    env = innermost(env)
    return env if isinstance(env, BatchedEnvBase) else None


def freeze_owned(env: EnvBase) -> EnvBase:
    """Freeze an env the evaluator built itself, sub-env workers included."""
    batched = _batched(env)
    if batched is not None and batched.is_closed:
        batched.create_env_fn = [
            f if isinstance(f, _FrozenFactory) else _FrozenFactory(f) for f in batched.create_env_fn
        ]
    return _freeze_all(env)


@contextlib.contextmanager
def frozen_for_round(env: EnvBase) -> Iterator[None]:
    """Freeze every VecNorm reachable from ``env`` and restore each flag afterwards."""
    found = vecnorms(env)
    before = [t.frozen for t in found]
    for t in found:
        t.freeze()
    try:
        yield
    finally:
        for t, was in zip(found, before, strict=True):
            if not was:
                t.unfreeze()


def _count_is_zero(t: Transform) -> bool:
    if isinstance(t, VecNormV2):
        if not t.stateful:
            return False
        count = t._count
        if count is None:
            return True
        values = count.values(True, True) if hasattr(count, "values") else [count]
        return any(bool((v == 0).any()) for v in values)
    td = getattr(t, "_td", None)  # legacy VecNorm keeps "<key>_count" entries
    if td is None:
        return True
    return any(
        bool((v == 0).any()) for k, v in td.items(True, True) if (k if isinstance(k, str) else k[-1]).endswith("count")
    )


def check_stats(env: EnvBase) -> None:
    """Raise when a frozen VecNorm has no statistics: it would turn observations into NaN."""
    for t in vecnorms(env):
        if _count_is_zero(t):
            keys = getattr(t, "in_keys", "?")
            raise ValueError(
                f"VecNorm(in_keys={keys}) in the eval env has no statistics (count 0): "
                "pass the training env's VecNorm in weights_dict, e.g. "
                "weights_dict={'policy': policy, 'env.transform[0]': train_env.transform[0]}, "
                "or build the eval env without obs_norm."
            )
