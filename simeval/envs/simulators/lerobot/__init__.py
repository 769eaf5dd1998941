"""LeRobot (``lerobot:<env>``): LeRobot's simulation envs (PushT, ALOHA, MetaWorld) as lerobot-eval steps them.

``lerobot:pusht``, ``lerobot:aloha`` (its default task), ``lerobot:aloha/AlohaTransferCube-v0`` or
``lerobot:metaworld/push-v3``:
the env type's gymnasium envs in one vector env in this process (:mod:`.env`), observing
LeRobot's keys (``observation.image`` or ``observation.images.<camera>``, ``observation.state``),
with the env's ``is_success`` per step under ``("next", "success")``. Every episode is seeded
as lerobot-eval seeds it, a round plays lerobot-eval's episodes for any count (the first ``N`` of
whole batches, in batch order) and its records name each episode's env seed. Light at import:
LeRobot is imported when an env is built or a task checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from simeval.envs.simulators.base import EnvRequest, ReplayPromise
from simeval.envs.simulators.lerobot import env as env_module
from simeval.envs.simulators.sub_envs import SubEnvSimulator

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv


class LeRobot(SubEnvSimulator):
    """LeRobot's sim envs by env type, e.g. ``lerobot:pusht``."""

    name = "lerobot"
    title = "LeRobot"
    prefix = "lerobot"
    capabilities = frozenset({"observation", "action"})
    marker = "ReseedEachEpisode"
    render_env = {"MUJOCO_GL": "egl"}  # ALOHA observes MuJoCo cameras (headless: EGL, else OSMesa)
    settings_env = ("MUJOCO_GL", "MUJOCO_EGL_DEVICE_ID")
    episodes_in_batch_order = True  # lerobot-eval runs whole batches and keeps the first N episodes

    def headless_env(self) -> dict[str, str]:
        """``MUJOCO_GL``: the user's, else EGL, else OSMesa."""
        from simeval.envs.simulators.mujoco_native.gl import headless_gl

        return headless_gl()

    def tasks(self) -> tuple[str, ...]:
        """The env types, for messages (any gym task of theirs runs too)."""
        return tuple(f"{self.prefix}:{kind}" for kind in env_module.PACKAGES)

    def runs(self, name: str) -> bool:
        """Whether ``name`` is ``lerobot:<type>[/<task>]`` of a known type (nothing imported)."""
        return name.startswith(self.prefix + ":") and env_module.split(self.task(name))[0] in env_module.PACKAGES

    def check(self, name: str) -> None:
        """LeRobot and the type's package installed, and the task one it registers; a one-line EnvError otherwise."""
        env_module.env_config(self.task(name))

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """Each episode starts from its own env seed (lerobot-eval's). Checked to the bit on PushT with a CPU
        policy; ALOHA's and MetaWorld's envs not: no promise."""
        checked = "PushT came back to the bit with a CPU policy" if device == "cpu" else f"a policy on {device}"
        return ReplayPromise(
            False,
            f"LeRobot: each episode starts from its own env seed; not promised to the bit ({checked}; ALOHA and "
            "MetaWorld not checked)",
        )

    def make(self, request: EnvRequest) -> TransformedEnv:
        """``request.num_envs`` sub-envs in one vector env, with the transform layout (no VecNorm: see :mod:`.env`)."""
        return env_module.make_env(
            self.task(request.name),
            num_envs=request.num_envs,
            device=request.device,
            seed=request.seed,
            max_steps=request.max_steps,
            condition=request.condition,
        )

    def episode_env_seeds(self, env: EnvBase, sub_envs: Sequence[int], ordinals: Sequence[int]) -> list[int] | None:
        """Each episode's reset seed, read from its sub-env's ReseedEachEpisode: lerobot-eval's seed of it."""
        from simeval.envs.layout import innermost

        envs = getattr(innermost(env).__dict__.get("_env"), "envs", None)  # the SyncVectorEnv's sub-envs
        if not envs:
            return None
        seeds = [envs[i].seed_of(k) for i, k in zip(sub_envs, ordinals, strict=True)]
        return None if None in seeds else seeds
