"""A remote policy on loopback against the same policy in-process: the per-step cost.

For each number of sub-envs, one round of ``--steps`` steps per sub-env of the shipped final
HalfCheetah checkpoint (``num_trajectories = num_envs``, ``max_steps = --steps``), timed after a
warm-up round, through the thread backend's Evaluator:

  * in-process: the checkpoint's policy in the worker, VecNorm in the env (what ``--checkpoint`` runs);
  * remote: ``python -m simeval.serve_policy`` on 127.0.0.1 (its own process, default batching window)
    and the remote client (what ``--policy-server`` runs): one request per sub-env per step, a worker's
    requests sent back to back and answered by one forward pass.

Prints milliseconds per step of all sub-envs and microseconds per sub-env step, medians over
``--repeats`` rounds, their ratio, the server's batching summary, the machine and the date.

    python benchmarks/bench_remote_policy.py [--envs 16 64 128 256] [--steps 200] [--repeats 3]
    python benchmarks/bench_remote_policy.py --server-device cuda:0   # the server's policy on a GPU

Also prints the peak resident memory of the server and of this process (the simulators, the client).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rounds(ev, weights, repeats: int) -> list[float]:
    ev.evaluate(weights_dict=weights)  # warm-up: build, first round
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ev.evaluate(weights_dict=weights)
        times.append(time.perf_counter() - start)
    return times


def in_process(n: int, steps: int, repeats: int) -> list[float]:
    from simeval import Evaluator
    from simeval.checkpoints import load_checkpoint
    from simeval.checkpoints.shipped import shipped_checkpoint
    from simeval.envs import make_env
    from simeval.factories import build_policy

    ck = load_checkpoint(shipped_checkpoint())
    env = functools.partial(make_env, "HalfCheetah-v5", num_envs=n, max_steps=steps, obs_norm=True)
    policy = functools.partial(build_policy, ck.policy_factory, dict(ck.policy_kwargs), trusted=True)
    with Evaluator(env, policy_factory=lambda e: policy(e), num_trajectories=n, max_steps=steps, seed=0) as ev:
        return _rounds(ev, ck.weights_dict, repeats)


def remote(url: str, n: int, steps: int, repeats: int) -> list[float]:
    from simeval import Evaluator
    from simeval.envs import make_env
    from simeval.policy_kinds.remote import remote_policy

    env = functools.partial(make_env, "HalfCheetah-v5", num_envs=n, max_steps=steps, obs_norm=False)
    policy = functools.partial(remote_policy, url=url)
    with Evaluator(env, policy_factory=policy, num_trajectories=n, max_steps=steps, seed=0) as ev:
        return _rounds(ev, None, repeats)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--envs", type=int, nargs="+", default=[16, 64, 128, 256])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--server-device", default="cpu", help="where the server's policy runs (cpu, cuda:0)")
    args = p.parse_args()
    from simeval.checkpoints.shipped import shipped_checkpoint

    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simeval.serve_policy",
            shipped_checkpoint(),
            "--port",
            "0",
            "--device",
            args.server_device,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = server.stdout.readline()
    url = "ws://127.0.0.1:" + line.rsplit(":", 1)[1].strip()
    print(
        f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    )
    print(
        f"HalfCheetah-v5, shipped final checkpoint, {args.steps} steps per sub-env per round, "
        f"median of {args.repeats} rounds (thread backend, CPU simulators; the server's policy on "
        f"{_device_name(args.server_device)})\n"
    )
    print(
        f"{'envs':>5} {'in-process ms/step':>19} {'remote ms/step':>15} {'in-process us/env-step':>23} "
        f"{'remote us/env-step':>19} {'ratio':>6}"
    )
    try:
        for n in args.envs:
            a = statistics.median(in_process(n, args.steps, args.repeats)) / args.steps
            b = statistics.median(remote(url, n, args.steps, args.repeats)) / args.steps
            print(f"{n:>5} {a * 1e3:>19.2f} {b * 1e3:>15.2f} {a * 1e6 / n:>23.1f} {b * 1e6 / n:>19.1f} {b / a:>6.1f}")
    finally:
        server_peak = _peak_mib(server.pid)
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
        print("\n" + err.strip().splitlines()[-1])
        print(f"peak resident memory: server {server_peak:.0f} MiB, simulators and client {_peak_mib('self'):.0f} MiB")


def _device_name(device: str) -> str:
    """``device`` with its GPU's name where it is a CUDA device."""
    if not device.startswith("cuda"):
        return device
    import torch

    return f"{device}, {torch.cuda.get_device_name(device)}, torch {torch.__version__}"


def _peak_mib(pid: int | str) -> float:
    """A process's peak resident memory (VmHWM) in MiB, from /proc (Linux); NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next(x for x in f if x.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return float("nan")
    return int(line.split()[1]) / 1024


if __name__ == "__main__":
    main()
