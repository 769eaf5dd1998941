"""Isaac Lab (``isaaclab:<task>``): Isaac Lab 3.0's own envs, kit-less or with Isaac Sim.

Conditions change a task through its config (``cfg`` overrides of event terms, commands,
...); model physics settings are refused with that advice. The env itself:
:func:`simeval.envs.simulators.isaaclab.env.make_env`; with Isaac Sim installed, the app must start
first (``--init-fn simeval.envs.simulators.isaaclab.app:app_launcher``).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from simeval.envs.simulators.base import ReplayPromise
from simeval.envs.simulators.task_config import TaskConfigSimulator
from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

    from simeval.envs.simulators.base import TensorRound


class IsaacLab(TaskConfigSimulator):
    """Isaac Lab tasks by their gymnasium ids, e.g. ``isaaclab:Simeval-Isaac-Cartpole``."""

    name = "isaaclab"
    title = "Isaac Lab"
    prefix = "isaaclab"
    physics_example = "events.add_pole_mass"
    init_fn = f"{__name__}.app:app_launcher"

    def env_module(self) -> ModuleType:
        """:mod:`simeval.envs.simulators.isaaclab.env` (light: Isaac Lab itself is imported when it builds an env)."""
        from simeval.envs.simulators.isaaclab import env as isaaclab

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

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """Its sub-envs share one reset generator, drawn in the order episodes end: a replay re-runs the whole
        round. Not promised to the bit: on the CPU the offline cartpole came back to the bit (an episode after a
        sub-env's first included); Isaac Lab's documentation says PhysX repeats rigid bodies and articulations run
        to run on the same GPU and Isaac Sim version (not cloth or soft bodies), which simeval has not checked."""
        where = (
            "on the CPU the offline cartpole comes back to the bit"
            if device == "cpu"
            else f"on {device} PhysX repeats rigid bodies and articulations on the same GPU model and Isaac Sim "
            "version (Isaac Lab's word; not checked by simeval), not cloth or soft bodies"
        )
        return ReplayPromise(
            False,
            f"Isaac Lab: the whole round re-run (its sub-envs share one reset generator, drawn in the order episodes "
            f"end); not promised to the bit: {where}",
        )

    def owns(self, base: EnvBase) -> bool:
        """torchrl's IsaacLabWrapper (simeval's or a user's own; its module is loaded once one was built)."""
        wrappers = sys.modules.get("torchrl.envs.libs.isaac_lab")
        return wrappers is not None and isinstance(base, wrappers.IsaacLabWrapper)

    def round_source(self, env: EnvBase) -> TensorRound | None:
        """The tensor engine on Isaac Lab's own ``step`` (:mod:`.steps`), under make_env's layout; else None."""
        from simeval.envs.simulators.isaaclab import steps

        return steps.round_source(env)
