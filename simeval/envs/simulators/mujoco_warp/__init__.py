"""MuJoCo Warp (``backend="warp"``): every sub-env a world of MuJoCo Warp, tensors on its device.

:data:`WARP_TASKS` only (the tasks that observe and reward qpos and qvel); float32
physics; camera observations ray-traced by MuJoCo Warp's batch renderer (``cameras``), no
``render()`` frames (``pip install simeval[warp]``). The env itself:
:class:`simeval.envs.simulators.mujoco_warp.env.WarpBatchEnv`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from simeval.envs.simulators.base import EnvRequest, ReplayPromise, TensorRound
from simeval.envs.simulators.gym_ids import GymIdSimulator

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

# Not Humanoid (MuJoCo Warp has no PGS solver) nor Ant (mujoco_warp 4.0.0 orients a steep capsule's friction
# pyramid on the floor unlike MuJoCo, so Ant's feet slide differently: an O(1) difference, not float32 rounding).
WARP_TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "InvertedPendulum-v5")


class MujocoWarp(GymIdSimulator):
    """gymnasium's MuJoCo v5 tasks as MuJoCo Warp worlds on a GPU (or Warp's CPU device)."""

    name = "warp"
    title = "MuJoCo Warp"
    cameras = True

    def tasks(self) -> tuple[str, ...]:
        """:data:`WARP_TASKS`."""
        return WARP_TASKS

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """The same return to the bit on Warp's CPU device (checked on HalfCheetah-v5); on a GPU its kernels
        accumulate with atomics, in no fixed order (docs/benchmarks.md): the same to float32 rounding only."""
        if device == "cpu":
            return ReplayPromise(True, "MuJoCo Warp: the same return to the bit on Warp's CPU device")
        return ReplayPromise(
            False,
            f"MuJoCo Warp: on {device} its kernels accumulate with atomics in no fixed order, so a replay agrees to "
            "float32 rounding (amplified over an episode), not to the bit",
        )

    def base_env(self, request: EnvRequest) -> EnvBase:
        """A :class:`.env.WarpBatchEnv` of ``request.num_envs`` worlds on ``request.device``."""
        if request.options.get("render"):
            raise ValueError("backend='warp' does not render: use backend='native' for frames.")
        try:
            import mujoco_warp  # noqa: F401
            import warp  # noqa: F401
        except ImportError as err:
            raise ImportError(
                f"backend='warp' needs MuJoCo Warp ({err.name} is missing): pip install simeval[warp]"
            ) from None
        from simeval.envs.simulators.mujoco_warp.env import WarpBatchEnv

        options = request.options
        return WarpBatchEnv(
            request.name,
            request.num_envs,
            device=request.device,
            cameras=tuple(options.get("cameras") or ()),
            image_size=options.get("image_size") or (64, 64),
        )

    def owns(self, base: EnvBase) -> bool:
        """A WarpBatchEnv (its module is loaded once one was built)."""
        env_module = sys.modules.get(f"{__name__}.env")
        return env_module is not None and type(base) is env_module.WarpBatchEnv

    def round_source(self, env: EnvBase) -> TensorRound | None:
        """The tensor engine, resets drawn ahead on the device (:mod:`.steps`), under make_env's layout and without
        cameras (the engine reads ``observation`` only); else None."""
        from simeval.envs.simulators.mujoco_warp import steps

        return steps.round_source(env)
