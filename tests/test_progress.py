"""The launcher's end-of-run summary and per-result block."""

from __future__ import annotations

import io
import os
import signal
import time

import pytest
from launch_helpers import REPO, cli, popen_cli, write_checkpoints

from simeval.launch.cells import summary
from simeval.launch.summary import RunSummary, retry_command

SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30")


def test_a_watch_run_ends_with_a_summary_row_per_checkpoint_and_the_failure_with_its_retry(tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    write_checkpoints(str(ckpt), steps=(1000, 2000))
    (ckpt / "step_0001500.pt").write_bytes(b"this is not a checkpoint")
    old = time.time() - 60  # not a file training is still writing
    os.utime(ckpt / "step_0001500.pt", (old, old))
    (ckpt / "DONE").write_text("")
    proc = cli("--watch", str(ckpt), "--out", str(out), "--poll-interval", "0.2", *SMALL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("summary: "))
    assert lines[start] == "summary: 3 evaluation(s), 1 failed"
    rows = {line.split()[1]: line.split() for line in lines[start + 2 : start + 5]}
    assert set(rows) == {"step_0001000.pt", "step_0001500.pt", "step_0002000.pt"}
    assert rows["step_0001000.pt"][2] == "ok" and rows["step_0001000.pt"][-2] == "2"
    assert rows["step_0002000.pt"][2] == "ok" and rows["step_0002000.pt"][-2] == "2"
    assert rows["step_0001500.pt"][2] == "failed" and rows["step_0001500.pt"][-2] == "-"
    assert lines[start + 5] == "failed:"
    assert (
        lines[start + 6].startswith("  checkpoint step_0001500.pt: ")
        and "not a readable checkpoint" in lines[start + 6]
    )
    assert lines[start + 7].startswith("retry them with: python -m simeval.launch --watch ")
    assert lines[start + 7].endswith(" --retry-failed")
    block = "\n".join(lines[:start])
    assert "num_episodes    2\n" in block + "\n" and "wall_time       " in block and "num_episodes    2.00" not in block


def test_the_per_result_block_shows_integers_as_integers_and_its_wall_time():
    class Ck:
        path, step = "/runs/step_1.pt", 1

    result = {"eval/reward": 1.5, "eval/episode_length": 1000.0, "eval/num_episodes": 16, "eval/fps": 1234.56}
    rows = summary(result, Ck(), 12.34).splitlines()
    assert "episode_length  1000" in rows and "num_episodes    16" in rows and "fps             1235" in rows
    assert "reward          1.50" in rows and "wall_time       12.3 s" in rows
    assert "episode_length  999.50" in summary({**result, "eval/episode_length": 999.5}, Ck()).splitlines()


def test_the_summary_table_and_the_retry_command():
    s = RunSummary()
    s.ok(
        "a",
        {"metrics": {"reward": 1.0, "reward_ci_low": 0.5, "reward_ci_high": 1.5, "num_episodes": 8}, "wall_time": 75},
    )
    s.failed("b", "boom")
    text = s.render().splitlines()
    assert text[0] == "summary: 2 evaluation(s), 1 failed"
    assert text[2].split() == ["a", "ok", "1.00", "[0.50,", "1.50]", "8", "1m15s"]
    assert text[3].split() == ["b", "failed", "-", "-", "-", "-"]
    assert text[4:6] == ["failed:", "  b: boom"]
    assert retry_command(["--watch", "d d"]) == "python -m simeval.launch --watch 'd d' --retry-failed"
    assert RunSummary().render() == "summary: nothing evaluated in this run"


# -- on_progress: the worker's counts reach the caller on every backend ---------------------------------------------


def _env_fn(num_envs=2):
    from simeval.envs import make_env

    return make_env("HalfCheetah-v5", num_envs=num_envs, seed=0, obs_norm=False)


def _policy(env):
    import torch

    from simeval.policies import gaussian_actor

    torch.manual_seed(0)
    return gaussian_actor(env, hidden=(16,))


def _check_progress(seen, total, step):
    assert seen, "on_progress was never called"
    assert seen[-1].done and seen[-1].episodes == seen[-1].total == total and seen[-1].step == step
    assert all(not p.done for p in seen[:-1])
    episodes = [p.episodes for p in seen]
    steps = [p.env_steps for p in seen]
    assert episodes == sorted(episodes) and steps == sorted(steps)
    assert all(p.total == total for p in seen)
    assert len(seen) >= 2, seen  # at least one report while the round ran
    assert seen[-1].env_steps >= max(steps[:-1])


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_on_progress_sees_increasing_counts_ending_at_the_total(backend):
    from simeval import Evaluator

    seen = []
    ev = Evaluator(
        _env_fn,
        policy_factory=_policy,
        num_trajectories=12,
        max_steps=300,
        backend=backend,
        on_progress=seen.append,
    )
    try:
        result = ev.evaluate(step=7)
        time.sleep(0.2)  # the last call runs on the watcher's thread
        _check_progress(seen, 12, 7)
        assert int(result["eval/num_episodes"]) == 12
    finally:
        ev.shutdown()
    ev = Evaluator(  # the same round without progress: the same numbers
        _env_fn,
        policy_factory=_policy,
        num_trajectories=12,
        max_steps=300,
        backend=backend,
    )
    try:
        again = ev.evaluate(step=7)
    finally:
        ev.shutdown()
    assert float(again["eval/reward"]) == float(result["eval/reward"])


@pytest.mark.ray
def test_on_progress_on_a_sharded_ray_round(ray_cluster):
    from simeval import Evaluator

    seen = []
    ev = Evaluator(
        _env_fn,
        policy_factory=_policy,
        num_trajectories=12,
        max_steps=300,
        backend="ray",
        num_gpus=0,
        num_workers=2,
        on_progress=seen.append,
    )
    try:
        ev.evaluate(step=3)
        time.sleep(0.2)
    finally:
        ev.shutdown()
    _check_progress(seen, 12, 3)


# -- the launcher's progress lines ----------------------------------------------------------------------------------


def test_a_launcher_run_off_a_terminal_prints_plain_progress_lines(tmp_path):
    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(1000,))
    proc = cli(
        "--checkpoint", path, "--out", str(tmp_path / "out"), "--episodes", "8", "--num-envs", "2",
        "--max-steps", "400", env={"SIMEVAL_PROGRESS_INTERVAL_S": "0.5"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("checkpoint step_0001000.pt: ")]
    assert lines, proc.stdout
    first = lines[0]
    assert "/8 episodes" in first and "env-steps/s" in first and "run: 0/1 evaluations done" in first
    assert "\x1b[" not in proc.stdout  # no terminal control codes in a log
    assert proc.stdout.splitlines()[-3] == "summary: 1 evaluation(s), 0 failed"


def test_a_watch_on_an_empty_directory_says_it_waits_once_per_interval_not_per_poll(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    proc = popen_cli("--watch", str(ckpt), "--out", str(tmp_path / "out"), "--poll-interval", "0.1")
    try:
        deadline = time.time() + 60
        out = ""
        while "waiting for checkpoints" not in out and time.time() < deadline:
            out += proc.stdout.readline()
        time.sleep(3)  # some 30 polls
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out + rest
    assert text.count(f"waiting for checkpoints in {ckpt} (0 seen)") == 1, text
    assert "summary: nothing evaluated in this run" in text


def test_the_board_shows_counts_without_eta_where_the_total_is_unknown():
    from simeval.caller.progress import Progress
    from simeval.launch.progress import ProgressBoard, describe

    assert (
        describe("a", Progress(1, 4, None, 1000, 2.0))
        == "a: 4 episodes, 1,000 env-steps, 500 env-steps/s, 0:02 elapsed"
    )
    assert describe("a", Progress(1, 4, 8, 1000, 2.0)).endswith("0:02 elapsed, ETA 0:02")
    stream = io.StringIO()
    board = ProgressBoard(stream, live=False, interval=0.0)
    report = board.callback(0, "b")
    report(Progress(1, 2, 4, 10, 1.0))
    report(Progress(1, 4, 4, 20, 2.0, done=True))  # the end: the result block says it
    board.finished(0)
    assert stream.getvalue().splitlines() == ["b: 2/4 episodes, 10 env-steps, 10 env-steps/s, 0:01 elapsed, ETA 0:01"]
    assert board.run_done == 1


def test_a_launcher_run_on_a_terminal_shows_a_live_bar_and_no_plain_lines(tmp_path):
    """Under a pseudo-terminal: rich's bar (the bar, episodes done of the total, env-steps/s), drawn in place and
    gone at the end (transient), no plain progress lines, and the summary after it."""
    import pty
    import select
    import subprocess
    import sys

    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(1000,))
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "simeval.launch", "--checkpoint", path, "--out", str(tmp_path / "out"),
           "--episodes", "8", "--num-envs", "2", "--max-steps", "400"]  # fmt: skip
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "PYTHONPATH": REPO}
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 240)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, out[-2000:]
    text = out.decode("utf-8", errors="replace")
    assert "\x1b[" in text and "━" in text  # a live display: control codes and rich's bar
    assert "/8" in text and "env-steps/s" in text and "checkpoint step_0001000.pt" in text
    assert "checkpoint step_0001000.pt: " not in text  # the plain progress line is for logs only
    assert "summary: 1 evaluation(s), 0 failed" in text
