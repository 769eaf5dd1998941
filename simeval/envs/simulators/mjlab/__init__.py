"""mjlab (``mjlab:<task>``): mjlab 1.6's manager-based tasks on MuJoCo Warp (its own venv).

Conditions change a task through its config (``cfg`` overrides of commands, event terms,
...); model physics settings are refused with that advice. The env itself:
:func:`simeval.envs.simulators.mjlab.env.make_env`.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from simeval.envs.simulators.task_config import TaskConfigSimulator
from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase


class Mjlab(TaskConfigSimulator):
    """mjlab tasks by their registry ids, e.g. ``mjlab:Mjlab-Velocity-Flat-Unitree-Go1``."""

    name = "mjlab"
    title = "mjlab"
    prefix = "mjlab"
    physics_example = "events.foot_friction_slide"

    def env_module(self) -> ModuleType:
        """:mod:`simeval.envs.simulators.mjlab.env` (light: mjlab itself is imported when it builds an env)."""
        from simeval.envs.simulators.mjlab import env as mjlab

        return mjlab

    def check(self, name: str) -> None:
        """mjlab installed and the task one it can build here (mjlab ships no motion clips for tracking tasks)."""
        self.env_module().check_task(self.task(name))

    def task_config(self, name: str) -> Any | None:
        """The task's play config (:func:`.env.env_cfg`); None where mjlab cannot build it here."""
        try:
            return self.env_module().env_cfg(self.task(name))
        except EnvError:
            return None

    def owns(self, base: EnvBase) -> bool:
        """torchrl's MJLabWrapper (simeval's log wrapper or a user's own; loaded once one was built)."""
        wrappers = sys.modules.get("torchrl.envs.libs.mjlab")
        return wrappers is not None and isinstance(base, wrappers.MJLabWrapper)
