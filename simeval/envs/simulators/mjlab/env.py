"""mjlab tasks as torchrl envs (``--env mjlab:<task>``): Isaac Lab's manager API on MuJoCo Warp.

The env is mjlab's own ``ManagerBasedRlEnv`` built from the task's play config
(mjlab's ``load_env_cfg(task, play=True)``: no training-time randomisation the
task turns off for playing), with the episode length of its training config (play
configs run for 1e9 s). torchrl's ``MJLabWrapper`` drives it with mjlab's own
auto-reset, as on Isaac Lab: finished sub-envs are reset inside ``step()``. The
transforms line up with :func:`simeval.envs.make_env`: the wrapper (a rename of
mjlab's ``actor`` observation group to ``observation``, the ``critic`` group
dropped, a condition's :class:`~simeval.envs.perturb.Perturb`) is the base env of
DoubleToFloat (a no-op), StepCounter, VecNormV2 at ``OBS_NORM_ID`` and RewardSum.

mjlab's ``extras["log"]`` (``Episode_Reward/*``, ``Episode_Termination/*``,
``Metrics/*``) is written under ``("next", "log")`` each step
(:class:`simeval.envs.simulators.mjlab.log.MjlabLogWrapper`), where the rollout core reads
it at every episode's end.

With ``cameras``, each named camera of the task's scene is an mjlab 1.6 camera sensor
(``CameraSensorCfg`` wrapping the existing camera: MuJoCo Warp's batch renderer, run by
mjlab's ``sim.sense()`` after each step, on the GPU or Warp's CPU device) read by an
observation group of its own, named by the camera's key (``observation.images.<camera>``);
the ``actor`` group becomes ``observation.state``, as on the MuJoCo envs.

mjlab 1.6 pins MuJoCo 3.11, so it lives in a venv of its own (``make mjlab``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from simeval.envs.cfg_overrides import apply_cfg_overrides
from simeval.envs.layout import STATE_KEY, append_layout, image_key
from simeval.errors import EnvError

if TYPE_CHECKING:
    from torchrl.envs import TransformedEnv

    from simeval.conditions import Condition

INSTALL_HINT = "run `make mjlab` (a Python 3.11 venv with mjlab==1.6.0) and use .venv-mjlab/bin/python"
# Seeds the build when no seed is given: mjlab draws its "startup" events (e.g. the Go1's encoder bias) from
# the global generators while it builds the env, so every process must build it from the same state.
BUILD_SEED = 0
# Tasks that need a file mjlab does not ship (a motion clip for the tracking tasks).
_NEEDS_MOTION = "Tracking"


def check_installed() -> None:
    """An EnvError naming the fix when mjlab cannot be imported here."""
    import sys

    if importlib.util.find_spec("mjlab") is None:
        raise EnvError(f"mjlab is not installed in {sys.executable}: {INSTALL_HINT}.")


def registered_tasks() -> list[str]:
    """The task ids mjlab's registry knows (its wheel ships their robots)."""
    import mjlab.tasks  # noqa: F401  (registers mjlab's tasks)
    from mjlab.tasks.registry import list_tasks

    return sorted(list_tasks())


def check_task(task: str) -> None:
    """mjlab installed and ``task`` one it can build here; an EnvError naming the fix otherwise."""
    check_installed()
    tasks = registered_tasks()
    if task not in tasks:
        runnable = [t for t in tasks if _NEEDS_MOTION not in t]
        raise EnvError(f"unknown mjlab task {task!r}: mjlab {_version()} registers {', '.join(runnable)}.")
    if _NEEDS_MOTION in task:
        raise EnvError(
            f"mjlab task {task!r} tracks a motion clip that mjlab does not ship (its config has no motion file): "
            "evaluate a velocity, manipulation or cartpole task, e.g. mjlab:Mjlab-Velocity-Flat-Unitree-Go1."
        )


def default_device() -> str:
    """``cuda:0`` when this process sees a GPU, else ``cpu`` (MuJoCo Warp's CPU device)."""
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def env_cfg(task: str, cfg_overrides: Mapping[str, Any] | None = None) -> Any:
    """The play config of ``task`` with its training episode length, ``cfg_overrides`` applied.

    Args:
        task: a registered mjlab task id.
        cfg_overrides: ``{"dotted.path": value}`` set in the config
            (:func:`simeval.envs.cfg_overrides.apply_cfg_overrides`: data only, never a callable), e.g.
            ``{"commands.twist.ranges.lin_vel_x": [1.0, 2.0]}``.

    Returns:
        mjlab's ``ManagerBasedRlEnvCfg``.
    """
    check_task(task)
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(task, play=True)
    cfg.episode_length_s = load_env_cfg(task, play=False).episode_length_s
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
    cameras: tuple[str, ...] = (),
    image_size: tuple[int, int] = (64, 64),
    frame_stack: int = 1,
) -> TransformedEnv:
    """Build mjlab task ``task`` with ``num_envs`` sub-envs, wrapped for torchrl.

    Args:
        task: a registered mjlab task id (e.g. ``Mjlab-Velocity-Flat-Unitree-Go1``).
        num_envs: worlds simulated together.
        device: simulation and tensor device (``None``: :func:`default_device`).
        seed: mjlab's seed (it seeds the global Python, NumPy, Warp and torch
            generators), set before the env is built, so that the task's startup
            events (drawn once, e.g. encoder biases) are the same wherever it is built;
            ``None``: ``BUILD_SEED``. Each round's seed then reseeds the episodes.
        max_steps: shortens the task's own episode length (mjlab then times the
            episode out itself, as its ``time_out`` termination).
        obs_norm: append a VecNormV2 on ``observation`` (``OBS_NORM_ID``).
        cfg_overrides: ``{"dotted.path": value}`` set in the play config before the
            env is built (:func:`env_cfg`); ``max_steps`` is applied after them.
        condition: a suite condition's generic settings (observation/action noise,
            action delay and scale), applied by a :class:`~simeval.envs.perturb.Perturb`
            inside the wrapper's auto-reset layer, below VecNormV2; its ``cfg`` is
            the caller's to merge into ``cfg_overrides``.
        cameras: cameras of the task's scene every world observes at every step, by their
            name in the scene (``cartpole/fixed``) or the part after its entity's prefix
            (``fixed``) where that is unique: each an mjlab camera sensor, its images
            ``observation.images.<camera>`` (float32 ``(3, H, W)`` in [0, 1], as mjlab's
            ``camera_rgb`` observation gives them) beside ``observation.state``.
        image_size: (height, width) of the camera images.
        frame_stack: 1 only: a stack of more would carry images across mjlab's own resets
            (inside its step, where simeval's ``StackFrames`` does not see them).

    Returns:
        The env under :class:`~simeval.envs.simulators.mjlab.log.MjlabLogWrapper` and simeval's transforms.

    Raises:
        EnvError: mjlab missing, an unknown task, or a tracking task (no motion file).
        ValueError: an override path that the config does not have, or a value it may not set, a camera the
            scene lacks, or ``frame_stack`` above 1 (one line).
    """
    cfg = env_cfg(task, cfg_overrides)
    cfg.scene.num_envs = num_envs
    cfg.seed = BUILD_SEED if seed is None else seed
    if max_steps is not None:
        # A hair under max_steps * dt, so float rounding cannot add a step.
        cfg.episode_length_s = (max_steps - 0.5) * cfg.sim.mujoco.timestep * cfg.decimation
    cameras = tuple(cameras)
    if frame_stack != 1:  # StackFrames restarts a stack at torchrl's resets; mjlab's happen inside its step
        raise ValueError(
            f"mjlab:{task}: frame_stack {frame_stack} is not supported: mjlab resets finished worlds inside its "
            "step, where the stacks would carry the last episode's images; use frame_stack 1."
        )
    if cameras:
        add_cameras(task, cfg, cameras, image_size)
    from mjlab.envs import ManagerBasedRlEnv

    base = ManagerBasedRlEnv(cfg=cfg, device=device or default_device())
    return _wrap(base, obs_norm, condition, cameras, frame_stack)


def scene_cameras(cfg: Any) -> list[str]:
    """The names of the cameras in the scene of ``cfg`` (its entities' and terrain's; sensors' own left out)."""
    import dataclasses

    from mjlab.scene import Scene

    model = Scene(dataclasses.replace(cfg.scene, sensors=()), device="cpu").compile()
    return [model.camera(i).name for i in range(model.ncam)]


def add_cameras(task: str, cfg: Any, cameras: tuple[str, ...], image_size: tuple[int, int]) -> None:
    """Add to ``cfg`` an mjlab camera sensor and an observation group (the camera's key) per camera.

    A camera the scene lacks, an ambiguous short name or an image side outside 1..1024 is a
    one-line ValueError naming the scene's cameras.
    """
    from mjlab.managers.observation_manager import ObservationGroupCfg, ObservationTermCfg
    from mjlab.sensor import CameraSensorCfg
    from mjlab.tasks.manipulation.mdp.observations import camera_rgb

    height, width = int(image_size[0]), int(image_size[1])
    if min(height, width) < 1 or max(height, width) > 1024:
        raise ValueError(f"image_size must be 1..1024 pixels a side, got {tuple(image_size)!r}.")
    known = scene_cameras(cfg)
    sensors = []
    for camera in cameras:
        found = [c for c in known if c == camera or c.rsplit("/", 1)[-1] == camera]
        if len(found) != 1:
            why = "no camera" if not found else "more than one camera named"
            raise ValueError(f"mjlab:{task}: {why} {camera!r} in its scene; its cameras: {', '.join(known) or 'none'}.")
        name = f"simeval_{len(sensors)}"
        size = {"width": width, "height": height}
        sensors.append(CameraSensorCfg(name=name, camera_name=found[0], data_types=("rgb",), **size))
        term = ObservationTermCfg(func=camera_rgb, params={"sensor_name": name})
        cfg.observations[image_key(camera)] = ObservationGroupCfg(terms={"rgb": term}, concatenate_terms=True)
    cfg.scene.sensors = (*(cfg.scene.sensors or ()), *sensors)


def _wrap(
    base: Any, obs_norm: bool, condition: Condition | None, cameras: tuple[str, ...] = (), frame_stack: int = 1
) -> TransformedEnv:
    """mjlab's env ``base`` under MjlabLogWrapper (and ``condition``), then make_env's transform layout."""
    from torchrl.envs import ExcludeTransform, RenameTransform, TransformedEnv

    from simeval.envs.simulators.mjlab.log import MjlabLogWrapper

    wrapper = MjlabLogWrapper(base)
    # The TransformedEnv copies the wrapper's _torchrl_native_autoreset, so torchrl keeps mjlab's resets.
    state = STATE_KEY if cameras else "observation"
    inner = TransformedEnv(wrapper, RenameTransform(in_keys=["actor"], out_keys=[state]), auto_unwrap=False)
    if "critic" in wrapper.observation_spec.keys():
        inner.append_transform(ExcludeTransform("critic"))
    if condition is not None and condition.values:
        from simeval.envs.perturb import Perturb

        inner.append_transform(Perturb(condition, observation_keys=[state]))
    out = TransformedEnv(inner, auto_unwrap=False)
    append_layout(out, None, obs_norm, cameras=cameras, frame_stack=frame_stack)
    return out


def _version() -> str:
    from importlib.metadata import version

    return version("mjlab")
