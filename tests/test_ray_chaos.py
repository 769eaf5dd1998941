"""Faults on a real two-node Ray cluster while a suite runs over ``--workers 2``, on a seeded schedule.

A suite of three cells over three checkpoints runs on the Ray backend, two
eval workers at once. At seeded points in the first half of the run (after
the k-th result, plus a seeded delay) the schedule SIGKILLs an eval worker's
process, the second node's raylet (once) and the launcher itself (restarted
each time). Afterwards every checkpoint x cell is in results.jsonl exactly
once, all ok, with the numbers of an uninterrupted run on the process backend,
the worker deaths counted in the records' ``restarts`` and the launcher's in
their ``attempts``.
``SIMEVAL_CHAOS_SEED`` picks the schedule; ``SIMEVAL_CHAOS_KILLS`` the number
of worker kills.
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
import soak
from launch_helpers import FAULT_CELLS, FAULT_SUITE, launch_suite, read_records, write_checkpoints

SEED = int(os.environ.get("SIMEVAL_CHAOS_SEED", "11"))
WORKER_KILLS = int(os.environ.get("SIMEVAL_CHAOS_KILLS", "3"))
LAUNCHER_KILLS = 1
STEPS = (1000, 2000, 3000)
SUITE = FAULT_SUITE.format(name="chaos")

pytestmark = pytest.mark.timeout(1200)


def _launch(suite, ckpt, out, *flags: str, address: str | None = None) -> subprocess.Popen:
    return launch_suite(suite, ckpt, out, *flags, env={"RAY_ADDRESS": address} if address else None)


def _eval_workers(cluster_pid: int) -> list[int]:
    """The cluster's eval-worker processes (Ray names an actor's process ``ray::EvalActor``)."""
    return sorted(pid for pid in soak.descendants(cluster_pid) if _cmdline(pid).startswith("ray::EvalActor"))


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""  # it ended meanwhile


def _schedule(rng: random.Random) -> list[tuple[int, float, str]]:
    """(results seen, then seconds, fault): when each fault fires, all in the first half of the run (so the run
    cannot finish before one fires) and the rest of it then shows the recovery."""
    half = len(STEPS) * FAULT_CELLS // 2
    faults = ["worker"] * WORKER_KILLS + ["raylet"] + ["launcher"] * LAUNCHER_KILLS
    return sorted((rng.randrange(0, half + 1), rng.uniform(0.0, 4.0), fault) for fault in faults)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The suite run once without faults, on the process backend."""
    tmp = tmp_path_factory.mktemp("chaos")
    ckpt = tmp / "ckpt"
    write_checkpoints(str(ckpt), steps=STEPS)
    (ckpt / "DONE").write_text("")
    suite = tmp / "suite.yaml"
    suite.write_text(SUITE)
    proc = _launch(suite, ckpt, tmp / "reference", "--backend", "process")
    assert proc.wait(600) == 0, proc.stderr.read()[-3000:]
    return suite, ckpt, {(r["checkpoint_name"], r["condition"]): r for r in read_records(tmp / "reference")}


def test_a_suite_on_two_nodes_losing_workers_a_raylet_and_its_launcher_ends_with_every_cell_once(
    reference, two_nodes, tmp_path
):
    suite, ckpt, expected = reference
    out = tmp_path / "out"
    flags = ("--backend", "ray", "--workers", "2", "--num-gpus", "1", "--start-timeout", "180", "--max-restarts",
             str(WORKER_KILLS + 2))  # fmt: skip
    rng = random.Random(SEED)
    schedule = _schedule(rng)
    fired = Counter()
    proc = _launch(suite, ckpt, out, *flags, address=two_nodes["address"])
    try:
        for after, delay, fault in schedule:
            deadline = time.monotonic() + 300
            while len(read_records(out)) < after and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(delay)
            if proc.poll() is not None:
                break  # the suite finished before this fault
            if fault == "worker":
                pids = []
                while not pids and proc.poll() is None and time.monotonic() < deadline:
                    pids = _eval_workers(two_nodes["pid"])
                    time.sleep(0.1)
                if pids:
                    os.kill(rng.choice(pids), signal.SIGKILL)
                    fired[fault] += 1
            elif fault == "raylet":
                os.kill(two_nodes["second_raylet_pid"], signal.SIGKILL)  # the second node is lost
                fired[fault] += 1
            else:
                proc.kill()  # the launcher dies; a new one picks up from results.jsonl
                proc.wait(30)
                fired[fault] += 1
                proc = _launch(suite, ckpt, out, *flags, address=two_nodes["address"])
        assert proc.wait(900) == 0, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)

    records = read_records(out)
    keys = Counter((r["checkpoint_name"], r["task"], r["condition"]) for r in records)
    assert len(keys) == len(STEPS) * FAULT_CELLS and set(keys.values()) == {1}, keys  # every checkpoint x cell, once
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    for r in records:  # the uninterrupted run's numbers, whichever worker, node or attempt measured them
        assert r["episode_returns"] == expected[(r["checkpoint_name"], r["condition"])]["episode_returns"]
    journal = Counter(json.loads(line)["key"] for line in (out / "attempts.jsonl").read_text().splitlines())
    for r in records:
        assert r["attempts"] == journal[json.dumps([r["checkpoint_name"], r["task"], r["condition"]])]
    assert fired["worker"] >= 1 and fired["raylet"] == 1, f"faults fired: {dict(fired)} of schedule {schedule}"
    restarts = sum(w["restarts"] for r in records for w in r["workers"])
    relaunched = sum(r["attempts"] - 1 for r in records)
    assert restarts + relaunched >= 1, "no evaluation was re-run: the faults hit nothing"
    print(f"chaos: seed {SEED}, faults fired {dict(fired)}, {restarts} worker restarts and "
          f"{relaunched} re-launched evaluations over {len(records)} cells")  # fmt: skip
