"""What a worker needs to run evaluation rounds, as plain picklable data.

``EvalSettings`` is fixed for an evaluator's life and travels once to the
worker (thread, child process or Ray actor); ``RoundOverrides`` travel with a
single request (``RayEvalWorker.submit`` sets a round's ``max_steps`` and
exploration; ``Evaluator.evaluate(seed=...)`` a round's seed). Nothing here imports torch.
"""

from __future__ import annotations

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


def as_info_keys(keys: Any) -> tuple[tuple[str, ...], ...]:
    """``info_keys`` as a tuple of nested keys relative to "next".

    A string is one key; otherwise a sequence of keys, each a string or a tuple
    of strings (``["success", ("agents", "success")]``). A leading ``"next"`` is
    dropped: the keys are read from the step's "next" entry anyway.
    """
    if keys is None:
        return ()
    if isinstance(keys, str):
        keys = [keys]
    if not isinstance(keys, (list, tuple)):
        raise ValueError(f"info_keys must be a key or a list of keys, got {keys!r}.")
    out = []
    for key in keys:
        key = as_key(key)
        if len(key) > 1 and key[0] == "next":
            key = key[1:]
        if key not in out:
            out.append(key)
    return tuple(out)


def exploration_name(value: Any) -> str:
    """An ``ExplorationType``, its name or its value (``"mode"``) as the member's name."""
    if value is None:
        return "DETERMINISTIC"
    if isinstance(value, str):
        from torchrl.envs.utils import ExplorationType

        member = ExplorationType(value) if value.islower() else ExplorationType[value]
        return member.name
    return value.name


@dataclass
class EvalSettings:
    """Settings shared by every backend; the rollout core reads only this.

    ``num_trajectories=None`` means one episode per sub-env (``RayEvalWorker``);
    ``record_frames`` renders sub-env 0's first episode of each round when the
    env renders (``render_mode == "rgb_array"``); ``results_path`` makes the
    worker append each result there, with ``results_context`` added to the line.
    ``info_keys`` are nested keys relative to "next" (``("success",)``) read at
    each episode's last step (see ``simeval.worker.episode_ends``).
    """

    num_trajectories: int | None = 10
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
    record_frames: bool = False
    seed: int | None = None
    log_prefix: str = "eval"
    results_path: str | None = None
    results_context: dict = field(default_factory=dict)
    info_keys: tuple[tuple[str, ...], ...] = ()


@dataclass
class RoundOverrides:
    """Per-request changes to the settings, restored after the round.

    ``num_trajectories`` replaces the settings' episode count for this round
    (``Evaluator(time_budget_s=...)`` sets it from the measured rate of earlier rounds).
    ``seed`` replaces the settings' seed for this round alone (``evaluate(seed=...)``,
    ``trigger_eval(seed=...)``): every number that depends on the seed (the envs' seeding,
    a shard's sub-env seed, ``episode_seeds``, a condition's per-episode draws, torch's
    generator in a worker process) is the round's, so the round gives the episodes of an
    evaluator built with ``seed=`` that value; None: the settings' own.
    """

    max_steps: int | None = None
    exploration_type: str | None = None
    num_trajectories: int | None = None
    seed: int | None = None
