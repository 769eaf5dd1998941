"""Fan-out on Ray: a checkpoint sweep with K=1 and K=2 workers, per-worker throughput, scheduling overhead.

Prints, in one run on a local Ray cluster:
  * the shipped run's 8 checkpoints swept by the launcher with its defaults
    (``python -m simeval.launch --watch ... --backend ray --workers K``), K=1
    and K=2: wall time and the K=2/K=1 speed-up, beside the peer a user would
    run today: torchrl's Evaluator (Ray backend, one actor) over the same
    checkpoints in a loop;
  * env-steps/s of each worker (from the per-worker figures in results.jsonl);
  * scheduling overhead per round for K=1, 2, 4: time from ``trigger_eval`` to
    the first env step of the first and of the last worker (median of rounds).

    python benchmarks/bench_fanout.py [--rounds 7]

Not a test: these machines are noisy, so it reports medians and ratios and
names the machine. On 2 cores, K=2 cannot reach 2x: the workers share them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(REPO, "simeval", "data", "halfcheetah_ppo")
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from bench_evaluator import machine  # noqa: E402


def sweep(k: int, out: str, address: str) -> tuple[float, list[dict]]:
    """The launcher's sweep of the shipped run with its defaults; (wall seconds, records)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--watch", RUN, "--backend", "ray", "--workers", str(k), "--out", out],
        capture_output=True,
        text=True,
        env={**os.environ, "RAY_ADDRESS": address},
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1])
    return seconds, [json.loads(x) for x in open(os.path.join(out, "results.jsonl")) if x.strip()]


def anchor_sweep(backend: str) -> float:
    """torchrl's Evaluator, one checkpoint after another (same env, episodes, steps)."""
    from torchrl.collectors import Evaluator as Anchor

    from simeval.checkpoints import load_checkpoint
    from simeval.envs import make_env
    from simeval.policies import gaussian_actor

    paths = sorted(os.path.join(RUN, n) for n in os.listdir(RUN) if n.endswith(".pt"))
    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=8, max_steps=1000)
    start = time.perf_counter()
    extra = {"num_gpus": 0} if backend == "ray" else {}
    ev = Anchor(factory, policy_factory=gaussian_actor, num_trajectories=16, max_steps=1000, backend=backend, **extra)
    try:
        for path in paths:
            ev.evaluate(weights_dict=dict(load_checkpoint(path).weights_dict))
    finally:
        ev.shutdown()
    return time.perf_counter() - start


def overhead(k: int, rounds: int) -> tuple[float, float]:
    """Median seconds from trigger_eval to the first env step of the first and of the last worker."""
    from simeval import Evaluator
    from simeval.envs import make_env
    from simeval.policies import gaussian_actor

    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=8, obs_norm=False, max_steps=20)
    ev = Evaluator(
        factory,
        policy_factory=gaussian_actor,
        num_trajectories=8,
        max_steps=20,
        backend="ray",
        num_gpus=0,
        num_workers=k,
        ray_kwargs={"num_cpus": 0.5},
    )
    first, last = [], []
    try:
        ev.evaluate()  # workers up, envs built
        for _ in range(rounds):
            t0 = time.time()
            ev.trigger_eval()
            starts = [w["started_at"] for w in ev.wait(120)["eval/workers"]]
            first.append(min(starts) - t0)
            last.append(max(starts) - t0)
    finally:
        ev.shutdown()
    return statistics.median(first), statistics.median(last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import ray

    ray.init(address="local", num_cpus=os.cpu_count(), num_gpus=0, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    print(f"machine: {machine()}; Ray {ray.__version__}, local cluster")
    print("\nsweep of the shipped run's 8 checkpoints, launcher defaults (8 envs, 16 episodes, 1000 steps):")
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in (1, 2):
            walls[k], records = sweep(k, os.path.join(tmp, f"k{k}"), address)
            per_worker = {}
            for r in records:
                for w in r["workers"]:
                    per_worker.setdefault(w["pid"], []).append(w["env_steps"] / w["seconds"])
            rates = ", ".join(f"{statistics.median(v):,.0f}" for v in per_worker.values())
            print(
                f"  simeval --workers {k}: {walls[k]:6.1f} s wall ({len(records)} checkpoints); "
                f"env-steps/s per worker (median of its rounds): {rates}"
            )
    print(f"  speed-up K=2 over K=1: {walls[1] / walls[2]:.2f}x (on {os.cpu_count()} cores)")
    for backend in ("thread", "ray"):
        label = f"torchrl Evaluator ({backend}), checkpoint after checkpoint:"
        try:
            print(f"  {label} {anchor_sweep(backend):6.1f} s wall")
        except Exception as exc:  # noqa: BLE001 - report the peer's failure and go on
            text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
            print(f"  {label} failed: {type(exc).__name__}: {text[-1][:160] if text else ''}")
    print(f"\nscheduling overhead per round (trigger_eval -> first env step), median of {args.rounds}:")
    for k in (1, 2, 4):
        first, last = overhead(k, args.rounds)
        print(f"  K={k}: first worker {first * 1e3:7.1f} ms, last worker {last * 1e3:7.1f} ms")
    ray.shutdown()


if __name__ == "__main__":
    main()
