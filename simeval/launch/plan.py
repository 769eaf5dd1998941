"""What the launcher evaluates: :class:`EvalPlan`, decided from the config and a checkpoint.

A plan is the checkpoint's env, its policy factory and whether VecNorm
statistics are used; :mod:`simeval.launch.build` turns it into an Evaluator.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simeval.checkpoints import CheckpointError
from simeval.envs.simulators import env_id_forms
from simeval.factories import is_registered, refusal, weights_bound
from simeval.launch.config import LaunchConfig
from simeval.policies import DEFAULT_FACTORY

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint


@dataclass(frozen=True)
class EvalPlan:
    """The env name, whether VecNorm statistics are used, and the policy factory and its kwargs.

    ``trusted``: the factory was named on the command line or in a profile (any importable one), not read
    from a checkpoint (registered ones only). ``max_policy_bytes``: where ``policy_kwargs`` came from a
    checkpoint, the most bytes the policy they build may hold (see :func:`simeval.factories.weights_bound`).
    """

    env: str
    obs_norm: bool
    policy_factory: str
    policy_kwargs: dict = field(default_factory=dict, hash=False, compare=True)
    trusted: bool = field(default=True, compare=False)
    max_policy_bytes: int | None = field(default=None, compare=False)

    def describe(self) -> str:
        """``env with factory(kwargs)``, for messages."""
        return f"{self.env} with {self.policy_factory}({self.policy_kwargs or ''})"


_WARNED: set[tuple[str, str]] = set()
_PLAY = re.compile(r"-Play(?=-v\d+$)")  # Isaac Lab's evaluation variant of a task: Isaac-...-Play-v0


def same_task(a: str, b: str) -> bool:
    """Whether env ids ``a`` and ``b`` name one task: equal, or one the other's ``-Play`` variant (Isaac Lab)."""
    return _PLAY.sub("", a) == _PLAY.sub("", b)


def _warn_other_task(trained: str, asked: str, path: str) -> None:
    """One warning per (trained, asked) pair of a run when ``--env`` names another task than the checkpoint's."""
    if same_task(trained, asked) or (trained, asked) in _WARNED:
        return
    _WARNED.add((trained, asked))
    print(
        f"warning: {path} was trained on {trained}; evaluating it on --env {asked} as asked "
        "(its numbers are about another task).",
        file=sys.stderr,
        flush=True,
    )


def plan_for(cfg: LaunchConfig, explicit: set[str], ck: Checkpoint | None = None) -> EvalPlan:
    """The plan for checkpoint ``ck`` (or, for --serve, for the config alone)."""
    env = cfg.env
    if ck is not None and not ck.env and ck.meta.get("format", "simeval") != "simeval" and "env" not in explicit:
        raise CheckpointError(
            f"{ck.path}: a {ck.meta['format']} checkpoint does not record its env: name it with --env "
            f"({env_id_forms()})."
        )
    if ck is not None and ck.env:
        if "env" in explicit and ck.env != cfg.env:
            _warn_other_task(ck.env, cfg.env, ck.path)
        else:
            env = ck.env
    factory = cfg.policy or (ck.policy_factory if ck is not None else None) or DEFAULT_FACTORY
    from_file = ck is not None and not cfg.policy and bool(ck.policy_factory)
    if from_file and not is_registered(factory):
        raise CheckpointError(refusal(ck.path, factory))
    kwargs_from_file = not cfg.policy_kwargs and ck is not None and factory == ck.policy_factory
    kwargs = cfg.policy_kwargs or (ck.policy_kwargs if kwargs_from_file else {})
    obs_norm = cfg.obs_norm and (ck is None or ck.obs_norm is not None)
    bound = weights_bound(ck.policy) if kwargs_from_file and kwargs else None
    return EvalPlan(env, obs_norm, factory, dict(kwargs), trusted=not from_file, max_policy_bytes=bound)
