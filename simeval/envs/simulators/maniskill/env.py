"""ManiSkill3 tasks as one batched torchrl env: SAPIEN's CPU envs in a gymnasium vector env.

Each sub-env is ``gym.make(task, num_envs=1, obs_mode="state", sim_backend="cpu",
render_backend="none", enhanced_determinism=True)`` under ManiSkill3's ``CPUGymWrapper``
(numpy, unbatched, terminations ignored: every episode runs to the task's time limit, as
ManiSkill3 evaluates), whose seeded resets rebuild the scene
(:class:`~simeval.envs.simulators.maniskill.wrappers.FreshSceneOnSeed`). A gymnasium
``SyncVectorEnv`` steps them in this process, with its
autoreset off so that torchrl resets finished sub-envs itself, and torchrl's ``GymWrapper``
makes it a torchrl env whose ``("next", "success")`` (and ``"fail"``, where the task has
one) is the task's flag at each step. The layout is simeval's (:mod:`simeval.envs.layout`).

Seeds: sub-env ``i`` of a ``seed``-seeded env starts from ManiSkill3's seed ``seed + i`` in a
freshly built scene, and its later episodes from seeds its own generator draws from it
(``enhanced_determinism`` seeds each episode's initial state), so a seed fixes every episode
of every sub-env, in every round.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv

    from simeval.conditions import Condition

INSTALL_HINT = (
    "run `make maniskill` (a venv with mani-skill==3.0.1 and a CPU Vulkan device: tools/install-vulkan-cpu) "
    "and use .venv-maniskill/bin/python"
)
# Per-step flags a ManiSkill3 task's evaluate() may report; each one present becomes ("next", <flag>).
FLAGS = ("success", "fail")


def check_installed() -> None:
    """An EnvError naming the fix when ManiSkill3 cannot be imported here."""
    if importlib.util.find_spec("mani_skill") is None:
        raise EnvError(f"ManiSkill3 (mani_skill) is not installed in {sys.executable}: {INSTALL_HINT}.")


def registered_tasks() -> list[str]:
    """The task ids ManiSkill3's registry knows."""
    import mani_skill.envs  # noqa: F401  (registers ManiSkill3's tasks)
    from mani_skill.utils.registration import REGISTERED_ENVS

    return sorted(REGISTERED_ENVS)


def check_task(task: str) -> None:
    """ManiSkill3 installed and ``task`` one it registers; an EnvError naming the fix otherwise."""
    check_installed()
    tasks = registered_tasks()
    if task not in tasks:
        from importlib.metadata import version

        shown = ", ".join(t for t in tasks if t.startswith(("Push", "Pick", "Stack", "Peg", "Lift")))
        raise EnvError(
            f"unknown ManiSkill3 task {task!r}: mani-skill {version('mani_skill')} registers {len(tasks)} "
            f"tasks, e.g. {shown}."
        )


def one_env(task: str) -> Any:
    """One ManiSkill3 CPU env of ``task``: state observations, no renderer, numpy in and out, full-length episodes."""
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers ManiSkill3's tasks)
    from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

    from simeval.envs.simulators.maniskill.wrappers import FreshSceneOnSeed

    env = gym.make(
        task,
        num_envs=1,
        obs_mode="state",
        sim_backend="cpu",
        render_backend="none",
        enhanced_determinism=True,
    )
    return FreshSceneOnSeed(CPUGymWrapper(env, ignore_terminations=True))


def base_env(task: str, num_envs: int, device: str | None) -> EnvBase:
    """``num_envs`` envs of ``task`` in a SyncVectorEnv (autoreset off) under torchrl's GymWrapper, flags read."""
    from simeval.envs.simulators.sub_envs import vector_env

    return vector_env(functools.partial(one_env, task), num_envs, device, FLAGS)


def make_env(
    task: str,
    *,
    num_envs: int = 8,
    device: str | None = None,
    seed: int | None = None,
    max_steps: int | None = None,
    obs_norm: bool = True,
    condition: Condition | None = None,
) -> TransformedEnv:
    """Build ManiSkill3 task ``task`` with ``num_envs`` sub-envs, wrapped for torchrl with simeval's layout.

    Args:
        task: a registered ManiSkill3 id (e.g. ``PushCube-v1``).
        num_envs: ManiSkill3 CPU envs stepped together in this process.
        device: where the tensors go (the physics runs on the CPU either way).
        seed: sub-env ``i`` starts from seed ``seed + i``; ``None``: a random seed (ManiSkill3 would
            otherwise start every sub-env from its one fixed seed, so they would repeat each other).
        max_steps: a StepCounter's cap below the task's own time limit (``None``: the task's alone).
        obs_norm: append a VecNormV2 on ``observation`` (``OBS_NORM_ID``).
        condition: a suite condition's observation and action settings, by a Perturb around the base env.

    Returns:
        The env under DoubleToFloat, StepCounter, VecNormV2 (with ``obs_norm``) and RewardSum.

    Raises:
        EnvError: ManiSkill3 missing or an unknown task.
    """
    from simeval.envs.simulators.sub_envs import layered

    check_task(task)
    base = base_env(task, num_envs, device)
    return layered(base, condition=condition, max_steps=max_steps, obs_norm=obs_norm, seed=seed)
