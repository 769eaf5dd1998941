"""Faults injected on a seeded schedule while a suite runs: the launcher SIGKILLed at random points, torn last lines.

A suite of three cells over two checkpoints runs on the process backend; the
launcher is SIGKILLed at seeded points (after the k-th result of the run, plus a
seeded delay: before, during and between cells, and around results appends),
sometimes with a partial line appended to results.jsonl as a crash mid-append
leaves one, and restarted until it finishes.
Afterwards every checkpoint x cell is in results.jsonl exactly once, all ok,
with the times it was started (``attempts``) matching the journal, the same
numbers as an uninterrupted run, no eval worker left behind, and each torn
line reported in one line and re-done.

Every fault of the schedule is asserted to have fired, and the recovery to
equal what was injected: each evaluation was started once more for each kill
that caught it running, and each torn line was reported. Every schedule holds
at least one torn line and, from two kills, both kinds of kill.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter

import pytest
from launch_helpers import (
    FAULT_CELLS,
    FAULT_SUITE,
    evaluation_key,
    journal_keys,
    launch_suite,
    read_records,
    recorded_keys,
    write_checkpoints,
)

SEED = int(os.environ.get("SIMEVAL_FAULT_SEED", "7"))
KILLS = int(os.environ.get("SIMEVAL_FAULT_KILLS", "4"))
SUITE = FAULT_SUITE.format(name="faults")

pytestmark = pytest.mark.timeout(900)


def _launch(suite, ckpt, out) -> subprocess.Popen:
    return launch_suite(suite, ckpt, out, "--backend", "process")


def _schedule(rng: random.Random) -> list[tuple[int, float, str, bool]]:
    """Each kill: (results in the file, then seconds; "group" or "alone"; whether a torn line follows it).

    A kill comes once the run has that many results (0 to 3 of 6: a launch that finds them already there
    is killed that many seconds after it started, in its start-up or first cell), then the delay; so every
    kill lands while at least three cells are left and the run cannot end before it. Drawn from the seed,
    then completed so that every schedule (CI's too) has a torn line and, from two kills, both kinds:
    the launcher with its workers, and the launcher alone.
    """
    assert KILLS >= 1, "SIMEVAL_FAULT_KILLS must be at least 1"
    kills = [
        [rng.randrange(0, FAULT_CELLS + 1), rng.uniform(0.5, 6.0), rng.choice(("group", "alone")), rng.random() < 0.5]
        for _ in range(KILLS)
    ]
    if KILLS >= 2 and len({kind for *_, kind, _ in kills}) == 1:
        flip = kills[rng.randrange(KILLS)]
        flip[2] = "alone" if flip[2] == "group" else "group"
    if not any(tear for *_, tear in kills):
        kills[rng.randrange(KILLS)][3] = True
    return sorted(tuple(k) for k in kills)


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
    schedule = _schedule(random.Random(SEED))
    out = tmp_path / "out"
    results = out / "results.jsonl"
    fired, torn, tails, reported = Counter(), 0, 0, 0
    hit: Counter = Counter()  # evaluation key -> the kills that caught it running (started, not yet recorded)
    for n, (after, delay, kind, tear) in enumerate(schedule):
        started = len(journal_keys(out))  # the journal's length before this launch
        proc = _launch(suite, ckpt, out)
        deadline = time.monotonic() + 300
        while len(recorded_keys(out)) < after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(delay)  # seeded: in the start-up, mid-cell, between an append and the next start
        assert proc.poll() is None, f"the run ended before kill {n} of {schedule} fired: {proc.stderr.read()[-2000:]}"
        if kind == "group":
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers, as a node failure would
        else:
            proc.kill()  # the launcher alone: its workers must notice and end
        proc.wait(30)
        fired[kind] += 1
        time.sleep(2.0)  # a worker the launcher left alone notices its parent is gone
        assert _session_alive(proc.pid) == [], "an eval worker outlived the SIGKILLed launcher"
        reported += proc.stdout.read().count("dropped a partial last line")
        # Only the launcher appends to the two files and it is dead now, so they are final: what this launch
        # started (journaled) and did not record is what the kill caught running. A kill before the first start
        # or between an append and the next start caught nothing; the next launch starts each caught one again.
        recorded = recorded_keys(out)
        hit.update(key for key in journal_keys(out)[started:] if key not in recorded)
        if tear:  # what a crash in the middle of an append leaves (in a file of its own before the first record)
            # A launch killed before it repaired the file leaves the last torn line there: this one then extends
            # that partial line, and the next launch drops (and reports) both as one.
            tails += not results.exists() or results.read_bytes().endswith(b"\n") or results.stat().st_size == 0
            with open(results, "a") as f:
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
    journal = Counter(journal_keys(out))
    for r in records:  # the times each evaluation was started, killed starts included ...
        assert r["attempts"] == journal[evaluation_key(r)]
        # ... once, and once more for each kill that caught it running: no more, no fewer
        assert r["attempts"] == 1 + hit[evaluation_key(r)], (evaluation_key(r), r["attempts"], dict(hit))
    # every scheduled fault fired
    assert fired == Counter(kind for *_, kind, _ in schedule), (dict(fired), schedule)
    assert torn == sum(tear for *_, tear in schedule) >= 1 and tails >= 1
    print(f"faults: seed {SEED}, {sum(fired.values())} SIGKILLs ({dict(fired)}), {sum(hit.values())} of them caught "
          f"a running evaluation, {torn} torn lines ({tails} partial tails); {len(records)} cells")  # fmt: skip
    assert reported == tails  # each partial tail was reported (one line each) and its evaluation re-done
