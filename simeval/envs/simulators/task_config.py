"""What the simulators whose tasks are changed through their config share (Isaac Lab, mjlab).

Their ids are ``"<prefix>:<task>"``; a condition's ``cfg`` overrides their task's env
config; Model physics settings are refused with the advice to change physics through
an event term of that config instead. Each builds its env with its own module's
``make_env(task, ...)``.
"""

from __future__ import annotations

from abc import abstractmethod
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

from simeval.envs.simulators.base import EnvRequest, Simulator

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv


class TaskConfigSimulator(Simulator):
    """A simulator of ``"<prefix>:<task>"`` ids whose conditions go through the task's config.

    Attributes:
        physics_example: an event term of its tasks' configs that changes physics, for the
            refusal of Model physics settings.
    """

    capabilities = frozenset({"observation", "action", "task_config"})
    physics_example: ClassVar[str]

    @abstractmethod
    def env_module(self) -> ModuleType:
        """The module whose ``make_env(task, ...)`` builds its envs (imported here, not before)."""

    def task(self, name: str) -> str:
        """The task of the id ``name`` (what follows ``"<prefix>:"``)."""
        return name.split(":", 1)[1]

    def refusal(self, name: str, kind: str, settings: tuple[str, ...]) -> str | None:
        """Model physics settings: change the physics through an event term's config instead."""
        if kind != "physics":
            return None
        return (
            f"{', '.join(settings)} set model physics directly; on {name} change physics through "
            f"the task's config: a cfg override of an event term (e.g. {self.physics_example})."
        )

    def episode_length(self, env: EnvBase) -> int | None:
        """The task's ``max_episode_length`` (its env resets sub-envs itself at that step)."""
        from simeval.envs.layout import innermost, resets_itself

        if not resets_itself(env):
            return None
        task_env = innermost(env).__dict__.get("_env")  # the wrapped env; the instance dict: no forwarding to sub-envs
        limit = getattr(getattr(task_env, "unwrapped", None), "max_episode_length", None)
        return int(limit) if isinstance(limit, (int, float)) and limit > 0 else None

    def make(self, request: EnvRequest) -> TransformedEnv:
        """The module's ``make_env`` with the condition's ``cfg`` under ``request.cfg_overrides``."""
        return self.env_module().make_env(
            self.task(request.name),
            num_envs=request.num_envs,
            device=request.device,
            seed=request.seed,
            max_steps=request.max_steps,
            obs_norm=request.obs_norm,
            cfg_overrides={**request.condition.cfg, **request.cfg_overrides},
            condition=request.condition,
        )
