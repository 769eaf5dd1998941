"""Isaac Lab (``isaaclab:<task>``): Isaac Lab 3.0's own envs, kit-less or with Isaac Sim.

Conditions change a task through its config (``cfg`` overrides of event terms, commands,
...); MuJoCo physics settings are refused with that advice. The env itself:
:func:`simeval.envs.isaaclab.make_env`; with Isaac Sim installed, the app must start
first (``--init-fn simeval.hooks:isaaclab_app_launcher``).
"""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

from simeval.envs.simulators.task_config import TaskConfigSimulator
from simeval.errors import EnvError


class IsaacLab(TaskConfigSimulator):
    """Isaac Lab tasks by their gymnasium ids, e.g. ``isaaclab:Simeval-Isaac-Cartpole``."""

    name = "isaaclab"
    title = "Isaac Lab"
    prefix = "isaaclab"
    physics_example = "events.add_pole_mass"

    def env_module(self) -> ModuleType:
        """:mod:`simeval.envs.isaaclab` (light: Isaac Lab itself is imported when it builds an env)."""
        from simeval.envs import isaaclab

        return isaaclab

    def check(self, name: str) -> None:
        """Isaac Lab installed and the task registered; with Isaac Sim installed, the installation only.

        Importing Isaac Lab's tasks in the launcher would come before the simulation
        app there, so the worker checks the task once its app runs.
        """
        if importlib.util.find_spec("isaacsim") is not None:
            self.env_module().check_installed()
        else:
            self.env_module().check_task(self.task(name))

    def task_config(self, name: str) -> Any | None:
        """The task's config (Isaac Lab's ``parse_env_cfg``); None with Isaac Sim installed (its app starts later)."""
        if importlib.util.find_spec("isaacsim") is not None:
            return None
        try:
            return self.env_module().env_cfg(self.task(name))
        except EnvError:
            return None
