"""What a round changes on a worker's env, policy and collector, and restores afterwards.

A round runs the policy in eval mode, caps episodes at ``max_steps`` through
the env's step counters and may use another exploration type
(``RayEvalWorker.submit(deterministic=False)``); each is undone when the round
ends, so a caller's objects are left as they were found. (VecNorm's frozen
flag is handled the same way by ``vecnorm.frozen_for_round``.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch import nn

from simeval.worker import vecnorm

if TYPE_CHECKING:
    from torchrl.collectors import BaseCollector
    from torchrl.envs import EnvBase
    from torchrl.envs.transforms import StepCounter
    from torchrl.envs.utils import ExplorationType


def step_counters(env: EnvBase) -> list[StepCounter]:
    """The ``StepCounter`` transforms around ``env`` (and its nested and serial sub-envs)."""
    from torchrl.envs.transforms import StepCounter

    return [t for t in vecnorm.iter_transforms(env) if isinstance(t, StepCounter)]


@contextlib.contextmanager
def eval_mode(policy: Any) -> Iterator[None]:
    """Run the block with ``policy`` (an ``nn.Module``) in eval mode, back in training mode after if it was."""
    was_training = policy.training if isinstance(policy, nn.Module) else None
    if was_training:
        policy.eval()
    try:
        yield
    finally:
        if was_training:
            policy.train()


@contextlib.contextmanager
def max_steps_for_round(env: EnvBase, max_steps: int | None) -> Iterator[None]:
    """Honour ``max_steps`` with the env's step counters (their caps restored afterwards)."""
    counters = step_counters(env) if max_steps is not None else []
    before = [c.max_steps for c in counters]
    for c in counters:
        c.max_steps = max_steps if c.max_steps is None else min(c.max_steps, max_steps)
    try:
        yield
    finally:
        for c, b in zip(counters, before, strict=True):
            c.max_steps = b


@contextlib.contextmanager
def exploration_for_round(collector: BaseCollector, name: str | None) -> Iterator[None]:
    """Run the block with the collector's exploration type set to ``name`` (None: unchanged), then restore it."""
    before = collector.exploration_type
    if name is not None:
        collector.exploration_type = exploration(name)
    try:
        yield
    finally:
        collector.exploration_type = before


def exploration(name: Any) -> ExplorationType:
    """The ``ExplorationType`` member called ``name`` (a member passes through)."""
    from torchrl.envs.utils import ExplorationType

    return ExplorationType[name] if isinstance(name, str) else name
