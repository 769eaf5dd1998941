"""What a round changes on a worker's env, policy and collector, and restores afterwards.

A round runs the policy in eval mode, caps episodes at ``max_steps`` through
the env's step counters and may use another exploration type
(``RayEvalWorker.submit(deterministic=False)``); each is undone when the round
ends, so a caller's objects are left as they were found. (VecNorm's frozen
flag is handled the same way by ``vecnorm.frozen_for_round``.)
"""

from __future__ import annotations

import contextlib
from typing import Any

from torch import nn

from simeval.worker import vecnorm


def step_counters(env) -> list:
    from torchrl.envs.transforms import StepCounter

    return [t for t in vecnorm.iter_transforms(env) if isinstance(t, StepCounter)]


@contextlib.contextmanager
def eval_mode(policy) -> Any:
    was_training = policy.training if isinstance(policy, nn.Module) else None
    if was_training:
        policy.eval()
    try:
        yield
    finally:
        if was_training:
            policy.train()


@contextlib.contextmanager
def max_steps_for_round(env, max_steps: int | None):
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
def exploration_for_round(collector, name: str | None):
    before = collector.exploration_type
    if name is not None:
        collector.exploration_type = exploration(name)
    try:
        yield
    finally:
        collector.exploration_type = before


def exploration(name: Any):
    """The ``ExplorationType`` member called ``name`` (a member passes through)."""
    from torchrl.envs.utils import ExplorationType

    return ExplorationType[name] if isinstance(name, str) else name
