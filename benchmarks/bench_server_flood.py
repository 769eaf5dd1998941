"""One client flooding the policy server: an honest client's step latency alone and beside the flood.

Starts ``python -m simeval.serve_policy`` with the shipped final HalfCheetah checkpoint on 127.0.0.1 (its default
batching window, ``--max-batch`` and ``--max-in-flight``), then measures an honest client: simeval's own remote
client (what ``--policy-server`` runs), one request per sub-env per step (``--num-envs`` of them, sent back to back,
the replies read in order), step after step for ``--seconds`` (after 20 warm-up steps):

  1. alone;
  2. beside a flooding client (a process of its own) that pipelines requests as fast as it can on one connection,
     reading its replies as they come, for the same time.

Prints the honest client's p50/p99/max step latency both ways and their ratio, what the flood sent and got
answered, the time of one forward pass of ``--max-batch`` requests (the served policy in this process), whether
the target holds (p99 beside the flood <= 2 x p99 alone + one ``--max-batch`` pass), the server's peak resident
memory and its summary.

    python benchmarks/bench_server_flood.py [--seconds 15] [--num-envs 16] [--server-device cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATE = "observation/state"


def start_server(device: str, max_batch: int, extra: list[str]) -> tuple[subprocess.Popen, str]:
    """``python -m simeval.serve_policy`` with the shipped checkpoint on a free port: (process, url)."""
    from simeval.checkpoints.shipped import shipped_checkpoint

    cmd = [sys.executable, "-m", "simeval.serve_policy", shipped_checkpoint(), "--port", "0", "--device", device]
    proc = subprocess.Popen(
        [*cmd, "--max-batch", str(max_batch), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("serving"):
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, "ws://127.0.0.1:" + line.rsplit(":", 1)[1].strip()


def honest(url: str, num_envs: int, seconds: float) -> list[float]:
    """Step latencies (seconds) of simeval's client asking for ``num_envs`` sub-envs' actions, for ``seconds``."""
    from simeval.policy_kinds.remote_client import RemoteClientPolicy

    keys = {"state": STATE, "actions": "actions"}
    client = RemoteClientPolicy(url, 17, 6, chunk=None, keys=keys, timeout_s=300, max_message_bytes=2**24)
    rng = np.random.default_rng(0)
    states = rng.normal(size=(num_envs, 17)).astype(np.float32)
    for _ in range(20):  # warm-up: torch's first passes
        client.ask(states)
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        client.ask(states)
        times.append(time.perf_counter() - start)
    client.close()
    return times


def max_batch_pass(device: str, max_batch: int) -> float:
    """One forward pass of ``max_batch`` requests of the served policy, in this process (ms; best of 10 after 20)."""
    from simeval.checkpoints.shipped import shipped_checkpoint
    from simeval.serve_policy import load_served

    served = load_served(shipped_checkpoint(), None, None, None, device)
    batch = np.random.default_rng(1).normal(size=(max_batch, 17)).astype(np.float32)
    for _ in range(20):  # torch's first passes of a shape are slow
        served({STATE: batch})
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        served({STATE: batch})
        best = min(best, time.perf_counter() - start)
    return best * 1e3


async def _flood(url: str, seconds: float) -> dict:
    """Pipeline requests on one connection as fast as possible for ``seconds``, reading replies as they come."""
    from websockets.asyncio.client import connect

    from simeval.policy_kinds.wire import packb

    request = packb({STATE: np.ones(17, np.float32)})
    counts = {"sent": 0, "answered": 0}
    ws = await connect(url, max_size=None, compression=None, close_timeout=1)
    await ws.recv()
    print("flooding", flush=True)
    end = time.monotonic() + seconds

    async def send() -> None:
        while time.monotonic() < end:
            await ws.send(request)
            counts["sent"] += 1
            if counts["sent"] % 64 == 0:
                await asyncio.sleep(0)

    async def read() -> None:
        while True:
            await ws.recv()
            counts["answered"] += 1

    reader = asyncio.create_task(read())
    try:
        await asyncio.wait_for(send(), seconds + 5)
    except TimeoutError:
        pass
    await asyncio.sleep(max(0.0, end - time.monotonic()))
    reader.cancel()
    ws.transport.abort()
    return counts


def flood_process(url: str, seconds: float) -> subprocess.Popen:
    """This script in ``--flood`` mode, flooding for ``seconds``, once it has connected."""
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--flood", url, "--seconds", str(seconds)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    if proc.stdout.readline().strip() != "flooding":
        proc.kill()
        raise SystemExit("the flooding client did not connect")
    return proc


def _row(name: str, times: list[float]) -> str:
    ms = np.array(times) * 1e3
    p50, p99 = np.percentile(ms, [50, 99])
    return f"{name:<14} {len(ms):>6} {p50:>8.2f} {p99:>8.2f} {ms.max():>8.2f}"


def _peak_mib(pid: int) -> float:
    """A process's peak resident memory (VmHWM) in MiB, from /proc (Linux); NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(x for x in f if x.startswith("VmHWM:")).split()[1]) / 1024
    except (OSError, StopIteration):
        return float("nan")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=15.0, help="each phase's length (default 15)")
    p.add_argument("--num-envs", type=int, default=16, help="the honest client's requests per step (default 16)")
    p.add_argument("--server-device", default="cpu", help="where the server's policy runs (cpu, cuda:0)")
    p.add_argument("--max-batch", type=int, default=1024, help="the server's --max-batch (default 1024)")
    p.add_argument("--server-args", default="", help="more serve_policy flags, e.g. '--max-in-flight 256'")
    p.add_argument("--flood", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.flood:
        print(json.dumps(asyncio.run(_flood(args.flood, args.seconds))), flush=True)
        return
    print(
        f"{platform.node()}: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average {_load()}"
    )
    forward_ms = max_batch_pass(args.server_device, args.max_batch)
    server, url = start_server(args.server_device, args.max_batch, args.server_args.split())
    try:
        alone = honest(url, args.num_envs, args.seconds)
        flooder = flood_process(url, args.seconds + 2)
        time.sleep(1.0)  # the flood reaches its pace
        beside = honest(url, args.num_envs, args.seconds)
        flood = json.loads(flooder.communicate(timeout=args.seconds + 120)[0].splitlines()[-1])
    finally:
        peak = _peak_mib(server.pid)
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=120)
    print(
        f"honest client: {args.num_envs} requests a step, {args.seconds:g} s a phase; server on {args.server_device}, "
        f"--max-batch {args.max_batch} {args.server_args}; load average after {_load()}\n"
    )
    print(f"{'phase':<14} {'steps':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    print(_row("alone", alone))
    print(_row("beside flood", beside))
    p99_alone, p99_beside = np.percentile(np.array(alone) * 1e3, 99), np.percentile(np.array(beside) * 1e3, 99)
    bound = 2 * p99_alone + forward_ms
    print(
        f"\nflood: {flood['sent']} requests sent, {flood['answered']} answered "
        f"({flood['answered'] / (args.seconds + 2):.0f}/s)"
    )
    print(f"one forward pass of {args.max_batch} requests: {forward_ms:.2f} ms (in this process, best of 10)")
    print(
        f"p99 beside the flood / alone: {p99_beside / p99_alone:.1f}x; target p99 <= 2 x {p99_alone:.2f} + "
        f"{forward_ms:.2f} = {bound:.2f} ms: {'met' if p99_beside <= bound else 'NOT met'}"
    )
    print(f"the server's peak resident memory: {peak:.0f} MiB")
    print(err.strip().splitlines()[-1] if err.strip() else "(the server printed nothing)")


if __name__ == "__main__":
    main()
