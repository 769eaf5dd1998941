"""What the launcher evaluates: :class:`EvalPlan`, decided from the config and a checkpoint.

A plan is the checkpoint's env, its policy factory and whether VecNorm
statistics are used; :mod:`simeval.launch.build` turns it into an Evaluator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simeval.launch.config import LaunchConfig

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint


@dataclass(frozen=True)
class EvalPlan:
    """The env name, whether VecNorm statistics are used, and the policy factory and its kwargs."""

    env: str
    obs_norm: bool
    policy_factory: str
    policy_kwargs: dict = field(default_factory=dict, hash=False, compare=True)

    def describe(self) -> str:
        """``env with factory(kwargs)``, for messages."""
        return f"{self.env} with {self.policy_factory}({self.policy_kwargs or ''})"


def plan_for(cfg: LaunchConfig, explicit: set[str], ck: Checkpoint | None = None) -> EvalPlan:
    """The plan for checkpoint ``ck`` (or, for --serve, for the config alone)."""
    from simeval.checkpoints import CheckpointError
    from simeval.policies import DEFAULT_FACTORY

    env = cfg.env
    if ck is not None and not ck.env and ck.meta.get("format", "simeval") != "simeval" and "env" not in explicit:
        raise CheckpointError(
            f"{ck.path}: a {ck.meta['format']} checkpoint does not record its env: name it with --env "
            "(e.g. --env isaaclab:Simeval-Isaac-Cartpole-Direct or --env mjlab:Mjlab-Velocity-Flat-Unitree-Go1)."
        )
    if ck is not None and ck.env:
        if "env" in explicit and ck.env != cfg.env:
            raise CheckpointError(f"{ck.path}: trained on {ck.env}, but --env is {cfg.env}.")
        env = ck.env
    factory = cfg.policy or (ck.policy_factory if ck is not None else None) or DEFAULT_FACTORY
    kwargs = cfg.policy_kwargs or (ck.policy_kwargs if ck is not None and factory == ck.policy_factory else {})
    obs_norm = cfg.obs_norm and (ck is None or ck.obs_norm is not None)
    return EvalPlan(env, obs_norm, factory, dict(kwargs))
