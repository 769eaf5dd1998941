"""Batched simulator envs, one transform layout, whatever simulator of :mod:`simeval.envs.simulators` builds them.

Importing this package loads no NumPy, torch or MuJoCo: :mod:`simeval.envs.catalog`
names what each simulator runs, :func:`make_env` imports the simulator it builds.
"""

from __future__ import annotations

from simeval.envs.catalog import check_condition, check_env, env_backend, env_backends, task_config, tasks
from simeval.envs.make import OBS_NORM_ID, make_env

__all__ = [
    "OBS_NORM_ID",
    "check_condition",
    "check_env",
    "env_backend",
    "env_backends",
    "make_env",
    "task_config",
    "tasks",
]
