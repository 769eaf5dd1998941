"""``make_env``: a batched torchrl env of any registered simulator, with simeval's transform layout.

The simulator comes from the env id (:mod:`simeval.envs.simulators`): ``isaaclab:<task>``
and ``mjlab:<task>`` name theirs; a gymnasium id is built by native MuJoCo (the default for
``NATIVE_TASKS``: every sub-env in one ``mujoco.batch.Batch``, stepped in C), gymnasium's
SyncVectorEnv (any registered id; autoreset disabled, so torchrl drives partial resets)
or MuJoCo Warp (``WARP_TASKS``; tensors stay on its device), as ``backend`` asks. They
build the same env (keys, dtypes, seeding, time limit and transform layout), so
checkpoints and ``OBS_NORM_ID`` fit them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from simeval.envs.simulators import EnvRequest, check_condition, registered, simulator_for

if TYPE_CHECKING:
    from torchrl.envs import TransformedEnv

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
    cameras: Sequence[str] = (),
    image_size: int | tuple[int, int] = 64,
    frame_stack: int = 1,
) -> TransformedEnv:
    """A batched torchrl env for a gymnasium task.

    Transforms, in this order on both backends: DoubleToFloat (a no-op on the
    native backend, kept so that indices match), StepCounter, VecNormV2 (with
    ``obs_norm``), RewardSum.

    Args:
        name: gymnasium id (the MuJoCo v5 tasks are tested; others may work),
            ``isaaclab:<task>`` for an Isaac Lab task (:mod:`simeval.envs.simulators.isaaclab.env`), or
            ``mjlab:<task>`` for an mjlab task (:mod:`simeval.envs.simulators.mjlab.env`; on both
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
            the physics, initial-state and camera settings (``body_mass_scale``, ``friction_scale``,
            ``gravity``, ``push``, ``init_noise_scale``, ``camera_shift``, ...) need the native backend,
            the camera ones ``cameras`` too.
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
        cameras: the model's cameras each sub-env observes at every step (backends native and
            warp: e.g. ``["track"]``): the observation is then ``observation.state`` (the task's
            vector, the only one VecNorm and observation noise touch) and
            ``observation.images.<camera>``, float32 ``(3, H, W)`` in [0, 1], LeRobot's
            keys. Native: rendered on the CPU (``MUJOCO_GL=egl`` or ``osmesa`` when headless);
            warp: ray-traced for every world at once on the env's device.
        image_size: the images' side, or ``(height, width)``.
        frame_stack: each camera's last ``frame_stack`` images stacked along the channels.
    """
    from simeval.conditions import Condition  # NumPy: simeval.envs loads none until it builds an env

    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
    sim = simulator_for(name, backend)
    if cfg_overrides and "task_config" not in sim.capabilities:
        check_condition(name, Condition(cfg=dict(cfg_overrides)), backend)
    if not isinstance(condition, Condition):
        condition = Condition.parse(condition)
    check_condition(name, condition, backend)
    if cameras and not sim.cameras:
        titles = [s.title for s in registered() if s.cameras] or ["no simulator installed here"]
        able = " and ".join(filter(None, (", ".join(titles[:-1]), titles[-1])))
        raise ValueError(f"{name}: {sim.title} envs observe no cameras; {able} envs do.")
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    options = {"render": render, "num_threads": num_threads, "exact_contact_forces": exact_contact_forces}
    if cameras:
        options |= {"cameras": tuple(cameras), "image_size": (int(height), int(width)), "frame_stack": frame_stack}
    elif frame_stack != 1:
        raise ValueError(f"frame_stack stacks camera images: give cameras, or frame_stack 1 (got {frame_stack}).")
    request = EnvRequest(
        name=name,
        num_envs=num_envs,
        device=device,
        seed=seed,
        max_steps=max_steps,
        obs_norm=obs_norm,
        condition=condition,
        cfg_overrides=dict(cfg_overrides or {}),
        options={**options, "groups": groups},
    )
    return sim.make(request)
