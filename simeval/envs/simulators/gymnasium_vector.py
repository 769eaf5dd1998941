"""gymnasium's own envs (``backend="gymnasium"``): any registered id in a SyncVectorEnv.

Autoreset is disabled, so torchrl drives partial resets itself (``_reset`` masks) and no
worker processes are spawned. The default for an id no other simulator of gymnasium ids
claims (Swimmer-v5, Reacher-v5, Pendulum-v1, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simeval.envs.simulators.base import EnvRequest, ReplayPromise
from simeval.envs.simulators.gym_ids import GymIdSimulator
from simeval.envs.simulators.mujoco_native import NATIVE_TASKS
from simeval.envs.simulators.mujoco_native.gl import headless_gl

if TYPE_CHECKING:
    from torchrl.envs import EnvBase


class GymnasiumVector(GymIdSimulator):
    """Any gymnasium id, stepped by gymnasium in one process (``render`` gives sub-env 0's frames)."""

    name = "gymnasium"
    title = "gymnasium"
    render_env = {"MUJOCO_GL": "egl"}  # headless; read when mujoco loads (headless_env picks EGL, else OSMesa)
    settings_env = ("MUJOCO_GL", "MUJOCO_EGL_DEVICE_ID")
    fallback = True

    def headless_env(self) -> dict[str, str]:
        """``MUJOCO_GL``: the user's, else EGL, else OSMesa (:mod:`~simeval.envs.simulators.mujoco_native.gl`)."""
        return headless_gl()

    def default_for(self, name: str) -> bool:
        """Every id: the fallback, where no other simulator of gymnasium ids claims it."""
        return True

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """The same return to the bit for gymnasium's MuJoCo v5 tasks on the CPU (each sub-env resets from its own
        ``np_random``, seeded ``seed + i``; checked on HalfCheetah-v5); any other id: no promise."""
        if name in NATIVE_TASKS and device == "cpu":
            return ReplayPromise(
                True,
                "gymnasium: the same return to the bit for its MuJoCo tasks on the CPU (each sub-env resets from its "
                "own generator, seeded seed + i)",
            )
        why = f"a policy on {device} may round differently from run to run" if name in NATIVE_TASKS else (
            f"{name} may draw from randomness of its own besides its seeded generator"
        )
        return ReplayPromise(False, f"gymnasium: no promise to the bit ({why}); the replay says whether it came back")

    def base_env(self, request: EnvRequest) -> EnvBase:
        """``request.num_envs`` gymnasium sub-envs in a SyncVectorEnv under torchrl's GymWrapper."""
        import gymnasium as gym
        from torchrl.envs.libs.gym import GymWrapper

        name = request.name
        if name not in gym.registry:
            mujoco = sorted(k for k, s in gym.registry.items() if k.endswith("-v5") and "mujoco" in str(s.entry_point))
            raise ValueError(
                f"unknown env {name!r}: not a registered gymnasium id (MuJoCo tasks: {', '.join(mujoco)})."
            )
        frames = {"render_mode": "rgb_array", "width": 240, "height": 240, "camera_name": "track"}
        vec = gym.make_vec(
            name,
            num_envs=request.num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
            **(frames if request.options.get("render") else {}),
        )
        if request.options.get("render"):
            plain_scene(vec.envs[0])
        return GymWrapper(vec, device=request.device)


def plain_scene(sub_env: Any) -> None:
    """Draw a gymnasium MuJoCo env's frames as the native env's: without shadows or reflections.

    Software OpenGL spends most of a frame on them (docs/launcher.md, ``--video``).
    """
    renderer = getattr(getattr(sub_env, "unwrapped", None), "mujoco_renderer", None)
    if renderer is None or getattr(sub_env, "render_mode", None) != "rgb_array":
        return
    import mujoco

    from simeval.envs.simulators.mujoco_native.env import VIDEO_FLAGS_OFF

    flags = renderer._get_viewer("rgb_array").scn.flags
    for flag in VIDEO_FLAGS_OFF:
        flags[getattr(mujoco.mjtRndFlag, flag)] = False
