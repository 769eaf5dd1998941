"""Helpers for the launcher tests: checkpoints, a CLI runner, factories for workers."""

from __future__ import annotations

import contextlib
import io
import json
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


# The fault tests' suite: three cells of HalfCheetah-v5, a few seconds each.
FAULT_SUITE = """\
name: {name}
seed: 0
episodes: 4
num_envs: 2
max_steps: 300
tasks:
  - env: HalfCheetah-v5
    conditions:
      nominal: {{}}
      obs-noise: {{observation_noise: 0.1}}
      action-noise: {{action_noise: 0.2}}
"""
FAULT_CELLS = 3


def launch_suite(suite, ckpt, out, *flags: str, env: dict | None = None) -> subprocess.Popen:
    """``--suite SUITE --watch CKPT`` in a session of its own (a test can SIGKILL it with its workers)."""
    cmd = [sys.executable, "-m", "simeval.launch", "--suite", str(suite), "--watch", str(ckpt), "--out", str(out),
           "--poll-interval", "0.2", *flags]  # fmt: skip
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env), cwd=REPO, start_new_session=True
    )


def read_records(out) -> list[dict]:
    """The records of ``out``/results.jsonl (none before it exists)."""
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def evaluation_key(record: dict) -> str:
    """An evaluation's key as the attempts journal writes it."""
    return json.dumps([record["checkpoint_name"], record["task"], record["condition"]])


def journal_keys(out) -> list[str]:
    """The keys of OUT/attempts.jsonl, one per start of an evaluation, in order (complete lines only)."""
    from simeval import records

    return [entry["key"] for entry in records.read_records(os.path.join(out, "attempts.jsonl"))]


def recorded_keys(out) -> set[str]:
    """The evaluations with a line in OUT/results.jsonl (complete lines only: a torn tail is no record)."""
    from simeval import records

    return {evaluation_key(r) for r in records.read_records(os.path.join(out, "results.jsonl")) if "task" in r}


def small_suite(name: str, second: str) -> str:
    """A suite file's text: HalfCheetah-v5, 2 episodes of 30 steps on 2 sub-envs, a nominal cell and ``second``
    (``"<condition name>: {<setting>: <value>}"``)."""
    return (
        f"name: {name}\nseed: 0\nepisodes: 2\nnum_envs: 2\nmax_steps: 30\ntasks:\n  - env: HalfCheetah-v5\n"
        f"    conditions:\n      nominal: {{}}\n      {second}\n"
    )


def in_process(*args: str, report: bool = False) -> subprocess.CompletedProcess:
    """``python -m simeval.launch ARGS`` (``report``: ``simeval.report``) run in this process, as :func:`cli` returns
    it: no interpreter and torch to start (seconds a call). The launcher's worker sets this thread's torch threads:
    put back."""
    import torch

    if report:
        from simeval.report.cli import main
    else:
        from simeval.launch import main
    threads, out, err = torch.get_num_threads(), io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())
