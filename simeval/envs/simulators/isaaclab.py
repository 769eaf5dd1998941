"""Isaac Lab (``isaaclab:<task>``): Isaac Lab 3.0's own envs, kit-less or with Isaac Sim.

Conditions change a task through its config (``cfg`` overrides of event terms, commands,
...); MuJoCo physics settings are refused with that advice. The env itself:
:func:`simeval.envs.isaaclab.make_env`; with Isaac Sim installed, the app must start
first (``--init-fn simeval.hooks:isaaclab_app_launcher``).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from simeval.envs.simulators.base import EnvRequest, Simulator
from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import TransformedEnv


class IsaacLab(Simulator):
    """Isaac Lab tasks by their gymnasium ids, e.g. ``isaaclab:Simeval-Isaac-Cartpole``."""

    name = "isaaclab"
    title = "Isaac Lab"
    prefix = "isaaclab"
    capabilities = frozenset({"observation", "action", "task_config"})

    def check(self, name: str) -> None:
        """Isaac Lab installed and the task registered; with Isaac Sim installed, the installation only.

        Importing Isaac Lab's tasks in the launcher would come before the simulation
        app there, so the worker checks the task once its app runs.
        """
        from simeval.envs import isaaclab

        if importlib.util.find_spec("isaacsim") is not None:
            isaaclab.check_installed()
        else:
            isaaclab.check_task(name.split(":", 1)[1])

    def task_config(self, name: str) -> Any | None:
        """The task's config (Isaac Lab's ``parse_env_cfg``); None with Isaac Sim installed (its app starts later)."""
        if importlib.util.find_spec("isaacsim") is not None:
            return None
        from simeval.envs import isaaclab

        try:
            return isaaclab.env_cfg(name.split(":", 1)[1])
        except EnvError:
            return None

    def refusal(self, name: str, kind: str, settings: tuple[str, ...]) -> str | None:
        """MuJoCo physics settings: change the physics through an event term's config instead."""
        if kind != "mujoco_physics":
            return None
        return (
            f"{', '.join(settings)} set the native MuJoCo env's physics; on {name} change physics through "
            "the task's config: a cfg override of an event term (e.g. events.add_pole_mass)."
        )

    def make(self, request: EnvRequest) -> TransformedEnv:
        """:func:`simeval.envs.isaaclab.make_env` with the condition's ``cfg`` under ``request.cfg_overrides``."""
        from simeval.envs import isaaclab

        return isaaclab.make_env(
            request.name.split(":", 1)[1],
            num_envs=request.num_envs,
            device=request.device,
            seed=request.seed,
            max_steps=request.max_steps,
            obs_norm=request.obs_norm,
            cfg_overrides={**request.condition.cfg, **request.cfg_overrides},
            condition=request.condition,
        )
