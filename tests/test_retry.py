"""A bad checkpoint never poisons a watched run; which failures a resume retries; --until-step always ends a run.

The "bad" checkpoints are real files: a genuine simeval checkpoint whose policy_kwargs do not match its own
weights (its worker builds the policy, then the round fails: ``error_kind: "evaluation"``), one whose VecNorm
statistics are empty (the run's plan; its round fails), one that names an env no launcher can build (it fails
before any worker starts), a genuine checkpoint of another env (a plan the run does not evaluate), and a file
that is no checkpoint at all (unreadable, with a step).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
from launch_helpers import in_process, read_records, small_suite, write_checkpoints

SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30", "--poll-interval", "0.2")
CELLS = 2
SUITE = small_suite("retry", "obs-noise: {observation_noise: 0.1}")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Good checkpoints at 500..2000, and one file of each bad kind, each written once for the module."""
    import torch

    from simeval import save_checkpoint
    from simeval.envs import make_env
    from simeval.policies import gaussian_actor

    root = tmp_path_factory.mktemp("files")
    good = write_checkpoints(str(root / "good"), steps=(500, 1000, 1500, 2000))
    out = {f"good_{step}": path for step, path in zip((500, 1000, 1500, 2000), good, strict=True)}
    env = make_env("HalfCheetah-v5", num_envs=2, seed=0)
    env.rollout(5, break_when_any_done=False)
    actor = gaussian_actor(env, hidden=(16,))
    for name, kwargs, env_name in (("misfit", {"hidden": [8, 8]}, "HalfCheetah-v5"), ("no_env", None, "NoSuchEnv-v0")):
        path = str(root / f"{name}.pt")  # genuine simeval checkpoints, written as training writes them
        save_checkpoint(path, actor, 0, obs_norm=env.transform[2], env=env_name, policy_kwargs=kwargs)
        out[name] = path
    env.close()
    (out["hopper"],) = write_checkpoints(str(root / "hopper"), steps=(1200,), env_name="Hopper-v5")
    stats = torch.load(out["good_1000"], weights_only=True)
    count = "__extra_state__/./count.-|-.observation"
    stats["obs_norm"][count] = torch.zeros_like(stats["obs_norm"][count])  # VecNorm statistics of no step
    torch.save(stats, root / "no_stats.pt")  # the run's plan; its round fails on the empty statistics
    out["no_stats"] = str(root / "no_stats.pt")
    broken = root / "broken.pt"
    torch.save({"format": "simeval-checkpoint/1", "step": 0}, broken)  # its step peeks, it does not load
    out["broken"] = str(broken)
    return out


def _place(files: dict[str, str], directory, step: int, kind: str) -> None:
    """``files[kind]`` as ``directory/step_<step>.pt``, recording ``step``, written a minute ago (settled)."""
    import torch

    target = os.path.join(directory, f"step_{step:07d}.pt")
    payload = torch.load(files[kind], weights_only=True)
    payload["step"] = step
    torch.save(payload, target)
    old = time.time() - 60  # not a file training is still writing (sources.SETTLE_SECONDS)
    os.utime(target, (old, old))


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    proc = in_process(*args, *SMALL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def _by_name(out) -> dict[str, list[dict]]:
    lines: dict[str, list[dict]] = {}
    for r in read_records(out):
        lines.setdefault(r["checkpoint_name"], []).append(r)
    return lines


def test_a_checkpoint_that_fails_never_fixes_the_plan_and_retry_failed_evaluates_it_again(files, tmp_path):
    """The lowest checkpoints cannot be evaluated; the genuine ones after them are (they used to be refused)."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    _place(files, ckpt, 200, "no_env")  # fails before any worker: it used to end the whole run (exit 2)
    _place(files, ckpt, 500, "misfit")  # its worker builds a policy its weights do not fit
    for step in (1000, 2000):
        _place(files, ckpt, step, f"good_{step}")
    (ckpt / "DONE").write_text("")
    _run("--watch", str(ckpt), "--out", str(out))
    lines = _by_name(out)
    (no_env,) = lines.pop("step_0000200.pt")
    assert no_env["status"] == "failed" and "NoSuchEnv-v0" in no_env["error"]
    assert (no_env["error_kind"], no_env["retry"]) == ("plan", "resume")
    (misfit,) = lines.pop("step_0000500.pt")
    assert misfit["status"] == "failed" and "do not fit" in misfit["error"]
    assert (misfit["error_kind"], misfit["retry"]) == ("evaluation", "--retry-failed")
    assert {name: [r["status"] for r in rs] for name, rs in lines.items()} == {
        "step_0001000.pt": ["ok"],
        "step_0002000.pt": ["ok"],
    }, lines
    assert lines["step_0001000.pt"][0]["plan"]["policy_kwargs"] == {"hidden": [16]}

    resumed = _run("--watch", str(ckpt), "--out", str(out))
    (said,) = [line for line in resumed.stdout.splitlines() if "failed before" in line]
    assert said.startswith("2 checkpoint(s) failed before: 1 evaluated again now") and "--retry-failed" in said
    lines = _by_name(out)
    assert len(lines["step_0000200.pt"]) == 2 and len(lines["step_0000500.pt"]) == 1  # only the plan failure

    _place(files, ckpt, 500, "good_500")  # the file is fixed: --retry-failed evaluates it again
    again = _run("--watch", str(ckpt), "--out", str(out), "--retry-failed")
    assert "2 checkpoint(s) failed before: evaluating them again (--retry-failed)." in again.stdout
    lines = _by_name(out)
    assert [r["status"] for r in lines["step_0000500.pt"]] == ["failed", "ok"]
    assert [len(lines[f"step_{s:07d}.pt"]) for s in (1000, 2000)] == [1, 1]  # ok lines never run again

    from simeval.report.runs import read_results

    assert [(r["step"], r["status"]) for r in read_results(str(out))] == [(500, "ok"), (1000, "ok"), (2000, "ok")]


def test_a_plan_mismatch_is_per_checkpoint_and_a_resume_retries_it_under_the_runs_plan(files, tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    _place(files, ckpt, 1000, "good_1000")
    _place(files, ckpt, 1200, "hopper")  # a genuine checkpoint of another env
    (ckpt / "DONE").write_text("")
    _run("--watch", str(ckpt), "--out", str(out))
    first = _by_name(out)
    assert first["step_0001000.pt"][0]["status"] == "ok"
    (mismatch,) = first["step_0001200.pt"]
    assert (mismatch["status"], mismatch["error_kind"], mismatch["retry"]) == ("failed", "plan", "resume")
    assert "needs Hopper-v5" in mismatch["error"] and "this run evaluates HalfCheetah-v5" in mismatch["error"]

    resumed = _run("--watch", str(ckpt), "--out", str(out))
    assert "1 checkpoint(s) failed before: evaluating them again (a plan mismatch" in resumed.stdout
    again = _by_name(out)["step_0001200.pt"]
    assert len(again) == 2  # retried by itself, and still held to the plan of the run's ok lines
    assert again[-1]["error_kind"] == "plan" and "this run evaluates HalfCheetah-v5" in again[-1]["error"]


@pytest.mark.parametrize("kind", ["no_stats", "no_env", "broken"])
def test_until_step_ends_the_run_whatever_the_last_checkpoints_outcome(files, tmp_path, kind):
    """The checkpoint at --until-step fails in its round, before any worker, or to load: the run ends anyway."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    _place(files, ckpt, 1000, "good_1000")
    _place(files, ckpt, 2000, kind)  # no DONE: only --until-step can end the run
    _run("--watch", str(ckpt), "--out", str(out), "--until-step", "2000", timeout=90)
    lines = _by_name(out)
    assert lines["step_0001000.pt"][0]["status"] == "ok"
    (last,) = lines["step_0002000.pt"]
    expected = {"no_stats": "evaluation", "no_env": "plan", "broken": "checkpoint"}[kind]
    assert (last["status"], last["step"], last["error_kind"]) == ("failed", 2000, expected)

    if kind == "broken":  # a resume finds the run ended: it evaluates nothing, and ends
        resumed = _run("--watch", str(ckpt), "--out", str(out), "--until-step", "2000", timeout=90)
        assert "reached --until-step 2000; done." in resumed.stdout
        assert len(read_records(out)) == 2


def test_a_suite_retries_failed_cells_and_unreadable_files_with_the_flag_and_ends_at_until_step(files, tmp_path):
    ckpt, out, suite = tmp_path / "ckpt", tmp_path / "out", tmp_path / "retry.yaml"
    suite.write_text(SUITE)
    ckpt.mkdir()
    _place(files, ckpt, 1000, "good_1000")
    _place(files, ckpt, 1500, "misfit")  # each of its cells fails in its round
    _place(files, ckpt, 2000, "broken")  # unreadable, at --until-step: no DONE, the run must end on it
    run = ("--suite", str(suite), "--watch", str(ckpt), "--out", str(out), "--until-step", "2000")
    proc = in_process(*run, "--poll-interval", "0.2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = _by_name(out)
    assert [r["status"] for r in lines["step_0001000.pt"]] == ["ok"] * CELLS
    assert [(r["status"], r["error_kind"]) for r in lines["step_0001500.pt"]] == [("failed", "evaluation")] * CELLS
    assert [(r["status"], r["error_kind"], "task" in r) for r in lines["step_0002000.pt"]] == [
        ("failed", "checkpoint", False)
    ]

    resumed = in_process(*run, "--poll-interval", "0.2")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming: {2 * CELLS} cell evaluation(s)" in resumed.stdout
    (said,) = [line for line in resumed.stdout.splitlines() if "failed before" in line]
    assert said.startswith(f"{CELLS + 1} evaluation(s) failed before: ") and "--retry-failed" in said
    assert len(read_records(out)) == 2 * CELLS + 1

    _place(files, ckpt, 1500, "good_1500")
    _place(files, ckpt, 2000, "good_2000")
    again = in_process(*run, "--poll-interval", "0.2", "--retry-failed")
    assert again.returncode == 0, again.stderr[-2000:]
    lines = _by_name(out)
    assert [r["status"] for r in lines["step_0001500.pt"]] == ["failed"] * CELLS + ["ok"] * CELLS
    assert [r["status"] for r in lines["step_0002000.pt"]] == ["failed"] + ["ok"] * CELLS

    from simeval.report.runs import read_results

    newest = read_results(str(out))  # the newest line of each (checkpoint, cell)
    assert sorted((r["step"], r["condition"]) for r in newest) == sorted(
        (step, c) for step in (1000, 1500, 2000) for c in ("nominal", "obs-noise")
    )


def test_two_evaluators_wait_for_a_failing_plan_before_taking_the_next_one(files, tmp_path):
    """--workers 2: the next checkpoint needs another plan while the first one's runs; it waits, then rebuilds."""
    from simeval.launch.cells import nominal
    from simeval.launch.cli import Parsed
    from simeval.launch.config import LaunchConfig
    from simeval.launch.pipeline import Jobs, Pipeline
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session
    from simeval.launch.sources import Watcher

    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    _place(files, ckpt, 500, "misfit")
    for step in (1000, 1500):
        _place(files, ckpt, step, f"good_{step}")
    (ckpt / "DONE").write_text("")
    # Two thread evaluators stand in for two Ray workers (the same dispatch; validate() wants Ray for K > 1).
    cfg = LaunchConfig(watch=str(ckpt), workers=2, episodes=2, num_envs=2, max_steps=30, poll_interval=0.05)
    stop = threading.Event()
    session = Session(Parsed(cfg, [], set(), None), str(out), stop)
    log = ResultsLog(str(out), logger=None)
    try:
        assert Pipeline(session, log, Jobs(nominal)).run(Watcher(str(ckpt), set(), stop, 0.05)) == 0
    finally:
        session.close()
    lines = {r["checkpoint_name"]: r for r in read_records(out)}
    assert lines["step_0000500.pt"]["error_kind"] == "evaluation"
    assert lines["step_0001000.pt"]["status"] == lines["step_0001500.pt"]["status"] == "ok"
    assert all(r["plan"]["policy_kwargs"] == {"hidden": [16]} for r in lines.values() if r["status"] == "ok")
