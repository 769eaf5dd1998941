"""Native MuJoCo (``backend="native"``): every sub-env in one ``mujoco.batch.Batch``, stepped in C.

The default for :data:`NATIVE_TASKS`; the only simulator that applies MuJoCo physics
conditions (``body_mass_scale``, ``friction_scale``, ``gravity``). The env itself:
:class:`simeval.envs.mujoco.MujocoBatchEnv`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simeval.envs.simulators.base import EnvRequest
from simeval.envs.simulators.gym_ids import GymIdSimulator

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

# What it runs (simeval.envs.mujoco_tasks.TASKS).
NATIVE_TASKS = (
    "HalfCheetah-v5",
    "Hopper-v5",
    "Walker2d-v5",
    "Ant-v5",
    "InvertedPendulum-v5",
    "Humanoid-v5",
)


class NativeMujoco(GymIdSimulator):
    """gymnasium's MuJoCo v5 tasks on MuJoCo's batched C stepping (``num_threads``, ``groups``, ``render``)."""

    name = "native"
    title = "native MuJoCo"
    capabilities = frozenset({"observation", "action", "mujoco_physics"})

    def tasks(self) -> tuple[str, ...]:
        """:data:`NATIVE_TASKS`."""
        return NATIVE_TASKS

    def default_for(self, name: str) -> bool:
        """Its own tasks are built natively unless another backend is asked for."""
        return name in NATIVE_TASKS

    def base_env(self, request: EnvRequest) -> EnvBase:
        """A :class:`~simeval.envs.mujoco.MujocoBatchEnv` of ``request.num_envs`` sub-envs."""
        from simeval.envs.mujoco import MujocoBatchEnv

        options = request.options
        return MujocoBatchEnv(
            request.name,
            request.num_envs,
            device=request.device,
            num_threads=options.get("num_threads"),
            exact_contact_forces=bool(options.get("exact_contact_forces", False)),
            render_mode="rgb_array" if options.get("render") else None,
            groups=options.get("groups"),
        )
