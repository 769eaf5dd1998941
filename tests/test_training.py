"""The PPO example: evaluations while it trains, in-process or against a served evaluator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from demo_table import mismatches
from launch_helpers import REPO, TESTS, cli, popen_cli

SHORT = (
    "--frames",
    "4096",
    "--frames-per-batch",
    "1024",
    "--num-envs",
    "2",
    "--epochs",
    "1",
    "--minibatch",
    "256",
    "--eval-every",
    "2048",
    "--eval-episodes",
    "2",
)


EVAL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "50")


def _train(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS]), **(env or {})}
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", "train_ppo.py"), *SHORT, *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=full,
        cwd=REPO,
    )


def test_train_ppo_evaluates_while_training_and_its_checkpoints_evaluate_without_policy(tmp_path):
    ckpt = tmp_path / "ckpt"
    proc = _train("--ckpt-dir", str(ckpt), "--ckpt-every", "2048")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "eval @ 2,048" in proc.stdout or "eval @ 4,096" in proc.stdout, proc.stdout
    names = sorted(os.listdir(ckpt))
    assert names == ["step_000002048.pt", "step_000004096.pt"]
    # The checkpoint names its policy factory: no --policy needed to evaluate it.
    out = tmp_path / "out"
    run = cli("--checkpoint", str(ckpt / names[-1]), "--out", str(out), *EVAL)
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert record["step"] == 4096 and record["env"] == "HalfCheetah-v5"


def test_served_evaluator_takes_weights_streamed_from_a_training_process(ray_cluster, tmp_path):
    address = ray_cluster.get_runtime_context().gcs_address
    out = tmp_path / "served"
    server = popen_cli(
        "--backend", "ray", "--num-gpus", "0", "--serve", "simeval-test-ppo", "--out", str(out), *EVAL,
        env={"RAY_ADDRESS": address},
    )  # fmt: skip
    try:
        line = ""
        deadline = time.time() + 120
        while "serving" not in line and time.time() < deadline:
            line = server.stdout.readline()
            assert line or server.poll() is None, server.stderr.read()[-2000:]
        # The trainer's device and env backend named explicitly (what benchmarks/bench_gpu.py passes).
        train = _train(
            "--eval-serve", "simeval-test-ppo", "--device", "cpu", "--env-backend", "native",
            env={"RAY_ADDRESS": address},
        )  # fmt: skip
        assert train.returncode == 0, train.stderr[-3000:]
        assert "eval @" in train.stdout
        records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip()]
        assert records and all(r["status"] == "ok" and len(r["episode_returns"]) == 2 for r in records)
        assert {r["step"] for r in records} <= {2048, 4096}
        # The served worker writes the launcher's line: where and how each result was evaluated.
        for r in records:
            assert (r["env"], r["env_backend"], r["backend"]) == ("HalfCheetah-v5", "native", "ray")
            assert r["host"] and r["time"] and r["metrics"]["num_episodes"] == 2
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0


def test_make_demo_draws_the_shipped_training_runs_eval_curve(tmp_path):
    from simeval.checkpoints.shipped import SHIPPED_RUN

    full = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.demo"],
        capture_output=True,
        text=True,
        timeout=600,
        env=full,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "settotalmass" not in proc.stdout + proc.stderr  # MuJoCo's deprecation warning is fixed at its source
    rows = {
        line[:42].strip(): float(line[42:52])
        for line in proc.stdout.splitlines()
        if line.startswith(("trained", "untrained", "final"))
    }
    shipped = sorted(int(n[5:14]) for n in os.listdir(SHIPPED_RUN) if n.endswith(".pt"))
    curve = [rows[f"trained, step {step:>9,}"] for step in shipped]
    assert len(curve) == 8 and curve[-1] > 3000  # the final checkpoint is a trained policy
    assert curve[0] < curve[-1] and max(curve[:2]) < min(curve[-2:])  # it learned over the run
    assert rows["final checkpoint, VecNorm stats left out"] < 1000 < curve[-1]
    assert rows["untrained policy"] < 0
    results = next(line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("results:"))
    png = next(line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("plot:"))
    steps = [json.loads(line)["step"] for line in open(os.path.join(tmp_path, results))]
    assert steps == shipped  # every checkpoint once, in training order
    assert open(os.path.join(tmp_path, png), "rb").read(4) == b"\x89PNG"
    # Part two: the shipped suite, final against first, decided adaptively; then compared from the files.
    compared = [line.split() for line in proc.stdout.split("$ python -m simeval.report compare")[1].splitlines()]
    table = {row[1]: row for row in compared if row and row[0] in ("HalfCheetah-v5", "*") and len(row) > 8}
    cells = {"nominal", "obs-noise", "action-noise", "delay-2", "heavy", "slippery"}
    assert set(table) == {*cells, "*"}
    for cell in cells - {"delay-2"}:  # the large effects: decided at the first looks, at most 8 of 16 episodes
        assert table[cell][7] == "better" and table[cell][-3] == "decided" and int(table[cell][-4]) <= 8, table[cell]
    assert table["*"][7] == "better"
    used = next(line for line in proc.stdout.splitlines() if line.startswith("episodes used:")).split()
    assert int(used[2]) <= int(used[5]) // 2 and int(used[5]) == 6 * 16 * 2  # at most half a fixed run's episodes
    assert sum(int(table[c][-4]) for c in cells) * 2 == int(used[2])  # the report replays the launcher's stops
    assert "compare.html" in os.listdir(os.path.join(tmp_path, os.path.dirname(os.path.dirname(results))))
    # Part three: the best checkpoint chosen look by look (docs/statistics.md, "On the shipped run").
    selection = proc.stdout.split("$ python -m simeval.launch --select-best")[1]
    assert "chosen: step_000876544.pt, equivalent within 50 to" in selection, selection[-2000:]
    used = next(line for line in selection.splitlines() if line.startswith("episodes: ")).split()
    assert used[3:5] == ["the", "256"] and 8 * 8 <= int(used[1]) < 256, used  # fewer than the sweep's
    # README.md shows this run's tables: every digit on the machine its "machine:" line names (tests/demo_table.py).
    from simeval.demo.fingerprint import fingerprint

    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as readme:
        problems = mismatches(proc.stdout, readme.read(), fingerprint())
    assert not problems, "README.md's make demo tables are not this run's (copy them from it):\n" + "\n".join(problems)
