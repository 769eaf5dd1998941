"""--workers K on Ray: K checkpoints at once, each exactly once, restart-safe; one checkpoint split K ways."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest
from launch_helpers import cli, popen_cli, write_checkpoints

ROUNDS = ("--episodes", "4", "--num-envs", "4", "--max-steps", "300")


def _records(out) -> list[dict]:
    path = os.path.join(out, "results.jsonl")
    return [json.loads(x) for x in open(path) if x.strip()] if os.path.exists(path) else []


def _returns(records) -> dict:
    return {r["checkpoint_name"]: r["episode_returns"] for r in records if r["status"] == "ok"}


def test_two_workers_sweep_each_checkpoint_once_survive_sigterm_and_match_one_worker(tmp_path):
    ckpt, out, ref = tmp_path / "ckpt", tmp_path / "out", tmp_path / "ref"
    steps = [1000 * (i + 1) for i in range(6)]
    names = sorted(os.path.basename(p) for p in write_checkpoints(str(ckpt), steps=steps))
    sweep = ("--watch", str(ckpt), "--out", str(out), "--backend", "ray", "--workers", "2", *ROUNDS)
    proc = popen_cli(*sweep)
    deadline = time.monotonic() + 240
    while len(_records(out)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert len(_records(out)) >= 2, proc.stderr.read()[-3000:] if proc.poll() is not None else "no results in time"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    first = _records(out)
    assert len(first) < len(steps) and len({r["checkpoint_name"] for r in first}) == len(first)

    (ckpt / "DONE").write_text("")
    proc = popen_cli(*sweep)
    assert proc.wait(300) == 0, proc.stderr.read()[-3000:]
    records = _records(out)
    assert Counter(r["checkpoint_name"] for r in records) == Counter(names)  # none lost, none repeated
    assert all(r["status"] == "ok" for r in records)
    pids = {w["pid"] for r in records[len(first) :] for w in r["workers"]}
    assert len(pids) == 2  # two workers shared the rest

    reference = cli("--watch", str(ckpt), "--out", str(ref), *ROUNDS, timeout=300)  # one thread worker
    assert reference.returncode == 0, reference.stderr[-2000:]
    assert _returns(records) == _returns(_records(ref))  # the same numbers as one worker


def test_one_checkpoint_split_over_two_workers_gives_the_numbers_of_one(tmp_path):
    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(5000,))
    args = ("--checkpoint", path, "--episodes", "10", "--num-envs", "8", "--max-steps", "100")
    split = cli(*args, "--out", str(tmp_path / "split"), "--backend", "ray", "--workers", "2", timeout=300)
    assert split.returncode == 0, split.stderr[-2000:]
    whole = cli(*args, "--out", str(tmp_path / "whole"), timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    (record,) = _records(tmp_path / "split")
    assert [w["worker"] for w in record["workers"]] == [0, 1]
    assert record["episode_returns"] == _records(tmp_path / "whole")[0]["episode_returns"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "0", "--backend", "ray"), "--workers must be >= 1, got 0."),
        (("--workers", "2"), "--workers 2 needs --backend ray"),
        (("--workers", "2", "--backend", "process"), "--workers 2 needs --backend ray"),
        (("--workers", "2", "--backend", "ray", "--serve", "x"), "--serve runs one named worker"),
        (("--max-restarts", "-1", "--backend", "ray"), "--max-restarts must be >= 0"),
    ],
)
def test_bad_worker_flags_are_one_line_and_exit_2(args, message, tmp_path):
    proc = cli(*args, "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert message in line


def test_more_gpus_than_the_cluster_has_for_a_sweep_is_one_line_before_any_worker(ray_cluster, tmp_path):
    write_checkpoints(str(tmp_path / "ckpt"), steps=(1000,))
    env = {"RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    start = time.monotonic()
    proc = cli(
        "--watch", str(tmp_path / "ckpt"), "--backend", "ray", "--workers", "4", "--num-gpus", "1",
        "--out", str(tmp_path / "out"), env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert "4 Ray eval worker(s) with num_gpus=1 ask for 4 GPUs but the Ray cluster has 1" in line
    assert time.monotonic() - start < 60
    assert _records(tmp_path / "out") == []  # no checkpoint recorded as failed: the run's settings were wrong
