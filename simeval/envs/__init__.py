"""Batched simulator envs for tests and the demo."""

from __future__ import annotations

from simeval.envs.make import ENV_BACKENDS, MUJOCO_TASKS, NATIVE_TASKS, OBS_NORM_ID, env_backend, make_env

__all__ = ["ENV_BACKENDS", "MUJOCO_TASKS", "NATIVE_TASKS", "OBS_NORM_ID", "env_backend", "make_env"]
