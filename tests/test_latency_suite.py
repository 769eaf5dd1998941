"""The latency condition runs in a suite and compares: ``inference_delay`` cells through the launcher, two
checkpoints, then ``python -m simeval.report compare A B`` (issue 35).

What a user relies on: one line per (checkpoint, cell), each cell's episodes on the same seeds for
both checkpoints (and across the cells of the task), a delay of 0 that is the nominal cell, and a
compare whose every row's numbers, interval and verdict are the paired t-test's on those lines'
returns (the oracle of tests/test_compare.py, which reads the files itself and shares no code with
simeval.stats).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from launch_helpers import REPO, popen_cli, read_records, write_checkpoints
from test_compare import _check_row, _oracle

SUITE = """\
name: latency
episodes: 4
seed: 0
num_envs: 2
max_steps: 30
tasks:
  - env: HalfCheetah-v5
    conditions:
      nominal: {}
      d0: {inference_delay: 0}
      d2: {inference_delay: 2}
      d4-tail: {inference_delay: {steps: 4, while_waiting: tail}}
"""
CONDITIONS = ["nominal", "d0", "d2", "d4-tail"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[str, str]:
    """Two checkpoints (other weights), each evaluated on the latency suite by the launcher, side by side."""
    root = tmp_path_factory.mktemp("latency")
    a, b = write_checkpoints(str(root), steps=(1000, 2000))
    suite = root / "latency.yaml"
    suite.write_text(SUITE)
    outs = [str(root / "a"), str(root / "b")]
    procs = [
        popen_cli("--suite", str(suite), "--checkpoint", ck, "--out", out) for ck, out in zip((a, b), outs, strict=True)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    return outs[0], outs[1]


def test_every_latency_cell_is_one_line_on_the_same_seeds_for_both_checkpoints(runs):
    lines = [{r["condition"]: r for r in read_records(out) if r["status"] == "ok"} for out in runs]
    for cells in lines:
        assert list(cells) == CONDITIONS
        assert cells["d4-tail"]["condition_settings"] == {"inference_delay": {"steps": 4.0, "while_waiting": "tail"}}
        seeds = {c: cells[c]["episode_seeds"] for c in CONDITIONS}
        assert all(s == seeds["nominal"] for s in seeds.values()) and len(set(seeds["nominal"])) == 4
        assert cells["d0"]["episode_returns"] == cells["nominal"]["episode_returns"]  # no delay: the nominal env
        assert cells["d2"]["episode_returns"] != cells["nominal"]["episode_returns"]  # the delay bites
        assert cells["d4-tail"]["episode_returns"] != cells["d2"]["episode_returns"]
    a, b = lines
    assert all(a[c]["episode_seeds"] == b[c]["episode_seeds"] for c in CONDITIONS)  # paired episode for episode
    assert all(a[c]["episode_returns"] != b[c]["episode_returns"] for c in CONDITIONS)  # two policies


def test_compare_gives_each_latency_cell_the_paired_verdict_of_its_lines(runs):
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.report", "compare", *runs, "--json"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["task"], r["condition"]) for r in rows] == [("HalfCheetah-v5", c) for c in CONDITIONS] + [("*", "*")]
    oracle = _oracle(*runs)
    for row in rows:
        _check_row(row, oracle[(row["task"], row["condition"])])
        assert row["task"] == "*" or row["episodes"] == 4
