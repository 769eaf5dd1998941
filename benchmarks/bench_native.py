"""Native batched MuJoCo envs vs the physics limit, EnvPool, and torchrl's Evaluator on gymnasium.

HalfCheetah-v5, 1000-step episodes, MLP 17-64-64-6 (deterministic) where a policy runs, at
``--num-envs`` (256) and ``--few-envs`` (16) sub-envs:

  (a) ``mujoco.batch`` physics alone, zero actions: the limit (1 env step = frame_skip 5 physics steps);
  (b) simeval.Evaluator on the native env, tuned: an env instance with ``num_threads`` = CPUs, and
      ``torch.set_num_threads(1)`` in the process;
  (d) simeval.Evaluator with defaults, as a user calls it: ``Evaluator(make_env_factory, policy_factory=...,
      num_trajectories=N, max_steps=1000)``, thread backend, torch's default thread count;
  (e) EnvPool sync (``envpool.make(..., num_envs=N, num_threads=CPUs)``), zero actions, no policy;
  (f) EnvPool async (``batch_size=N/2``, ``async_reset``, ``recv``/``send``), zero actions, no policy;
  (g) EnvPool sync with the MLP in the loop (float64 obs -> float32 tensor -> MLP -> NumPy -> step);
  (h) EnvPool async with the MLP in the loop;
  (c) ``torchrl.collectors.Evaluator`` on ``torchrl.envs.GymEnv("HalfCheetah-v5", num_envs=16)``
      (gymnasium's AsyncVectorEnv: 16 spawned worker processes), once.

Every configuration runs in a fresh child process: one warm-up round, then the median env-steps/s
of ``--repeats`` rounds (a round: one 1000-step episode per sub-env; EnvPool async: a window of
N x 1000 env steps of its continuous stream, autoreset steps not counted), and the peak RSS of
its process tree. ``--scaling`` adds the scaling of (b) with num_envs and threads beside (a).

    python benchmarks/bench_native.py [--repeats 3] [--quick] [--rows a,b,d,e] [--scaling]

The policy runs on one torch intra-op thread in (b), (c), (g) and (h) (as simeval's worker
processes do); (d) leaves torch's default. Not a test: shared machines are noisy, so it reports
medians and ratios and names the machine. EnvPool: ``pip install envpool`` (``make bench-native``
installs it); without it rows (e)-(h) are skipped.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
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
ENVPOOL_ROWS = ("e", "f", "g", "h")


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


# -- the measurements (each in its own child process) ---------------------------
def physics(num_envs: int, threads: int, repeats: int) -> list[float]:
    """(a): env-steps/s of ``Batch.step(nstep=frame_skip)`` with zero controls, one 1000-step episode."""
    from mujoco.batch import Batch

    from simeval.envs.simulators.mujoco_native.tasks import get_task, load_model

    task = get_task(TASK)
    batch = Batch(load_model(task), num_envs, threads)
    rates = []
    for _ in range(repeats + 1):  # the first round warms up
        batch.reset()
        start = time.perf_counter()
        for _ in range(EPISODE):
            batch.step(nstep=task.frame_skip)
        rates.append(num_envs * EPISODE / (time.perf_counter() - start))
    return rates[1:]


def net():
    """The MLP 17-64-64-6 (tanh), the same weights in every row."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(17, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 6), nn.Tanh())


def mlp():
    from tensordict.nn import TensorDictModule

    return TensorDictModule(net(), in_keys=["observation"], out_keys=["action"])


def policy_factory(env):
    """What a user passes as ``policy_factory``: builds the policy for the eval env."""
    return mlp()


def _rounds(evaluator, repeats: int) -> list[float]:
    evaluator.evaluate()  # warm-up: builds the collector
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = evaluator.evaluate()
        seconds = time.perf_counter() - start
        rates.append(result["eval/num_episodes"] * result["eval/episode_length"] / seconds)
    return rates


def native(num_envs: int, threads: int, repeats: int, groups: int = 1) -> list[float]:
    """(b): simeval.Evaluator (thread backend) on a native env instance, one episode per sub-env per round.

    (p): the same with ``groups=2``: one half's physics overlapped with the policy on the other half.
    """
    from simeval import Evaluator
    from simeval.envs import make_env

    env = make_env(TASK, num_envs=num_envs, obs_norm=False, num_threads=threads, groups=groups)
    ev = Evaluator(env, mlp(), num_trajectories=num_envs, max_steps=EPISODE)
    try:
        return _rounds(ev, repeats)
    finally:
        ev.shutdown()


def defaults(num_envs: int, threads: int, repeats: int) -> list[float]:
    """(d): simeval.Evaluator as a user calls it: an env factory, a policy factory, every other default."""
    from simeval import Evaluator
    from simeval.envs import make_env

    factory = functools.partial(make_env, TASK, num_envs=num_envs, obs_norm=False)
    ev = Evaluator(factory, policy_factory=policy_factory, num_trajectories=num_envs, max_steps=EPISODE)
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


def _numpy_policy(with_policy: bool, num_envs: int):
    """(obs -> actions, context to run the loop in): zeros, or the MLP as a user writes it around EnvPool."""
    import contextlib

    import numpy as np

    if not with_policy:
        zeros = np.zeros((num_envs, 6))
        return (lambda obs: zeros[: len(obs)]), contextlib.nullcontext()
    import torch

    model = net()

    def act(obs):
        return model(torch.from_numpy(obs).float()).numpy()

    return act, torch.inference_mode()


def _check_ends(trunc, term, info) -> None:
    """Every episode EnvPool ended ran exactly EPISODE steps (its TimeLimit; HalfCheetah never terminates)."""
    ended = trunc | term
    if ended.any() and not (info["elapsed_step"][ended] == EPISODE).all():
        raise RuntimeError(f"EnvPool ended episodes at {set(info['elapsed_step'][ended].tolist())}, not {EPISODE}")


def envpool_sync(num_envs: int, threads: int, repeats: int, with_policy: bool = False) -> list[float]:
    """(e), (g): ``reset()``, then 1000 ``step()`` calls: one full episode per sub-env per round."""
    import envpool

    env = envpool.make(TASK, env_type="gymnasium", num_envs=num_envs, num_threads=threads, seed=0)
    act, context = _numpy_policy(with_policy, num_envs)
    rates = []
    with context:
        for _ in range(repeats + 1):  # the first round warms up
            obs, _ = env.reset()
            start = time.perf_counter()
            for _ in range(EPISODE):
                obs, _, term, trunc, info = env.step(act(obs))
            rates.append(num_envs * EPISODE / (time.perf_counter() - start))
            if not (trunc | term).all():
                raise RuntimeError(f"EnvPool's {TASK} episodes did not end at step {EPISODE}.")
            _check_ends(trunc, term, info)
    env.close()
    return rates[1:]


def envpool_async(num_envs: int, threads: int, repeats: int, with_policy: bool = False) -> list[float]:
    """(f), (h): ``batch_size=N/2``; a round is a window of N x 1000 env steps (autoreset steps not counted)."""
    import envpool

    batch = max(1, num_envs // 2)
    env = envpool.make(TASK, env_type="gymnasium", num_envs=num_envs, batch_size=batch, num_threads=threads, seed=0)
    act, context = _numpy_policy(with_policy, num_envs)
    rates = []
    with context:
        env.async_reset()
        for _ in range(repeats + 1):  # the first window warms up
            steps, start = 0, time.perf_counter()
            while steps < num_envs * EPISODE:
                obs, _, term, trunc, info = env.recv()
                steps += int((info["elapsed_step"] > 0).sum())  # an autoreset's reset step is no env step
                _check_ends(trunc, term, info)
                env.send(act(obs), info["env_id"])
            rates.append(steps / (time.perf_counter() - start))
    env.close()
    return rates[1:]


# key -> (function, one torch intra-op thread in its process)
KINDS = {
    "physics": (physics, False),
    "native": (native, True),
    "pipelined": (functools.partial(native, groups=2), True),
    "defaults": (defaults, False),
    "anchor": (anchor, True),
    "envpool": (envpool_sync, False),
    "envpool_async": (envpool_async, False),
    "envpool_mlp": (functools.partial(envpool_sync, with_policy=True), True),
    "envpool_async_mlp": (functools.partial(envpool_async, with_policy=True), True),
}
# row letter -> kind, label (formatted with n, threads, batch)
ROWS = {
    "a": ("physics", "(a) mujoco.batch physics, zero actions"),
    "e": ("envpool", "(e) EnvPool sync, zero actions"),
    "f": ("envpool_async", "(f) EnvPool async (batch {half}), zero actions"),
    "g": ("envpool_mlp", "(g) EnvPool sync + MLP"),
    "h": ("envpool_async_mlp", "(h) EnvPool async (batch {half}) + MLP"),
    "b": ("native", "(b) simeval.Evaluator, native env, tuned"),
    "p": ("pipelined", "(p) as (b), groups=2 (halves overlapped)"),
    "d": ("defaults", "(d) simeval.Evaluator, defaults (factory, torch threads)"),
}


def child(kind: str, num_envs: int, threads: int, repeats: int) -> None:
    fn, one_thread = KINDS[kind]
    if one_thread:
        import torch

        torch.set_num_threads(1)
    with PeakRSS() as rss:
        rates = fn(num_envs, threads, repeats)
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

    import mujoco
    import torch

    from simeval.machine import cpu_model

    cpu = cpu_model()
    envpool = "not installed"
    if importlib.util.find_spec("envpool"):
        from importlib.metadata import version

        envpool = version("envpool")
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} intra-op threads by default), "
        f"mujoco {mujoco.__version__}, envpool {envpool}"
    )


def _print_row(label: str, r: dict) -> None:
    print(f"{label:<70}{r['median']:>12,.0f}{r['peak_mib']:>14,.0f}   {[round(x) for x in r['rates']]}", flush=True)


def _ratio(results: dict, num: tuple, den: tuple, target: float | None = None) -> str:
    """``num`` / ``den`` (each (row letter, num_envs)), with the target and whether it is met."""
    if num not in results or den not in results:
        return "n/a"
    value = results[num]["median"] / results[den]["median"]
    if target is None:
        return f"{value:.2f}"
    return f"{value:.2f} ({'met' if value >= target else 'NOT met'})"


def print_ratios(results: dict, n: int, few: int) -> None:
    """The ratios issue 13 targets (and the peers' for reference), for the tuned (b) and defaults (d) rows."""
    lines = (
        (n, "simeval / physics limit (a)", ("a", n), 0.90),
        (n, "simeval / EnvPool sync, no policy (e)", ("e", n), 1.0),
        (few, "simeval / physics limit (a)", ("a", few), 0.6),
        (n, "simeval / EnvPool sync + MLP (g)", ("g", n), None),
        (n, "simeval / EnvPool async + MLP (h)", ("h", n), None),
        (few, "simeval / EnvPool sync + MLP (g)", ("g", few), None),
        (n, "simeval / torchrl anchor (c)", ("c", 16), 8.0),
    )
    print(f"\n{'ratio':<50}{'target':>8}{'tuned (b)':>18}{'defaults (d)':>18}")
    for size, what, den, target in lines:
        bar = f">= {target:g}" if target is not None else "peer"
        tuned, dflt = (_ratio(results, (row, size), den, target) for row in ("b", "d"))
        print(f"{f'{size} envs, {what}':<50}{bar:>8}{tuned:>18}{dflt:>18}")


def scaling(cpus: int, quick: bool, repeats: int) -> None:
    sizes = (1, 16, 64, 256) if quick else (1, 16, 64, 256, 1024)
    thread_counts = sorted({1, cpus})
    repeats = 1 if quick else max(1, repeats // 2)
    print(f"\nscaling of (b), {repeats} round(s) each: env-steps/s (share of (a) at the same size), peak RSS")
    print(f"{'num_envs':>8}" + "".join(f"{f'{t} thread(s): (b)':>26}{'(a)':>10}{'RSS MiB':>9}" for t in thread_counts))
    for size in sizes:
        line = f"{size:>8}"
        for t in thread_counts:
            limit = run("physics", size, t, repeats)
            mine = run("native", size, t, repeats)
            share = f"{mine['median']:,.0f} ({mine['median'] / limit['median']:.0%})"
            line += f"{share:>26}{limit['median']:>10,.0f}{mine['peak_mib']:>9,.0f}"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per configuration after a warm-up (median)")
    parser.add_argument("--num-envs", type=int, default=256, help="sub-envs of the first block (default 256)")
    parser.add_argument("--few-envs", type=int, default=16, help="sub-envs of the second block (default 16)")
    parser.add_argument("--threads", type=int, default=None, help="threads of (a), (b) and EnvPool (default: CPUs)")
    parser.add_argument("--rows", default="a,e,f,g,h,b,p,d,c", help="rows to run, by letter (default: all)")
    parser.add_argument("--quick", action="store_true", help="one round per configuration; scaling up to 256 envs")
    parser.add_argument("--scaling", action="store_true", help="add the scaling table of (b) (several minutes)")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "N", "THREADS", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, n, threads, repeats = args.child
        child(kind, int(n), int(threads), int(repeats))
        return

    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(rows) - set(ROWS) - {"c"})
    if unknown:
        parser.error(f"unknown rows {unknown}: choose from {', '.join([*ROWS, 'c'])}")
    if not importlib.util.find_spec("envpool") and any(r in ENVPOOL_ROWS for r in rows):
        print("envpool is not installed (pip install envpool): skipping rows (e)-(h)\n")
        rows = [r for r in rows if r not in ENVPOOL_ROWS]
    cpus = len(os.sched_getaffinity(0))
    threads = args.threads or cpus
    repeats = 1 if args.quick else args.repeats
    n, few = args.num_envs, args.few_envs
    print(f"machine: {machine()}")
    print(
        f"work: {TASK}, {EPISODE}-step episodes (one per sub-env per round), MLP 17-64-64-6, deterministic; "
        f"one warm-up round, then the median of {repeats}, each configuration in a fresh process\n"
    )
    print(f"{'':<70}{'env-steps/s':>12}{'peak RSS MiB':>14}   env-steps/s of each round")
    results: dict[tuple[str, int], dict] = {}
    for size in (n, few):
        print(f"{size} envs, {threads} threads (physics, native env, EnvPool)")
        for letter, (kind, label) in ROWS.items():
            if letter in rows:
                results[letter, size] = run(kind, size, threads, repeats)
                _print_row("  " + label.format(half=max(1, size // 2)), results[letter, size])
    if "c" in rows:
        results["c", 16] = run("anchor", 16, 0, repeats)
        _print_row("(c) torchrl Evaluator, GymEnv(num_envs=16) (16 worker processes)", results["c", 16])
    print(
        "\n(b) and (g)/(h): 1 torch intra-op thread; (d): torch's default; (e)/(f): no policy, zero actions "
        "(as (a)); EnvPool async rounds: windows of N x 1000 env steps"
    )
    print_ratios(results, n, few)
    if args.scaling:
        scaling(cpus, args.quick, args.repeats)


if __name__ == "__main__":
    main()
