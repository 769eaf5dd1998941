"""Isaac Lab tasks as torchrl envs (``--env isaaclab:<task>``), kit-less or with Isaac Sim.

The env is Isaac Lab's own (``gym.make(task, cfg=parse_env_cfg(...))``) under
torchrl's ``IsaacLabWrapper`` with ``native_autoreset=True``: Isaac Lab resets
finished sub-envs inside ``step()``, so episode ends are read from the step's
done flags and no partial reset is ever asked for. The transforms line up
with :func:`simeval.envs.make_env`: the wrapper (with torchrl's
VecGymEnvTransform, a rename of a manager-based task's ``policy`` observation
group to ``observation``, and a condition's
:class:`~simeval.envs.perturb.Perturb`) is the base env of DoubleToFloat
(a no-op), StepCounter, VecNormV2 at ``OBS_NORM_ID`` and RewardSum, so training
scripts, checkpoints and the launcher treat every kind of env alike.

Isaac Lab's ``extras["log"]`` (termination reasons, reward terms, task
metrics such as ``Metrics/success_rate``) is written under ``("next", "log")``
each step, where the rollout core reads it at every episode's end.

``cfg_overrides`` (a suite condition's ``cfg``) set values in the task's env
config by dotted path before the env is built (:func:`apply_cfg_overrides`).
A condition's generic settings (observation and action noise, action delay and
scale) start each sub-env's next episode where Isaac Lab reset it inside a step.

Kit-less (Isaac Lab 3.x without Isaac Sim, Newton physics) nothing has to
start before torch; with Isaac Sim installed the simulation app must already
run (``--init-fn simeval.envs.simulators.isaaclab.app:app_launcher``).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from simeval.envs.cfg_overrides import apply_cfg_overrides
from simeval.envs.layout import append_layout
from simeval.errors import EnvError

if TYPE_CHECKING:
    import gymnasium as gym
    from isaaclab.envs import DirectRLEnvCfg, ManagerBasedRLEnvCfg
    from torchrl.envs import TransformedEnv

    from simeval.conditions import Condition

INSTALL_HINT = "run `make isaaclab` (a Python 3.12 venv with isaaclab==3.0.0) and use .venv-isaaclab/bin/python"

_LAUNCHER_ARGS: dict = {}  # Isaac Lab's launcher flags, as an init hook parsed them


def remember_launcher_args(args: dict) -> None:
    """Keep Isaac Lab's parsed launcher flags for the ``launch_simulation`` call that wraps env creation."""
    _LAUNCHER_ARGS.clear()
    _LAUNCHER_ARGS.update(args)


def launcher_args() -> dict:
    """Isaac Lab's launcher flags as ``remember_launcher_args`` got them ({} if no hook ran)."""
    return dict(_LAUNCHER_ARGS)


def default_device() -> str:
    """``cuda:0`` when this process sees a GPU, else ``cpu`` (Isaac Lab's own default is always cuda:0)."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def check_installed() -> None:
    """An EnvError naming the fix when Isaac Lab cannot be imported here."""
    import sys

    if importlib.util.find_spec("isaaclab") is not None and importlib.util.find_spec("isaaclab_tasks") is not None:
        return
    if sys.version_info[:2] != (3, 12):
        raise EnvError(f"Isaac Lab 3.0 needs Python 3.12, this is {sys.version.split()[0]}: {INSTALL_HINT}.")
    raise EnvError(f"Isaac Lab is not installed in {sys.executable}: {INSTALL_HINT}.")


def registered_tasks() -> list[str]:
    """The Isaac Lab ids gymnasium knows, simeval's offline ones included."""
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401  (registers Isaac Lab's tasks)

    from simeval.envs.simulators.isaaclab import offline as isaaclab_offline

    isaaclab_offline.register()
    return sorted(k for k in gym.registry if k.startswith(("Isaac-", "Simeval-Isaac-")))


def check_task(task: str) -> None:
    """Isaac Lab installed and ``task`` a registered gymnasium id; an EnvError naming the fix otherwise."""
    check_installed()
    import gymnasium as gym

    tasks = registered_tasks()
    if task not in gym.registry:
        raise EnvError(
            f"unknown Isaac Lab task {task!r}: registered ids include {', '.join(_examples(tasks))} "
            f"(offline, no asset server needed: Simeval-Isaac-Cartpole-Direct, Simeval-Isaac-Cartpole)."
        )


def env_cfg(
    task: str, *, device: str = "cpu", num_envs: int = 1, cfg_overrides: Mapping[str, Any] | None = None
) -> DirectRLEnvCfg | ManagerBasedRLEnvCfg:
    """The env config of ``task`` (Isaac Lab's ``parse_env_cfg``), ``cfg_overrides`` applied; no env, no simulation.

    Args:
        task: a registered Isaac Lab gymnasium id.
        device: the config's simulation device.
        num_envs: the config's number of sub-envs.
        cfg_overrides: ``{"dotted.path": value}`` set in the config (:func:`apply_cfg_overrides`: data only).

    Raises:
        EnvError: Isaac Lab missing or an unknown task.
        ValueError: an override the config does not take (one line).
    """
    check_task(task)
    from isaaclab_tasks.utils import parse_env_cfg

    cfg = parse_env_cfg(task, device=device, num_envs=num_envs)
    if cfg_overrides:
        apply_cfg_overrides(cfg, cfg_overrides)
    return cfg


def make_env(
    task: str,
    *,
    num_envs: int = 64,
    device: str | None = None,
    seed: int | None = None,
    max_steps: int | None = None,
    obs_norm: bool = True,
    cfg_overrides: Mapping[str, Any] | None = None,
    condition: Condition | None = None,
) -> TransformedEnv:
    """Build Isaac Lab task ``task`` with ``num_envs`` sub-envs, wrapped for torchrl.

    Args:
        task: a registered Isaac Lab gymnasium id (e.g. ``Simeval-Isaac-Cartpole``).
        num_envs: sub-envs simulated together.
        device: simulation and tensor device (``None``: :func:`default_device`).
        seed: Isaac Lab's ``cfg.seed``.
        max_steps: shortens the task's own episode length (Isaac Lab then times
            the episode out itself).
        obs_norm: append a VecNormV2 on ``observation`` (``OBS_NORM_ID``).
        cfg_overrides: ``{"dotted.path": value}`` set in the parsed env config
            before the env is built (:func:`apply_cfg_overrides`: data only, never a
            callable); ``seed`` and ``max_steps`` are applied after them.
        condition: a suite condition's generic settings (observation/action noise,
            action delay and scale), applied by a :class:`~simeval.envs.perturb.Perturb`
            inside the wrapper's native-autoreset layer, below VecNormV2; its ``cfg``
            is the caller's to merge into ``cfg_overrides``.

    Returns:
        The env under torchrl's ``IsaacLabWrapper`` and simeval's transforms.

    Raises:
        EnvError: Isaac Lab missing, an unknown task, or an asset that cannot be loaded.
        ValueError: an override path that the config does not have, or a value it may not set (one line).
    """
    import gymnasium as gym

    device = device or default_device()
    cfg = env_cfg(task, device=device, num_envs=num_envs, cfg_overrides=cfg_overrides)
    if seed is not None:
        cfg.seed = seed
    if max_steps is not None:
        step_dt = cfg.sim.dt * cfg.decimation
        # A hair under max_steps * dt, so float rounding cannot add a step.
        cfg.episode_length_s = (max_steps - 0.5) * step_dt
    launch = launch_for(cfg)
    try:
        base = gym.make(task, cfg=cfg)
    except FileNotFoundError as e:
        launch.close()
        raise EnvError(
            f"Isaac Lab task {task!r} needs an asset this machine cannot load ({_first_line(e)}): use an offline "
            "task (isaaclab:Simeval-Isaac-Cartpole-Direct) or set ISAACSIM_ASSET_ROOT to a local copy of "
            "Isaac's assets."
        ) from None
    return _wrap(base, device, obs_norm, launch, condition)


def _wrap(
    base: gym.Env, device: str, obs_norm: bool, launch: contextlib.ExitStack, condition: Condition | None = None
) -> TransformedEnv:
    """Isaac Lab's env ``base`` under IsaacLabWrapper (and ``condition``), then make_env's transform layout."""

    from torchrl.envs import RenameTransform, TransformedEnv
    from torchrl.envs.libs.isaac_lab import IsaacLabWrapper

    # A TransformedEnv whose transform is torchrl's VecGymEnvTransform (auto-reset bookkeeping), with
    # _torchrl_native_autoreset set, which every TransformedEnv around it copies.
    inner = IsaacLabWrapper(base, device=device, native_autoreset=True)
    inner._simeval_launch = launch  # the kit-less runtime lives as long as the env
    names = sorted(inner._isaac_unwrapped.extras.get("log", {}))
    if not names:  # the first reset is what fills extras["log"] with the task's names
        inner.reset()
        names = sorted(inner._isaac_unwrapped.extras.get("log", {}))
    if names:
        from simeval.envs.simulators.isaaclab.log import IsaacLogReader

        inner.set_info_dict_reader(IsaacLogReader(names, inner.batch_size, inner.device))
    keys = inner.observation_spec.keys()
    if "observation" not in keys and "policy" in keys:
        # A manager-based task observes its "policy" group; direct tasks and every other env say "observation".
        inner.append_transform(RenameTransform(in_keys=["policy"], out_keys=["observation"]))
    if condition is not None and condition.values:
        from simeval.envs.perturb import Perturb

        inner.append_transform(Perturb(condition, observation_keys=["observation"]))
    # The layout of make_env's other envs on top (DoubleToFloat a no-op: Isaac Lab's data is float32).
    out = TransformedEnv(inner, auto_unwrap=False)
    append_layout(out, None, obs_norm)
    return out


def launch_for(cfg: DirectRLEnvCfg | ManagerBasedRLEnvCfg) -> contextlib.ExitStack:
    """Enter Isaac Lab 3's ``launch_simulation`` for ``cfg`` when no Kit app runs (it starts nothing kit-less).

    It validates the physics/renderer choice and applies the launcher flags the
    init hook parsed. With Isaac Sim installed (the hook starts its app) it is skipped.
    """
    stack = contextlib.ExitStack()
    if importlib.util.find_spec("isaacsim") is not None:
        return stack
    try:
        from isaaclab.app import launch_simulation
    except ImportError:  # Isaac Lab 2.x: no kit-less mode
        return stack
    stack.enter_context(launch_simulation(cfg, launcher_args()))
    return stack


def _examples(tasks: list[str]) -> list[str]:
    return tasks[:6] + (["..."] if len(tasks) > 6 else [])


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
