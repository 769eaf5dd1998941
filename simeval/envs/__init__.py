"""Batched simulator envs: native MuJoCo, gymnasium, MuJoCo Warp and Isaac Lab, one transform layout.

Importing this package loads no NumPy, torch or MuJoCo: :mod:`simeval.envs.catalog`
names what each backend runs, :func:`make_env` imports the simulator it builds.
"""

from __future__ import annotations

from simeval.envs.catalog import (
    ENV_BACKENDS,
    MUJOCO_TASKS,
    NATIVE_TASKS,
    WARP_TASKS,
    check_condition,
    check_env,
    env_backend,
    task_config,
)
from simeval.envs.make import OBS_NORM_ID, make_env

__all__ = [
    "ENV_BACKENDS",
    "MUJOCO_TASKS",
    "NATIVE_TASKS",
    "OBS_NORM_ID",
    "WARP_TASKS",
    "check_condition",
    "check_env",
    "env_backend",
    "make_env",
    "task_config",
]
