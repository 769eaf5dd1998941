"""Which env ids simeval builds, and on which backend: checked before any worker starts.

Kept free of NumPy, torch and MuJoCo imports, so that the launcher and
``simeval.export`` can check a name (and ``import simeval.envs`` stays light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simeval.conditions import Condition

# What backend="native" runs (simeval.envs.mujoco_tasks.TASKS).
NATIVE_TASKS = (
    "HalfCheetah-v5",
    "Hopper-v5",
    "Walker2d-v5",
    "Ant-v5",
    "InvertedPendulum-v5",
    "Humanoid-v5",
)
# gymnasium's MuJoCo v5 tasks named in error messages; the last two run on the gymnasium backend only.
MUJOCO_TASKS = (*NATIVE_TASKS, "Swimmer-v5", "Reacher-v5")
# What backend="warp" runs: the tasks that observe and reward qpos and qvel only. Not Humanoid (MuJoCo
# Warp has no PGS solver) nor Ant (mujoco_warp 4.0.0 orients a steep capsule's friction pyramid on the
# floor unlike MuJoCo, so Ant's feet slide differently: an O(1) difference, not float32 rounding).
WARP_TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "InvertedPendulum-v5")
ENV_BACKENDS = ("native", "gymnasium", "warp")
# The simulators whose tasks are named "<prefix>:<task>"; they change a task through its config.
MANAGER_SIMULATORS = ("isaaclab", "mjlab")


def env_backend(name: str, backend: str | None = None) -> str:
    """The backend ``make_env`` uses for ``name``: ``backend`` checked, or native where it has the task."""
    if backend not in (None, *ENV_BACKENDS):
        raise ValueError(
            f"unknown backend {backend!r}: choose 'native', 'gymnasium' or 'warp' (or None for the default)."
        )
    if backend == "native" and name not in NATIVE_TASKS:
        raise ValueError(
            f"backend='native' has no {name!r} (it runs {', '.join(NATIVE_TASKS)}): use backend='gymnasium'."
        )
    if backend == "warp" and name not in WARP_TASKS:
        raise ValueError(f"backend='warp' has no {name!r}: it runs {', '.join(WARP_TASKS)}.")
    return backend or ("native" if name in NATIVE_TASKS else "gymnasium")


def check_env(name: str, backend: str | None = None) -> str:
    """The env backend that will run ``name`` (isaaclab, mjlab, native, gymnasium or warp).

    A one-line ValueError naming the env if none can.
    """
    if name.startswith("isaaclab:"):
        check_isaaclab_task(name.split(":", 1)[1])
        return "isaaclab"
    if name.startswith("mjlab:"):
        from simeval.envs import mjlab

        mjlab.check_task(name.split(":", 1)[1])
        return "mjlab"
    import gymnasium

    if name not in gymnasium.registry:
        raise ValueError(
            f"unknown env {name!r}: not a gymnasium id (e.g. HalfCheetah-v5, Hopper-v5), "
            "isaaclab:<task> or mjlab:<task>."
        )
    return env_backend(name, backend)


def simulator_of(name: str, backend: str | None = None) -> str:
    """The simulator that builds ``name`` (``isaaclab``, ``mjlab`` or an env backend), from its id alone.

    Nothing is imported and no registry is read: a ValueError (one line) only for a
    ``backend`` that cannot run ``name`` (:func:`env_backend`).
    """
    prefix, colon, _ = name.partition(":")
    if colon and prefix in MANAGER_SIMULATORS:
        return prefix
    return env_backend(name, backend)


def check_condition(name: str, condition: Condition, backend: str | None = None) -> None:
    """Whether the simulator of ``name`` (on ``backend``) can apply ``condition``; else a one-line ValueError.

    Observation and action settings apply on every simulator; MuJoCo physics settings
    (``body_mass_scale``, ``friction_scale``, ``gravity``) on the native backend only; ``cfg``
    overrides on Isaac Lab and mjlab tasks only. Checked where a suite is loaded, where the
    launcher learns ``--env-backend``, and where ``make_env`` builds the env.
    """
    simulator = simulator_of(name, backend)
    physics = ", ".join(condition.physics)
    if physics and simulator in MANAGER_SIMULATORS:
        example = "events.add_pole_mass" if simulator == "isaaclab" else "events.foot_friction_slide"
        raise ValueError(
            f"{physics} set the native MuJoCo env's physics; on {name} change "
            f"physics through the task's config: a cfg override of an event term (e.g. {example})."
        )
    if physics and simulator != "native":
        advice = (
            "use backend='native', or observation/action conditions"
            if name in NATIVE_TASKS
            else f"the native backend runs {', '.join(NATIVE_TASKS)}; give {name} observation/action conditions"
        )
        raise ValueError(
            f"{physics} set MuJoCo physics, which only the native backend changes; {name} is built on the "
            f"{simulator} backend: {advice}."
        )
    if condition.cfg and simulator not in MANAGER_SIMULATORS:
        raise ValueError(f"cfg overrides apply to Isaac Lab and mjlab tasks only, not {name}.")


def check_isaaclab_task(task: str) -> None:
    """Isaac Lab installed and ``task`` registered, checked before any worker starts.

    With Isaac Sim installed, importing Isaac Lab's tasks here would come
    before the simulation app: only the installation is checked then.
    """
    import importlib.util

    from simeval.envs import isaaclab

    if importlib.util.find_spec("isaacsim") is not None:
        isaaclab.check_installed()
    else:
        isaaclab.check_task(task)


def task_config(name: str) -> Any | None:
    """The env config of ``isaaclab:<task>`` or ``mjlab:<task>``, built without its env (no simulation); else None.

    What a suite's ``cfg`` overrides are checked against when the suite is loaded.
    None where it cannot be built in this process: another kind of env, the
    simulator not installed here or an id it does not register (:func:`check_env`
    says why), or Isaac Sim installed (Isaac Lab's tasks are imported only after its
    app starts in the worker, which checks the overrides before it builds the env).
    """
    import importlib.util

    from simeval.errors import EnvError

    prefix, _, task = name.partition(":")
    try:
        if prefix == "isaaclab" and importlib.util.find_spec("isaacsim") is None:
            from simeval.envs import isaaclab

            return isaaclab.env_cfg(task)
        if prefix == "mjlab":
            from simeval.envs import mjlab

            return mjlab.env_cfg(task)
    except EnvError:
        return None
    return None
