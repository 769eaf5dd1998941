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

Every fault of the schedule is asserted to have fired, and the recovery to
equal what was injected. For that each kill is made where its effect is known:
a worker is killed while it runs a round (Ray titles its process
``ray::EvalActor.run`` then; it is stopped, its title read again, then killed),
so its round is re-run once, in that record's ``restarts``; the second node is
lost (its raylet and its eval workers killed at once) while each eval worker
there runs a round, so each of their rounds is re-run once; the launcher's
evaluations that were started and not recorded when it died (the journal
against results.jsonl) are each started once more, in ``attempts``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter

import pytest
import soak
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

SEED = int(os.environ.get("SIMEVAL_CHAOS_SEED", "11"))
WORKER_KILLS = int(os.environ.get("SIMEVAL_CHAOS_KILLS", "3"))
LAUNCHER_KILLS = 1
WORKERS = 2  # --workers: cells evaluated at once, one eval worker each
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


RUNNING = "ray::EvalActor.run"  # an eval worker's title while it runs a round ("ray::EvalActor" between calls)


def _running(pid: int) -> bool:
    return _cmdline(pid).strip() == RUNNING


def _frozen(pids: list[int], running: list[int]) -> bool:
    """SIGSTOP ``pids``; True once all are stopped and each of ``running`` still runs a round, else all continued.

    A stopped eval worker still titled ``ray::EvalActor.run`` has not returned its round: Ray sets the title
    back when the call returns, before the result is sent, so the round's caller sees its death.
    """
    for pid in pids:
        _signal(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while not all(_state(pid) in ("T", "t", "") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.005)
    if all(_state(pid) in ("T", "t") for pid in pids) and all(_running(pid) for pid in running):
        return True
    _thaw(pids)
    return False


def _thaw(pids: list[int]) -> None:
    for pid in pids:
        _signal(pid, signal.SIGCONT)


def _node_dead(address: str, node_id: str) -> bool:
    """Whether the cluster's GCS holds the node dead (read with Ray's GCS client: no driver joins the cluster)."""
    from ray._raylet import GcsClient

    nodes = GcsClient(address=address).get_all_node_info(timeout=10)
    (info,) = [info for nid, info in nodes.items() if nid.hex() == node_id]
    return info.state == type(info).DEAD


def _state(pid: int) -> str:
    """The process's state letter ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
    return "" if state in ("Z", "X") else state


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass  # it ended meanwhile


def _in_flight(out, since: int) -> set[str]:
    """The evaluations started after the journal's first ``since`` entries and not recorded (yet)."""
    started = journal_keys(out)[since:]  # read first: one recorded meanwhile is then left out, never added
    recorded = recorded_keys(out)
    return {key for key in started if key not in recorded}


def _schedule(rng: random.Random) -> list[tuple[int, float, str]]:
    """(results seen, then seconds, fault): when each fault fires, all in the first half of the run (so the run
    cannot finish before one fires) and the rest of it then shows the recovery.

    The second node is lost first, in the run's first cell: Ray places the first two eval workers one per node
    then, while later replacements may all land on the head node, leaving the node no worker to lose."""
    half = len(STEPS) * FAULT_CELLS // 2
    faults = ["worker"] * WORKER_KILLS + ["launcher"] * LAUNCHER_KILLS
    rest = sorted((rng.randrange(0, half + 1), rng.uniform(0.0, 4.0), fault) for fault in faults)
    return [(0, rng.uniform(0.0, 2.0), "raylet"), *rest]


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
    hit = Counter()  # rounds a worker or raylet kill caught running, by fault
    relaunched: Counter = Counter()  # evaluation key -> launcher kills that caught it started and not recorded
    orphans: set[int] = set()  # eval workers of a killed launcher (Ray ends them): no round of the run's
    pending: set[str] = set()  # evaluations that may hold a round a kill caught, until recorded
    started = 0  # the journal's entries before the running launcher
    proc = _launch(suite, ckpt, out, *flags, address=two_nodes["address"])

    def alive() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"the suite ended (exit {proc.returncode}) before every fault fired: fired {dict(fired)} of "
                        f"{schedule}; {proc.stderr.read()[-2000:]}")  # fmt: skip
        return True

    def ours(pids: list[int]) -> list[int]:
        orphans.difference_update([p for p in orphans if not _state(p)])  # ended: their pids may be reused
        return [pid for pid in pids if pid not in orphans]

    def lose_the_second_node() -> bool:
        """Kill the second node's raylet while each of the launcher's eval workers runs a round, one or more there.

        Each round there is re-run once, if its replacement cannot land on the dying node: Ray's GCS holds
        the node alive for seconds after its raylet died, so until it holds it dead the launcher stays
        stopped (no new worker asked for) and the workers there stay stopped (no death seen, no result
        sent); then they are killed with their node and the launcher goes on. Both eval workers running
        rounds means neither is being replaced or started, so no worker is on its way to the node either.
        """
        nonlocal pending
        raylet, workers = two_nodes["second_raylet_pid"], ours(_eval_workers(two_nodes["pid"]))
        node = set(soak.descendants(raylet))
        there = [pid for pid in workers if pid in node]
        if len(workers) != WORKERS or not there or not all(_running(pid) for pid in workers):
            return False
        if not _frozen([proc.pid, *workers], workers):
            return False
        if ours(_eval_workers(two_nodes["pid"])) != workers:  # one more started meanwhile
            _thaw([proc.pid, *workers])
            return False
        pending |= _in_flight(out, started)
        os.kill(raylet, signal.SIGKILL)
        _thaw([pid for pid in workers if pid not in there])
        try:
            deadline = time.monotonic() + 120
            while not _node_dead(two_nodes["address"], two_nodes["second_node_id"]):
                assert time.monotonic() < deadline, "the GCS did not hold the second node dead within 120 s"
                time.sleep(0.5)
        finally:
            for pid in there:
                _signal(pid, signal.SIGKILL)
            _thaw([proc.pid])
        hit["raylet"] += len(there)
        return True

    try:
        for after, delay, fault in schedule:
            deadline = time.monotonic() + 300
            while len(recorded_keys(out)) < after and alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(delay)
            done = False
            while not done and alive() and time.monotonic() < deadline:
                if fault == "worker":  # one of the launcher's eval workers, while it runs a round
                    running = [pid for pid in ours(_eval_workers(two_nodes["pid"])) if _running(pid)]
                    victim = rng.choice(running) if running else None
                    if victim is not None and _frozen([victim], [victim]):
                        pending |= _in_flight(out, started)  # its round is one of these
                        os.kill(victim, signal.SIGKILL)
                        hit[fault] += 1
                        done = True
                elif fault == "raylet":
                    done = lose_the_second_node()
                # The launcher: the rounds a kill caught are recorded first. Its death while one is re-run would
                # lose that restart (a new launcher starts the evaluation afresh, counted in attempts instead), and
                # which of the evaluations in flight a killed worker held is not known from outside. It still
                # catches whatever evaluations are running then.
                elif pending <= recorded_keys(out):
                    proc.kill()  # the launcher dies; a new one picks up from results.jsonl
                    proc.wait(30)
                    relaunched.update(_in_flight(out, started))  # final: only the dead launcher wrote these files
                    orphans.update(_eval_workers(two_nodes["pid"]))  # its workers, which Ray ends now
                    pending, started = set(), len(journal_keys(out))
                    proc = _launch(suite, ckpt, out, *flags, address=two_nodes["address"])
                    done = True
                if not done:
                    time.sleep(0.1)
            assert done, f"fault {fault} found no moment to fire within 300 s; fired {dict(fired)} of {schedule}"
            fired[fault] += 1
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
    journal = Counter(journal_keys(out))
    for r in records:
        assert r["attempts"] == journal[evaluation_key(r)]
        # once, and once more for each launcher death that caught it running: no more, no fewer
        assert r["attempts"] == 1 + relaunched[evaluation_key(r)], (evaluation_key(r), r["attempts"], dict(relaunched))
    assert fired == Counter(fault for *_, fault in schedule), f"faults fired: {dict(fired)} of schedule {schedule}"
    assert hit["worker"] == WORKER_KILLS and hit["raylet"] >= 1
    # each round a worker or raylet kill caught was re-run once: no death went uncounted, none counted twice
    restarts = sum(w["restarts"] for r in records for w in r["workers"])
    assert restarts == hit["worker"] + hit["raylet"], (restarts, dict(hit))
    print(f"chaos: seed {SEED}, faults fired {dict(fired)}, {restarts} worker restarts (rounds caught: {dict(hit)}), "
          f"{sum(relaunched.values())} re-launched evaluations over {len(records)} cells")  # fmt: skip
