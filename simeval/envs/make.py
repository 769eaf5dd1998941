"""Batched gymnasium MuJoCo tasks as torchrl envs (float32, VecNormV2, RewardSum, StepCounter).

The backends build the same env (same keys, dtypes, seeding, time limit and
transform layout, so checkpoints and ``OBS_NORM_ID`` fit them all):

* ``"native"`` (:mod:`simeval.envs.mujoco`): every sub-env in one
  ``mujoco.batch.Batch``, stepped in C on a thread pool, with observations and
  rewards computed for the whole batch in NumPy. The default for ``NATIVE_TASKS``.
* ``"gymnasium"``: gymnasium's SyncVectorEnv with autoreset disabled, so
  torchrl drives partial resets itself (``_reset`` masks) and no spawned
  worker processes are needed. Any registered gymnasium id.
* ``"warp"`` (:mod:`simeval.envs.warp`): every sub-env a world of MuJoCo Warp
  on ``device`` (a GPU, or Warp's CPU device), with torch tensors that stay
  there. ``WARP_TASKS`` only; float32 physics (``pip install simeval[warp]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from simeval.envs.catalog import MANAGER_SIMULATORS, MUJOCO_TASKS, check_condition, env_backend
from simeval.envs.layout import append_layout

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv

    from simeval.conditions import Condition

# The model id of make_env's VecNormV2, for weights_dict={OBS_NORM_ID: train_env.transform[2]}.
OBS_NORM_ID = "env.transform[2]"


def make_env(
    name: str = "HalfCheetah-v5",
    *,
    num_envs: int = 1,
    max_steps: int | None = None,
    seed: int | None = None,
    device: str | None = None,
    obs_norm: bool = True,
    render: bool = False,
    backend: str | None = None,
    num_threads: int | None = None,
    exact_contact_forces: bool = False,
    groups: int | None = None,
    condition: Condition | Mapping[str, Any] | None = None,
    cfg_overrides: dict | None = None,
) -> TransformedEnv:
    """A batched torchrl env for a gymnasium task.

    Transforms, in this order on both backends: DoubleToFloat (a no-op on the
    native backend, kept so that indices match), StepCounter, VecNormV2 (with
    ``obs_norm``), RewardSum.

    Args:
        name: gymnasium id (the MuJoCo v5 tasks are tested; others may work),
            ``isaaclab:<task>`` for an Isaac Lab task (:mod:`simeval.envs.isaaclab`), or
            ``mjlab:<task>`` for an mjlab task (:mod:`simeval.envs.mjlab`; on both
            ``render``, ``backend``, ``num_threads`` do not apply).
        num_envs: sub-envs stepped together (batch size ``[num_envs]``).
        max_steps: episode cap enforced by a StepCounter (truncation);
            ``None`` keeps only the task's own time limit.
        seed: seeds the sub-envs (sub-env ``i`` gets ``seed + i``).
        device: where the tensors go; the simulation itself runs on CPU, except on
            backend ``"warp"``, where it runs there too (``None``: ``cuda:0`` when
            Warp sees a GPU, else Warp's CPU device).
        obs_norm: append a VecNormV2 on ``observation`` with statistics shared
            across sub-envs (so they do not depend on ``num_envs``). An eval
            worker freezes it and needs the training statistics (``weights_dict``).
        render: make sub-env 0 renderable (240x240 RGB frames from the
            "track" camera, for ``simeval.worker.frames``). The gymnasium backend then
            builds its sub-envs with ``render_mode="rgb_array"``; the native
            env renders only when its ``render()`` is called, either way.
        backend: ``"native"``, ``"gymnasium"`` or ``"warp"`` (MuJoCo Warp, ``WARP_TASKS``,
            no ``render``); ``None`` picks native for ``NATIVE_TASKS`` and gymnasium
            for any other id.
        num_threads: native backend only: threads that step the batch
            (``None``: one per available CPU, at most ``num_envs``).
        groups: native backend only: 2 keeps the sub-envs in two halves whose physics
            simeval's rollout overlaps with the policy (see ``MujocoBatchEnv``); default 1.
        exact_contact_forces: native backend, Ant and Humanoid only: observe
            gymnasium's contact forces exactly, at the cost of a Python call per
            sub-env in contact each step (see ``MujocoBatchEnv``); by default
            they are taken one RK4 stage earlier, with no per-sub-env code.
        condition: a suite condition (:class:`simeval.conditions.Condition` or its
            plain-data mapping, e.g. ``{"observation_noise": 0.1}``), applied by a
            :class:`~simeval.envs.perturb.Perturb` directly around the base env, below
            the layout above (so ``OBS_NORM_ID`` still names the VecNormV2);
            ``body_mass_scale``, ``friction_scale`` and ``gravity`` need the native backend.
            On Isaac Lab and mjlab tasks its ``cfg`` overrides go into the task's config and
            its generic settings follow the simulator's in-step resets.
        cfg_overrides: Isaac Lab and mjlab tasks only: ``{"dotted.path": value}`` set in the task's env
            config before the env is built (:func:`simeval.envs.cfg_overrides.apply_cfg_overrides`),
            e.g. ``{"events.add_pole_mass.params.mass_distribution_params": [0.5, 2.0]}`` or mjlab's
            ``{"commands.twist.ranges.lin_vel_x": [1.0, 2.0]}``; on
            top of the condition's own ``cfg``. Data only, as a suite file's: a path the config
            lacks, a callable or a class (a term's ``func``, a ``"module:attr"`` string), or a value
            that would replace a callable or a config object is a ValueError (change such fields
            in the config itself, in Python).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
    if name.startswith(("isaaclab:", "mjlab:")):
        condition = _condition(condition, name, name.split(":", 1)[0])
        overrides = {**condition.cfg, **(cfg_overrides or {})}
        return _manager_env(name, num_envs, device, seed, max_steps, obs_norm, overrides, condition)
    if cfg_overrides:
        raise ValueError(f"cfg overrides apply to Isaac Lab and mjlab tasks only, not {name}.")
    backend = env_backend(name, backend)
    condition = _condition(condition, name, backend)
    from torchrl.envs import TransformedEnv  # loaded before the base env is built, as always

    base = _base_env(name, backend, num_envs, device, render, num_threads, exact_contact_forces, groups)
    env = TransformedEnv(perturbed(base, condition), auto_unwrap=False)
    append_layout(env, max_steps, obs_norm)
    if seed is not None:
        env.set_seed(seed)
    return env


def _condition(condition: Condition | Mapping[str, Any] | None, name: str, backend: str) -> Condition:
    """``condition`` checked for the env ``name`` built on ``backend``; ValueError (one line) if it cannot apply."""
    from simeval.conditions import Condition

    if not isinstance(condition, Condition):
        condition = Condition.parse(condition)
    check_condition(name, condition, None if backend in MANAGER_SIMULATORS else backend)
    return condition


def perturbed(base: EnvBase, condition: Condition) -> EnvBase:
    """``base`` itself for a nominal condition, else ``base`` under a :class:`~simeval.envs.perturb.Perturb`."""
    if not condition.values:
        return base
    from torchrl.envs import TransformedEnv

    from simeval.envs.perturb import Perturb

    return TransformedEnv(base, Perturb(condition), auto_unwrap=False)


# The simulators whose tasks are named "<prefix>:<task>", and the module that builds them.
_MANAGER_MODULES = {"isaaclab": "simeval.envs.isaaclab", "mjlab": "simeval.envs.mjlab"}


def _manager_env(
    name: str,
    num_envs: int,
    device: str | None,
    seed: int | None,
    max_steps: int | None,
    obs_norm: bool,
    cfg_overrides: Mapping[str, Any],
    condition: Condition,
) -> TransformedEnv:
    """The task ``isaaclab:<task>`` or ``mjlab:<task>`` under ``cfg_overrides`` and ``condition``.

    Built by that simulator's module (:func:`simeval.envs.isaaclab.make_env`, :func:`simeval.envs.mjlab.make_env`).
    """
    import importlib

    prefix, task = name.split(":", 1)
    module = importlib.import_module(_MANAGER_MODULES[prefix])
    return module.make_env(
        task,
        num_envs=num_envs,
        device=device,
        seed=seed,
        max_steps=max_steps,
        obs_norm=obs_norm,
        cfg_overrides=cfg_overrides,
        condition=condition,
    )


def _base_env(
    name: str,
    backend: str,
    num_envs: int,
    device: str | None,
    render: bool,
    num_threads: int | None,
    exact_contact_forces: bool,
    groups: int | None,
) -> EnvBase:
    """The untransformed batched env of ``backend`` (a name ``env_backend`` checked)."""
    if backend == "native":
        return _native_env(name, num_envs, device, render, num_threads, exact_contact_forces, groups)
    if backend == "warp":
        return _warp_env(name, num_envs, device, render)
    return _gymnasium_env(name, num_envs, device, render)


def _native_env(
    name: str,
    num_envs: int,
    device: str | None,
    render: bool,
    num_threads: int | None,
    exact_contact_forces: bool,
    groups: int | None,
) -> EnvBase:
    """``num_envs`` sub-envs in one ``mujoco.batch.Batch`` (:class:`simeval.envs.mujoco.MujocoBatchEnv`)."""
    from simeval.envs.mujoco import MujocoBatchEnv

    return MujocoBatchEnv(
        name,
        num_envs,
        device=device,
        num_threads=num_threads,
        exact_contact_forces=exact_contact_forces,
        render_mode="rgb_array" if render else None,
        groups=groups,
    )


def _warp_env(name: str, num_envs: int, device: str | None, render: bool) -> EnvBase:
    """``num_envs`` worlds of MuJoCo Warp on ``device`` (:class:`simeval.envs.warp.WarpBatchEnv`)."""
    if render:
        raise ValueError("backend='warp' does not render: use backend='native' for frames.")
    try:
        import mujoco_warp  # noqa: F401
        import warp  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"backend='warp' needs MuJoCo Warp ({err.name} is missing): pip install simeval[warp]"
        ) from None
    from simeval.envs.warp import WarpBatchEnv

    return WarpBatchEnv(name, num_envs, device=device)


def _gymnasium_env(name: str, num_envs: int, device: str | None, render: bool) -> EnvBase:
    """``num_envs`` gymnasium sub-envs in a SyncVectorEnv (autoreset disabled) under torchrl's GymWrapper."""
    import gymnasium as gym
    from torchrl.envs.libs.gym import GymWrapper

    if name not in gym.registry:
        raise ValueError(
            f"unknown env {name!r}: not a registered gymnasium id (MuJoCo tasks: {', '.join(MUJOCO_TASKS)})."
        )
    vec = gym.make_vec(
        name,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
        **({"render_mode": "rgb_array", "width": 240, "height": 240, "camera_name": "track"} if render else {}),
    )
    return GymWrapper(vec, device=device)
