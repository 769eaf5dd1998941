"""Which env ids simeval builds, and with which simulator: checked before any worker starts.

A thin front over the simulator registry (:mod:`simeval.envs.simulators`), kept free of
NumPy, torch and MuJoCo imports, so that the launcher and ``simeval.export`` can check a
name (and ``import simeval.envs`` stays light).
"""

from __future__ import annotations

from typing import Any

from simeval.envs.simulators import check_condition, env_backends, simulator_for, tasks

__all__ = [
    "check_condition",
    "check_env",
    "env_backend",
    "env_backends",
    "task_config",
    "tasks",
]


def env_backend(name: str, backend: str | None = None) -> str:
    """The simulator ``make_env`` uses for the gymnasium id ``name``: ``backend`` checked, or the id's default."""
    return simulator_for(name, backend).name


def check_env(name: str, backend: str | None = None) -> str:
    """The name of the simulator that will run ``name``, checked before any worker starts.

    Installed, and ``name`` one it builds: a one-line ValueError naming the env otherwise.
    A gymnasium id is checked against gymnasium's registry before ``backend`` is.
    """
    sim = simulator_for(name)  # a prefix's simulator (backend does not apply), or a gymnasium id's default
    sim.check(name)
    return sim.name if sim.prefix is not None else simulator_for(name, backend).name


def task_config(name: str) -> Any | None:
    """The env config of a task changed through its config, built without its env (no simulation); else None.

    What a suite's ``cfg`` overrides are checked against when the suite is loaded.
    None where it cannot be built in this process: another kind of env, the
    simulator not installed here or an id it does not register (:func:`check_env`
    says why), or Isaac Sim installed (Isaac Lab's tasks are imported only after its
    app starts in the worker, which checks the overrides before it builds the env).
    """
    return simulator_for(name).task_config(name)
