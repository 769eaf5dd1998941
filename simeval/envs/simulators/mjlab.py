"""mjlab (``mjlab:<task>``): mjlab 1.6's manager-based tasks on MuJoCo Warp (its own venv).

Conditions change a task through its config (``cfg`` overrides of commands, event terms,
...); MuJoCo physics settings are refused with that advice. The env itself:
:func:`simeval.envs.mjlab.make_env`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simeval.envs.simulators.base import EnvRequest, Simulator
from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import TransformedEnv


class Mjlab(Simulator):
    """mjlab tasks by their registry ids, e.g. ``mjlab:Mjlab-Velocity-Flat-Unitree-Go1``."""

    name = "mjlab"
    title = "mjlab"
    prefix = "mjlab"
    capabilities = frozenset({"observation", "action", "task_config"})

    def check(self, name: str) -> None:
        """mjlab installed and the task one it can build here (mjlab ships no motion clips for tracking tasks)."""
        from simeval.envs import mjlab

        mjlab.check_task(name.split(":", 1)[1])

    def task_config(self, name: str) -> Any | None:
        """The task's play config (:func:`simeval.envs.mjlab.env_cfg`); None where mjlab cannot build it here."""
        from simeval.envs import mjlab

        try:
            return mjlab.env_cfg(name.split(":", 1)[1])
        except EnvError:
            return None

    def refusal(self, name: str, kind: str, settings: tuple[str, ...]) -> str | None:
        """MuJoCo physics settings: change the physics through an event term's config instead."""
        if kind != "mujoco_physics":
            return None
        return (
            f"{', '.join(settings)} set the native MuJoCo env's physics; on {name} change physics through "
            "the task's config: a cfg override of an event term (e.g. events.foot_friction_slide)."
        )

    def make(self, request: EnvRequest) -> TransformedEnv:
        """:func:`simeval.envs.mjlab.make_env` with the condition's ``cfg`` under ``request.cfg_overrides``."""
        from simeval.envs import mjlab

        return mjlab.make_env(
            request.name.split(":", 1)[1],
            num_envs=request.num_envs,
            device=request.device,
            seed=request.seed,
            max_steps=request.max_steps,
            obs_norm=request.obs_norm,
            cfg_overrides={**request.condition.cfg, **request.cfg_overrides},
            condition=request.condition,
        )
