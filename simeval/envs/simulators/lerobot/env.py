"""LeRobot's simulation envs as one batched torchrl env: the same gymnasium envs lerobot-eval steps.

Each sub-env is what ``lerobot.envs.factory.make_env`` builds for the env type (``gym.make`` of the
type's gym id with its config's ``gym_kwargs``), under :class:`~.wrappers.LeRobotKeys` (the
observation as lerobot-eval hands it to a policy: ``observation.image`` or
``observation.images.<camera>`` float CHW in [0, 1], ``observation.state``) and
:class:`~.wrappers.ReseedEachEpisode`. A gymnasium ``SyncVectorEnv`` with its autoreset off steps
them in this process; torchrl's ``GymWrapper`` makes it a torchrl env whose ``("next", "success")``
is the env's ``is_success`` at each step. The layout is simeval's (:mod:`simeval.envs.layout`),
without a VecNorm: a LeRobot policy normalises in its own processors.

Seeds: sub-env ``i`` of a ``seed``-seeded env of ``n`` sub-envs runs its ``k``-th episode from
seed ``seed + k * n + i``, as lerobot-eval's batch ``k`` of ``n`` envs (it reseeds every batch).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv

    from simeval.conditions import Condition

INSTALL_HINT = "run `make lerobot` (a venv with lerobot[pusht,aloha,metaworld]==0.4.4) and use .venv-lerobot/bin/python"
# The env types simeval builds: LeRobot's type -> the package that registers its gym ids. A fixed table:
# an env id (from a suite file, say) never names a package to import.
PACKAGES = {"pusht": "gym_pusht", "aloha": "gym_aloha", "metaworld": "metaworld"}
# Env types whose sub-envs are LeRobot's own class (lerobot.envs.<type>), not a gym id: (class, the task's prefix).
OWN_CLASSES = {"metaworld": ("MetaworldEnv", "metaworld-")}
SEEDED_POSITIONS = ("metaworld",)  # types whose reset ignores its seed: wrappers.SeededPositions


def headless() -> None:
    """``MUJOCO_GL`` for headless rendering (ALOHA's observations are MuJoCo camera images), unless already set.

    Set before LeRobot's env packages load MuJoCo, which reads it once; a one-line EnvError where
    neither EGL nor OSMesa is installed.
    """
    import os

    from simeval.envs.simulators.mujoco_native.gl import headless_gl

    try:
        for key, value in headless_gl().items():
            os.environ.setdefault(key, value)
    except ValueError as exc:
        raise EnvError(str(exc)) from None


def split(task: str) -> tuple[str, str | None]:
    """``"pusht"`` -> ("pusht", None); ``"aloha/AlohaTransferCube-v0"`` -> ("aloha", "AlohaTransferCube-v0")."""
    kind, _, name = task.partition("/")
    return kind, (name or None)


def check_installed(kind: str) -> None:
    """An EnvError naming the fix when LeRobot or the env type's package cannot be imported here."""
    if kind not in PACKAGES:
        raise EnvError(f"unknown LeRobot env type {kind!r}: one of {', '.join(sorted(PACKAGES))}.")
    for module in ("lerobot", PACKAGES[kind]):
        if importlib.util.find_spec(module) is None:
            raise EnvError(f"{module} is not installed in {sys.executable}: {INSTALL_HINT}.")


def env_config(task: str) -> Any:
    """LeRobot's env config (``lerobot.envs.configs``) of ``task`` (``TYPE`` or ``TYPE/GYM_TASK``), its task checked."""
    import gymnasium as gym

    kind, name = split(task)
    check_installed(kind)
    from lerobot.envs.configs import EnvConfig

    if kind in OWN_CLASSES:
        return _own_class_config(kind, name)
    cfg = EnvConfig.get_choice_class(kind)(**({"task": name} if name else {}))
    importlib.import_module(PACKAGES[kind])  # registers the type's gym ids
    if cfg.gym_id not in gym.registry:
        known = sorted(k.split("/", 1)[1] for k in gym.registry if k.startswith(f"{PACKAGES[kind]}/"))
        raise EnvError(f"unknown LeRobot {kind} task {name!r}: one of {', '.join(known)}.")
    return cfg


def _own_class_config(kind: str, name: str | None) -> Any:
    """The config of a type whose envs are LeRobot's own class (MetaWorld), its task checked against the class's."""
    from lerobot.envs.configs import EnvConfig

    module = importlib.import_module(f"lerobot.envs.{kind}")  # kind: a key of the fixed table
    known = sorted(module.TASK_DESCRIPTIONS)
    if name is None or name.removeprefix(OWN_CLASSES[kind][1]) not in known:
        raise EnvError(f"LeRobot {kind} needs a task of its own: {kind}/<task>, one of {', '.join(known)}.")
    return EnvConfig.get_choice_class(kind)(task=OWN_CLASSES[kind][1] + name.removeprefix(OWN_CLASSES[kind][1]))


def one_env(cfg: Any, stride: int) -> Any:
    """One sub-env as ``lerobot.envs.factory.make_env`` builds it, under LeRobot's keys and per-episode seeds."""
    import gymnasium as gym

    from simeval.envs.simulators.lerobot.wrappers import LeRobotKeys, ReseedEachEpisode, SeededPositions

    if cfg.type in OWN_CLASSES:  # as lerobot.envs.<type>.create_<type>_envs builds each
        own = getattr(importlib.import_module(f"lerobot.envs.{cfg.type}"), OWN_CLASSES[cfg.type][0])
        env = own(task=cfg.task, **(cfg.gym_kwargs or {}))
        if cfg.type in SEEDED_POSITIONS:
            env = SeededPositions(env)
    else:
        env = gym.make(cfg.gym_id, disable_env_checker=cfg.disable_env_checker, **(cfg.gym_kwargs or {}))
    return ReseedEachEpisode(LeRobotKeys(env), stride)


def base_env(cfg: Any, num_envs: int, device: str | None) -> EnvBase:
    """``num_envs`` sub-envs in a SyncVectorEnv (autoreset off) under torchrl's GymWrapper, ``success`` read."""
    from simeval.envs.simulators.sub_envs import vector_env

    return vector_env(functools.partial(one_env, cfg, num_envs), num_envs, device, ("success",))


def make_env(
    task: str,
    *,
    num_envs: int = 8,
    device: str | None = None,
    seed: int | None = None,
    max_steps: int | None = None,
    condition: Condition | None = None,
) -> TransformedEnv:
    """Build LeRobot env ``task`` with ``num_envs`` sub-envs, wrapped for torchrl with simeval's layout.

    Args:
        task: a LeRobot env type (``pusht``, ``aloha``), optionally with its gym task
            (``aloha/AlohaTransferCube-v0``); the type's default task otherwise.
        num_envs: sub-envs stepped together in this process.
        device: where the tensors go (the simulation runs on the CPU either way).
        seed: see the module docstring; ``None``: a random seed.
        max_steps: a StepCounter's cap below the env's own episode length (``None``: its own alone).
        condition: a suite condition's observation and action settings, by a Perturb around the base env.

    Returns:
        The env under DoubleToFloat, StepCounter and RewardSum.

    Raises:
        EnvError: LeRobot or the env's package missing, or an unknown env type or task.
    """
    from simeval.envs.simulators.sub_envs import layered

    headless()
    base = base_env(env_config(task), num_envs, device)
    return layered(base, condition=condition, max_steps=max_steps, obs_norm=False, seed=seed)
