"""Helpers for the launcher tests: checkpoints, a CLI runner, factories for workers."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")


def write_checkpoints(directory, steps=(1000, 2000, 3000), env_name="HalfCheetah-v5", hidden=(16,)):
    """Checkpoints as training writes them: a Gaussian actor and warmed VecNorm statistics."""
    import torch

    from simeval import save_checkpoint
    from simeval.envs import make_env
    from simeval.policies import gaussian_actor

    env = make_env(env_name, num_envs=2, seed=0)
    env.rollout(20, break_when_any_done=False)
    paths = []
    for i, step in enumerate(steps):
        torch.manual_seed(i)
        actor = gaussian_actor(env, hidden=hidden)
        paths.append(
            save_checkpoint(
                os.path.join(directory, f"step_{step:07d}.pt"), actor, step, obs_norm=env.transform[2], env=env_name
            )
        )
    env.close()
    return paths


def _env(extra: dict | None) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS]), **(extra or {})}


def cli(
    *args: str, env: dict | None = None, timeout: float = 240, cwd: str | None = None
) -> subprocess.CompletedProcess:
    full_env = _env(env)
    return subprocess.run(
        [sys.executable, "-m", "simeval.launch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd or REPO,
    )


def popen_cli(*args: str, env: dict | None = None, cwd: str | None = None) -> subprocess.Popen:
    full_env = _env(env)
    return subprocess.Popen(
        [sys.executable, "-m", "simeval.launch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
    )


def raising_policy(env, **kwargs):
    raise RuntimeError("policy factory broke on purpose")
