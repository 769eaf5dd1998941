"""Faults injected on a seeded schedule while a suite runs: the launcher SIGKILLed at random points, torn last lines.

A suite of three cells over two checkpoints runs on the process backend; the
launcher is SIGKILLed after seeded random delays (before, during and between
cells, and around results appends), sometimes with a partial line appended to
results.jsonl as a crash mid-append leaves one, and restarted until it finishes.
Afterwards every checkpoint x cell is in results.jsonl exactly once, all ok,
with the times it was started (``attempts``) matching the journal, the same
numbers as an uninterrupted run, no eval worker left behind, and each torn
line reported in one line and re-done.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter

import pytest
from launch_helpers import FAULT_CELLS, FAULT_SUITE, launch_suite, read_records, write_checkpoints

SEED = int(os.environ.get("SIMEVAL_FAULT_SEED", "7"))
KILLS = int(os.environ.get("SIMEVAL_FAULT_KILLS", "4"))
SUITE = FAULT_SUITE.format(name="faults")

pytestmark = pytest.mark.timeout(900)


def _launch(suite, ckpt, out) -> subprocess.Popen:
    return launch_suite(suite, ckpt, out, "--backend", "process")


def _session_alive(pgid: int) -> list[int]:
    """Processes still in the launcher's session (its eval workers, had they outlived it)."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == pgid and fields[0] != "Z":
            alive.append(int(pid))
    return alive


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    ckpt = tmp / "ckpt"
    write_checkpoints(str(ckpt), steps=(1000, 2000))
    (ckpt / "DONE").write_text("")
    suite = tmp / "suite.yaml"
    suite.write_text(SUITE)
    reference = tmp / "reference"
    proc = _launch(suite, ckpt, reference)
    assert proc.wait(600) == 0, proc.stderr.read()[-3000:]
    return suite, ckpt, {(r["checkpoint_name"], r["condition"]): r for r in read_records(reference)}


def test_a_suite_killed_at_seeded_points_ends_with_every_cell_once_and_nothing_lost(setup, tmp_path):
    suite, ckpt, reference = setup
    rng = random.Random(SEED)
    out = tmp_path / "out"
    torn, reported, kills = 0, 0, 0
    for _ in range(KILLS):
        proc = _launch(suite, ckpt, out)
        time.sleep(rng.uniform(0.5, 8.0))  # seeded: before the first cell, mid-cell, between appends
        if proc.poll() is not None:
            break  # it finished before this kill: the run is complete
        if rng.random() < 0.5:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers, as a node failure would
        else:
            proc.kill()  # the launcher alone: its workers must notice and end
        proc.wait(30)
        kills += 1
        time.sleep(2.0)  # a worker the launcher left alone notices its parent is gone
        assert _session_alive(proc.pid) == [], "an eval worker outlived the SIGKILLed launcher"
        stdout = proc.stdout.read()
        reported += stdout.count("dropped a partial last line")
        if rng.random() < 0.5 and (out / "results.jsonl").exists():
            with open(out / "results.jsonl", "a") as f:  # what a crash in the middle of an append leaves
                f.write('{"status": "ok", "step": 1000, "metr')
            torn += 1
    final = _launch(suite, ckpt, out)
    assert final.wait(600) == 0, final.stderr.read()[-3000:]
    reported += final.stdout.read().count("dropped a partial last line")

    records = read_records(out)
    keys = Counter((r["checkpoint_name"], r["task"], r["condition"]) for r in records)
    assert len(keys) == 2 * FAULT_CELLS and set(keys.values()) == {1}, keys  # every checkpoint x cell, exactly once
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    for r in records:  # the same numbers as the uninterrupted run: nothing measured twice differently
        assert r["episode_returns"] == reference[(r["checkpoint_name"], r["condition"])]["episode_returns"]
    journal = Counter(json.loads(line)["key"] for line in (out / "attempts.jsonl").read_text().splitlines())
    for r in records:  # the times each evaluation was started, killed starts included
        assert r["attempts"] == journal[json.dumps([r["checkpoint_name"], r["task"], r["condition"]])]
    assert kills >= 1, "the run finished before any kill: nothing was tested (raise the kill delays)"
    restarted = sum(r["attempts"] > 1 for r in records)
    print(f"faults: seed {SEED}, {kills} SIGKILLs, {torn} torn lines, {restarted} of {len(records)} cells re-run")
    assert reported == torn  # each torn line was reported (one line each) and its evaluation re-done
