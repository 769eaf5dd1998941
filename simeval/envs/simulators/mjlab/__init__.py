"""mjlab (``mjlab:<task>``): mjlab 1.6's manager-based tasks on MuJoCo Warp (its own venv).

Conditions change a task through its config (``cfg`` overrides of commands, event terms,
...); model physics settings are refused with that advice. ``cameras`` are mjlab's camera
sensors on the scene's named cameras. The env itself:
:func:`simeval.envs.simulators.mjlab.env.make_env`.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from simeval.envs.simulators.base import ReplayPromise
from simeval.envs.simulators.task_config import TaskConfigSimulator
from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv

    from simeval.envs.simulators.base import EnvRequest


class Mjlab(TaskConfigSimulator):
    """mjlab tasks by their registry ids, e.g. ``mjlab:Mjlab-Velocity-Flat-Unitree-Go1``."""

    name = "mjlab"
    title = "mjlab"
    prefix = "mjlab"
    physics_example = "events.foot_friction_slide"
    cameras = True

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

    def make(self, request: EnvRequest) -> TransformedEnv:
        """:func:`.env.make_env`, with ``cameras``, ``image_size`` and ``frame_stack`` where cameras are asked for."""
        options = request.options
        if not options.get("cameras"):
            return super().make(request)
        return self.env_module().make_env(
            self.task(request.name),
            num_envs=request.num_envs,
            device=request.device,
            seed=request.seed,
            max_steps=request.max_steps,
            obs_norm=request.obs_norm,
            cfg_overrides={**request.condition.cfg, **request.cfg_overrides},
            condition=request.condition,
            cameras=tuple(options["cameras"]),
            image_size=options.get("image_size") or (64, 64),
            frame_stack=int(options.get("frame_stack") or 1),
        )

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """Its sub-envs share one reset generator, drawn in the order episodes end: a replay re-runs the whole
        round. The same return to the bit on MuJoCo Warp's CPU device (checked on Mjlab-Velocity-Flat-Unitree-Go1,
        an episode after a sub-env's first included); on a GPU, atomics: not to the bit."""
        if device == "cpu":
            return ReplayPromise(
                True,
                "mjlab: the same return to the bit on the CPU device, the whole round re-run (its sub-envs share one "
                "reset generator, drawn in the order episodes end)",
            )
        return ReplayPromise(
            False,
            f"mjlab: the whole round re-run (one reset generator shared by the sub-envs), but on {device} its "
            "physics kernels accumulate with atomics in no fixed order: not promised to the bit",
        )

    def owns(self, base: EnvBase) -> bool:
        """torchrl's MJLabWrapper (simeval's log wrapper or a user's own; loaded once one was built)."""
        wrappers = sys.modules.get("torchrl.envs.libs.mjlab")
        return wrappers is not None and isinstance(base, wrappers.MJLabWrapper)
