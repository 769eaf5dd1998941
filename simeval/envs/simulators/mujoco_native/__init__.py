"""Native MuJoCo (``backend="native"``): every sub-env in one ``mujoco.batch.Batch``, stepped in C.

The default for :data:`NATIVE_TASKS`; the only simulator that applies model physics
conditions (``body_mass_scale``, ``friction_scale``, ``gravity``, a ``push``), the reset
noise's scale (``init_noise_scale``) and the observed cameras' pose and lights
(``camera_shift``, ``camera_tilt``, ``light_intensity``, ``light_direction``). The env itself:
:class:`simeval.envs.simulators.mujoco_native.env.MujocoBatchEnv`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from simeval.envs.simulators.base import DirectRound, EnvRequest, ReplayPromise
from simeval.envs.simulators.gym_ids import GymIdSimulator
from simeval.envs.simulators.mujoco_native.gl import headless_gl
from simeval.envs.simulators.mujoco_native.terms import TERMS as MUJOCO_TERMS

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    from torchrl.envs import EnvBase

    from simeval.conditions import Condition

# What it runs (simeval.envs.simulators.mujoco_native.tasks.TASKS).
NATIVE_TASKS = (
    "HalfCheetah-v5",
    "Hopper-v5",
    "Walker2d-v5",
    "Ant-v5",
    "InvertedPendulum-v5",
    "Humanoid-v5",
)
PLANAR = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "InvertedPendulum-v5")
"""The tasks whose root moves along x only (no free joint): a push there is forward or backward."""


class NativeMujoco(GymIdSimulator):
    """gymnasium's MuJoCo v5 tasks on MuJoCo's batched C stepping (``num_threads``, ``groups``, ``render``)."""

    name = "native"
    title = "native MuJoCo"
    render_env = {"MUJOCO_GL": "egl"}  # headless; read when mujoco loads (headless_env picks EGL, else OSMesa)
    settings_env = ("MUJOCO_GL", "MUJOCO_EGL_DEVICE_ID")
    capabilities = frozenset({"observation", "action", "physics", "initial_state", "camera"})
    terms = MUJOCO_TERMS
    cameras = True

    def tasks(self) -> tuple[str, ...]:
        """:data:`NATIVE_TASKS`."""
        return NATIVE_TASKS

    def headless_env(self) -> dict[str, str]:
        """``MUJOCO_GL``: the user's, else EGL, else OSMesa (:mod:`~simeval.envs.simulators.mujoco_native.gl`)."""
        return headless_gl()

    def default_for(self, name: str) -> bool:
        """Its own tasks are built natively unless another backend is asked for."""
        return name in NATIVE_TASKS

    def condition_problem(self, name: str, condition: Condition) -> str | None:
        """``push_direction`` on a task whose root moves along x only (:data:`PLANAR`)."""
        if "push_direction" in condition.values and name in PLANAR:
            return (
                f"push_direction turns a push in the horizontal plane; {name} moves along x only: "
                "push it forward (push > 0) or backward (push < 0)."
            )
        return None

    def base_env(self, request: EnvRequest) -> EnvBase:
        """A :class:`~simeval.envs.simulators.mujoco_native.env.MujocoBatchEnv` of ``request.num_envs`` sub-envs;
        a condition that changes the camera images of an env without cameras is a one-line ValueError."""
        from simeval.envs.simulators.mujoco_native.env import MujocoBatchEnv

        options = request.options
        seen = request.condition.settings_of("camera")
        if seen and not options.get("cameras"):
            raise ValueError(
                f"{', '.join(seen)} change the camera images, and {request.name} is built without cameras: "
                "give it cameras (cameras=['track'], --cameras track)."
            )
        return MujocoBatchEnv(
            request.name,
            request.num_envs,
            device=request.device,
            num_threads=options.get("num_threads"),
            exact_contact_forces=bool(options.get("exact_contact_forces", False)),
            render_mode="rgb_array" if options.get("render") else None,
            groups=options.get("groups"),
            cameras=tuple(options.get("cameras") or ()),
            image_size=options.get("image_size") or (64, 64),
        )

    def term_setter(self, base: EnvBase) -> Callable[[np.ndarray, dict[str, np.ndarray]], None]:
        """``MujocoBatchEnv.set_terms``: each of :attr:`terms` written into the sub-envs' own models."""
        return base.set_terms

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """The same return to the bit with a CPU policy: MuJoCo steps every sub-env in C on the CPU, each sub-env
        resets from its own generator, and the replay's policy sees the recorded batch (tests/test_replay.py)."""
        if device == "cpu":
            return ReplayPromise(
                True,
                "native MuJoCo: the same return to the bit (physics in C on the CPU, each sub-env resetting from "
                "its own generator, the policy on the CPU over the recorded batch)",
            )
        return ReplayPromise(
            False,
            f"native MuJoCo: the physics repeats to the bit, but a policy on {device} may round differently from "
            "run to run (its GPU kernels' reduction order), so the return is not promised to the bit",
        )

    def owns(self, base: EnvBase) -> bool:
        """A MujocoBatchEnv (its module is loaded once one was built)."""
        env_module = sys.modules.get(f"{__name__}.env")
        return env_module is not None and type(base) is env_module.MujocoBatchEnv

    def round_source(self, env: EnvBase) -> DirectRound | None:
        """The direct engine (groups overlapped) on a CPU MujocoBatchEnv without cameras under make_env's layout,
        else None."""
        from simeval.envs.layout import plain_transforms, unwrap

        base, transforms = unwrap(env)
        if (base.device is not None and base.device.type != "cpu") or base.cameras:
            return None
        found = plain_transforms(transforms)
        return None if found is None else DirectRound(base, found)
