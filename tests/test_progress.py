"""The launcher's end-of-run summary and per-result block."""

from __future__ import annotations

import os
import time

from launch_helpers import cli, write_checkpoints

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
