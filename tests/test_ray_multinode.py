"""A real two-node Ray cluster: sweep workers land on both nodes, and losing one node loses nothing."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

from launch_helpers import popen_cli, read_records, write_checkpoints


def test_sweep_workers_land_on_both_nodes_and_losing_one_node_loses_nothing(two_nodes, tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    steps = [1000 * (i + 1) for i in range(8)]
    names = sorted(os.path.basename(p) for p in write_checkpoints(str(ckpt), steps=steps))
    (ckpt / "DONE").write_text("")
    proc = popen_cli(
        "--watch", str(ckpt), "--out", str(out), "--backend", "ray", "--workers", "2", "--num-gpus", "1",
        "--episodes", "8", "--num-envs", "4", "--max-steps", "1000", "--start-timeout", "120",
        env={"RAY_ADDRESS": two_nodes["address"]},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        nodes = set()
        while len(nodes) < 2 and time.monotonic() < deadline and proc.poll() is None:
            nodes = {w["node_id"] for r in read_records(out) if r.get("status") == "ok" for w in r["workers"]}
            time.sleep(0.2)
        assert nodes == {two_nodes["head_node_id"], two_nodes["second_node_id"]}, (
            proc.stderr.read()[-3000:] if proc.poll() is not None else f"results from {nodes} only"
        )
        before = len(read_records(out))
        os.kill(two_nodes["second_raylet_pid"], signal.SIGKILL)  # the second node's raylet dies mid-sweep
        assert proc.wait(400) == 0, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    records = read_records(out)
    assert before < len(steps), "the sweep ended before the node was lost; nothing was tested"
    assert Counter(r["checkpoint_name"] for r in records) == Counter(names)  # each exactly once
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    assert sorted(r["step"] for r in records) == steps
    rerun = [r for r in records if any(w["restarts"] for w in r["workers"])]
    assert rerun, "no evaluation was re-run after the node loss"
    for record in rerun:
        assert record["workers"][0]["node_id"] == two_nodes["head_node_id"]  # re-run on the surviving node
    later = records[before:]
    assert all(w["node_id"] == two_nodes["head_node_id"] for r in later[1:] for w in r["workers"])
