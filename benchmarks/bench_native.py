"""Native batched MuJoCo envs vs the physics limit and vs torchrl's Evaluator on gymnasium.

One run on HalfCheetah-v5, 1000-step episodes, MLP 17-64-64-6, deterministic:

  (a) ``mujoco.batch`` physics alone, zero actions: the limit (1 env step = frame_skip 5 physics steps);
  (b) simeval's native env (``make_env``'s default) through ``simeval.Evaluator``, thread backend;
  (c) ``torchrl.collectors.Evaluator`` on ``torchrl.envs.GymEnv("HalfCheetah-v5", num_envs=16)``
      (gymnasium's AsyncVectorEnv: 16 spawned worker processes);

then the scaling of (b) with num_envs and the batch's thread count, each beside (a) at the same
size. Every configuration runs in a fresh child process, which reports its median env-steps/s and
the peak RSS of its process tree (workers included).

    python benchmarks/bench_native.py [--repeats 3] [--num-envs 256] [--quick]

The policy runs on one torch intra-op thread in every row (``torch.set_num_threads(1)``, as
simeval's own worker processes do): on a small machine a second intra-op thread fights the physics
threads for the cores. Not a test: shared machines are noisy, so it reports medians and ratios and
names the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TASK = "HalfCheetah-v5"
EPISODE = 1000


def _tree_rss_kib(pid: int) -> int:
    """Resident memory (KiB) of ``pid`` and its descendants (a few /proc reads, not a /proc scan)."""
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            total = next((int(x.split()[1]) for x in f if x.startswith("VmRSS:")), 0)
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except (OSError, ValueError):
        return total
    return total + sum(_tree_rss_kib(k) for k in kids)


class PeakRSS:
    """Samples the process tree's RSS from a background thread (every 0.2 s); ``peak`` in MiB.

    Sampling is cheap (it holds the GIL for well under a millisecond) and the
    process's own peak (``ru_maxrss``) is folded in, so short peaks are not missed.
    """

    def __init__(self, period: float = 0.2) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)

    def _run(self, period: float) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, _tree_rss_kib(os.getpid()))
            self._stop.wait(period)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        import resource

        self._stop.set()
        self._thread.join()
        self.peak_kib = max(self.peak_kib, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

    @property
    def peak(self) -> float:
        return self.peak_kib / 1024


# -- the three measurements (each in its own child process) ---------------------
def physics(num_envs: int, threads: int, repeats: int) -> list[float]:
    """(a): env-steps/s of ``Batch.step(nstep=frame_skip)`` with zero controls, one 1000-step episode."""
    from mujoco.batch import Batch

    from simeval.envs.mujoco_tasks import get_task, load_model

    task = get_task(TASK)
    batch = Batch(load_model(task), num_envs, threads)
    rates = []
    for _ in range(repeats):
        batch.reset()
        start = time.perf_counter()
        for _ in range(EPISODE):
            batch.step(nstep=task.frame_skip)
        rates.append(num_envs * EPISODE / (time.perf_counter() - start))
    return rates


def mlp():
    import torch
    from tensordict.nn import TensorDictModule
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(17, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 6), nn.Tanh())
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


def _rounds(evaluator, repeats: int) -> list[float]:
    evaluator.evaluate()  # warm-up: builds the collector
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = evaluator.evaluate()
        seconds = time.perf_counter() - start
        rates.append(result["eval/num_episodes"] * result["eval/episode_length"] / seconds)
    return rates


def native(num_envs: int, threads: int, repeats: int) -> list[float]:
    """(b): simeval.Evaluator (thread backend) on the native env, one episode per sub-env per round."""
    from simeval import Evaluator
    from simeval.envs import make_env

    env = make_env(TASK, num_envs=num_envs, obs_norm=False, num_threads=threads)
    ev = Evaluator(env, mlp(), num_trajectories=num_envs, max_steps=EPISODE)
    try:
        return _rounds(ev, repeats)
    finally:
        ev.shutdown()


def anchor(num_envs: int, threads: int, repeats: int) -> list[float]:
    """(c): torchrl's Evaluator on GymEnv(num_envs=...) (AsyncVectorEnv workers), same episodes."""
    from torchrl.collectors import Evaluator
    from torchrl.envs import DoubleToFloat, GymEnv, TransformedEnv

    env = TransformedEnv(GymEnv(TASK, num_envs=num_envs), DoubleToFloat())
    ev = Evaluator(env, mlp(), num_trajectories=num_envs, max_steps=EPISODE)
    try:
        return _rounds(ev, repeats)
    finally:
        ev.shutdown()
        env.close()


KINDS = {"physics": physics, "native": native, "anchor": anchor}


def child(kind: str, num_envs: int, threads: int, repeats: int) -> None:
    if kind != "physics":  # (a) loads MuJoCo only
        import torch

        torch.set_num_threads(1)
    with PeakRSS() as rss:
        rates = KINDS[kind](num_envs, threads, repeats)
    print(json.dumps({"rates": rates, "peak_mib": rss.peak}))


def run(kind: str, num_envs: int, threads: int, repeats: int) -> dict:
    """One configuration in a fresh interpreter: {"rates": [...], "peak_mib": float, "median": float}."""
    cmd = [sys.executable, __file__, "--child", kind, str(num_envs), str(threads), str(repeats)]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(HERE), os.environ.get("PYTHONPATH")]))
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} num_envs={num_envs} threads={threads} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["median"] = statistics.median(out["rates"])
    return out


def machine() -> str:
    import platform

    import torch

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    import mujoco

    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, mujoco {mujoco.__version__}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per configuration (median reported)")
    parser.add_argument("--num-envs", type=int, default=256, help="sub-envs of (a) and (b)")
    parser.add_argument("--threads", type=int, default=None, help="batch threads of (a) and (b) (default: all CPUs)")
    parser.add_argument("--quick", action="store_true", help="scaling rows up to 256 envs, one round each")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "N", "THREADS", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, n, threads, repeats = args.child
        child(kind, int(n), int(threads), int(repeats))
        return

    cpus = len(os.sched_getaffinity(0))
    threads = args.threads or cpus
    n = args.num_envs
    print(f"machine: {machine()}")
    print(
        f"work: {TASK}, {EPISODE}-step episodes (one per sub-env per round), MLP 17-64-64-6, deterministic, "
        f"1 torch intra-op thread; median of {args.repeats} rounds, each configuration in a fresh process\n"
    )
    a = run("physics", n, threads, args.repeats)
    b = run("native", n, threads, args.repeats)
    c = run("anchor", 16, 0, args.repeats)
    rows = (
        (f"(a) mujoco.batch physics, zero actions ({n} envs, {threads} threads)", a),
        (f"(b) simeval.Evaluator, native env ({n} envs, {threads} threads)", b),
        ("(c) torchrl Evaluator, GymEnv(num_envs=16) (16 worker processes)", c),
    )
    print(f"{'':<70}{'env-steps/s':>12}{'peak RSS MiB':>14}   env-steps/s of each round")
    for label, r in rows:
        print(f"{label:<70}{r['median']:>12,.0f}{r['peak_mib']:>14,.0f}   {[round(x) for x in r['rates']]}")
    print(
        f"\n(b) / (a) = {b['median'] / a['median']:.2f}   (target >= 0.50)\n"
        f"(b) / (c) = {b['median'] / c['median']:.2f}   (target >= 8)\n"
    )

    sizes = (1, 16, 64, 256) if args.quick else (1, 16, 64, 256, 1024)
    thread_counts = sorted({1, cpus})
    repeats = 1 if args.quick else max(1, args.repeats // 2)
    print(f"scaling of (b), {repeats} round(s) each: env-steps/s (share of (a) at the same size), peak RSS")
    print(f"{'num_envs':>8}" + "".join(f"{f'{t} thread(s): (b)':>26}{'(a)':>10}{'RSS MiB':>9}" for t in thread_counts))
    for size in sizes:
        line = f"{size:>8}"
        for t in thread_counts:
            limit = run("physics", size, t, repeats)
            mine = run("native", size, t, repeats)
            share = f"{mine['median']:,.0f} ({mine['median'] / limit['median']:.0%})"
            line += f"{share:>26}{limit['median']:>10,.0f}{mine['peak_mib']:>9,.0f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
