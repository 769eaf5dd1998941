"""ManiSkill3 (``maniskill:<task>``): ManiSkill3's tasks on SAPIEN's CPU physics, state observations.

SAPIEN's CPU backend simulates one env per ``gym.make``, so a batch is a gymnasium
vector env of ManiSkill3 envs in this process (:mod:`.env`). Episodes run to the task's
time limit as in ManiSkill3's own evaluation, with the task's ``success`` flag per step
under ``("next", "success")``: ``info_keys=["success"]`` gives ``success_once`` and
``success_at_end``. Light at import: ManiSkill3 itself is imported when an env is built
or a task checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simeval.envs.simulators.base import EnvRequest, ReplayPromise
from simeval.envs.simulators.maniskill import env as env_module
from simeval.envs.simulators.sub_envs import SubEnvSimulator

if TYPE_CHECKING:
    from torchrl.envs import TransformedEnv


class ManiSkill(SubEnvSimulator):
    """ManiSkill3 tasks by their registry ids, e.g. ``maniskill:PushCube-v1``."""

    name = "maniskill"
    title = "ManiSkill3"
    prefix = "maniskill"
    capabilities = frozenset({"observation", "action"})
    marker = "FreshSceneOnSeed"

    def check(self, name: str) -> None:
        """ManiSkill3 installed and the task one it registers; a one-line EnvError naming the fix otherwise."""
        env_module.check_task(self.task(name))

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """The same return to the bit with a CPU policy: each sub-env is its own scene on SAPIEN's CPU physics,
        reset from its own generator (checked on PushCube-v1, an episode after a sub-env's first included)."""
        if device == "cpu":
            return ReplayPromise(
                True,
                "ManiSkill3: the same return to the bit (each sub-env its own scene on the CPU physics, resetting "
                "from its own generator)",
            )
        return ReplayPromise(
            False, f"ManiSkill3: the physics repeats on the CPU, but a policy on {device} may round differently"
        )

    def make(self, request: EnvRequest) -> TransformedEnv:
        """``request.num_envs`` ManiSkill3 envs in one vector env, with the transform layout; seeded when asked."""
        return env_module.make_env(
            self.task(request.name),
            num_envs=request.num_envs,
            device=request.device,
            seed=request.seed,
            max_steps=request.max_steps,
            obs_norm=request.obs_norm,
            condition=request.condition,
        )
