"""GPU benchmark: the Warp env under simeval.Evaluator, trigger latency, and training beside evaluation.

    python benchmarks/bench_gpu.py [--device cuda:0] [--sizes 1024 4096 16384] [--quick]
    python benchmarks/bench_gpu.py --device cpu    # smoke mode: tiny sizes on Warp's CPU device

HalfCheetah-v5, MLP 17-64-64-6 (deterministic), on ``--device``:

  (a) per size N: the bare loop a user would write (``make_env(..., num_envs=N, backend="warp", device=D)``,
      the MLP called on the observation tensor, torchrl's ``step_and_maybe_reset``), and a full
      ``simeval.Evaluator`` round (one 1000-step episode per sub-env, the same MLP on D, thread backend),
      in env-steps/s;
  (b) latency from ``Evaluator.trigger_eval(weights)`` (weights on D, as a trainer's are) to the first
      env step of the round, cold (the round builds the env) and warm, and how long
      ``trigger_eval`` itself blocks the caller; the first step is timed by a transform on the env;
  (c) ``examples/train_ppo.py``: training frames/s alone and with background evaluation
      (``--eval-every`` = one batch, busy policy skip: evaluation runs back to back) on the process
      and the thread backend, and the interference of each in %. The script is run with the flags it
      has: without a ``--device`` flag its training runs on the CPU, and the report says so.

Every configuration of (a) and (b) runs in a fresh child process (one warm-up round, then the
median of ``--repeats``). Without CUDA (and ``--device`` on CUDA) it exits 2. Not a test.
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TASK = "HalfCheetah-v5"
EPISODE = 1000
SMOKE_STEPS = 100  # --device cpu: episodes capped at this many steps (Warp's CPU device is slow)
LATENCY_STEPS = 100  # (b): rounds capped at this many steps (latency is taken at the first)
CLOCKS: list = []  # (b): the first-step clock of each env the worker built (thread backend: same process)


# -- the pieces a user would write: bench_native's MLP (same weights), as a policy factory
from bench_native import mlp, net, policy_factory  # noqa: E402,F401  (this folder is on sys.path)


def make(num_envs: int, device: str, backend: str):
    from simeval.envs import make_env

    return make_env(TASK, num_envs=num_envs, backend=backend, device=device, obs_norm=False)


def clocked(num_envs: int, device: str, backend: str):
    """``make`` with a transform that notes when the env's first step after ``arm()`` runs."""
    from torchrl.envs.transforms import Transform

    class FirstStepClock(Transform):
        first: float | None = None

        def _step(self, tensordict, next_tensordict):
            if self.first is None:
                self.first = time.perf_counter()
            return next_tensordict

    env = make(num_envs, device, backend)
    clock = FirstStepClock()
    env.append_transform(clock)
    CLOCKS.append(clock)
    return env


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _gpu_mib(device: str) -> float | None:
    """Device memory in use (MiB, whole device: this process's torch and Warp allocations, and anyone else's)."""
    import torch

    if not device.startswith("cuda"):
        return None
    free, total = torch.cuda.mem_get_info(device)
    return (total - free) / 2**20


# -- (a) and (b), each in a child process ----------------------------------------
def bare_loop(num_envs: int, device: str, backend: str, repeats: int, steps: int) -> dict:
    """(a) the bare loop: ``steps`` steps of every sub-env, the MLP on the observation tensor, per round."""
    import torch

    env = make(num_envs, device, backend)
    module = policy_factory(env).module.to(device)  # the Evaluator row's policy, the same weights
    rates = []
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first round warms up (kernels load or compile)
            td = env.reset()
            _sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                td.set("action", module(td.get("observation")))
                _, td = env.step_and_maybe_reset(td)
            _sync(device)
            rates.append(num_envs * steps / (time.perf_counter() - start))
    out = {"rates": rates[1:], "gpu_mib": _gpu_mib(device)}
    env.close()
    return out


def evaluator_round(num_envs: int, device: str, backend: str, repeats: int, steps: int) -> dict:
    """(a) a full simeval.Evaluator round: one ``steps``-step episode per sub-env, the MLP on ``device``."""
    from simeval import Evaluator

    ev = Evaluator(
        functools.partial(make, num_envs, device, backend),
        policy_factory=policy_factory,
        num_trajectories=num_envs,
        max_steps=steps,
        device=device,
    )
    rates, lengths = [], []
    try:
        ev.evaluate()  # warm-up: builds env, collector, kernels
        for _ in range(repeats):
            start = time.perf_counter()
            result = ev.evaluate()
            seconds = time.perf_counter() - start
            rates.append(result["eval/num_episodes"] * result["eval/episode_length"] / seconds)
            lengths.append(result["eval/episode_length"])
        return {"rates": rates, "episode_length": statistics.median(lengths), "gpu_mib": _gpu_mib(device)}
    finally:
        ev.shutdown()


def latency(num_envs: int, device: str, backend: str, repeats: int, steps: int) -> dict:
    """(b) trigger_eval -> first env step, cold and warm; and trigger_eval's own blocking time."""
    from simeval import Evaluator

    trainer_policy = mlp().to(device)  # the weights a trainer hands over live on the device
    _sync(device)
    ev = Evaluator(
        functools.partial(clocked, num_envs, device, backend),
        policy_factory=policy_factory,
        num_trajectories=num_envs,
        max_steps=min(steps, LATENCY_STEPS),
        device=device,
    )
    first_step, call = [], []
    try:
        for k in range(max(repeats, 5) + 1):  # k == 0: cold (the round builds the env); short rounds: 5+ warm
            if CLOCKS:
                CLOCKS[-1].first = None
            start = time.perf_counter()
            ev.trigger_eval(weights=trainer_policy, step=k)
            call.append(time.perf_counter() - start)
            ev.wait()
            if len(CLOCKS) != 1 or CLOCKS[-1].first is None:
                raise RuntimeError(f"expected one env with a timed first step, got {len(CLOCKS)} env(s)")
            first_step.append(CLOCKS[-1].first - start)
    finally:
        ev.shutdown()
    return {"cold_s": first_step[0], "warm_s": first_step[1:], "call_s": call[1:], "cold_call_s": call[0]}


KINDS = {"env": bare_loop, "eval": evaluator_round, "latency": latency}


def run(kind: str, num_envs: int, args: argparse.Namespace, steps: int) -> dict:
    """One configuration in a fresh interpreter; the child prints its result as JSON on its last line."""
    cmd = [sys.executable, __file__, "--device", args.device, "--env-backend", args.env_backend]
    cmd += ["--child", kind, str(num_envs), str(args.repeats), str(steps)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} num_envs={num_envs} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- (c) training beside evaluation ---------------------------------------------
TRAIN_LINE = re.compile(r"^frames\s+([\d,]+)\s")


def _train_flags() -> set[str]:
    """The long options examples/train_ppo.py accepts (read from its --help)."""
    script = os.path.join(ROOT, "examples", "train_ppo.py")
    out = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out))


def train_run(argv: list[str]) -> dict:
    """Run train_ppo.py, timestamp its per-batch lines; frames/s from the second line to the last."""
    script = os.path.join(ROOT, "examples", "train_ppo.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        [sys.executable, "-u", script, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    points, evals = [], 0
    for line in proc.stdout:
        match = TRAIN_LINE.match(line)
        if match:
            points.append((time.perf_counter(), int(match.group(1).replace(",", ""))))
        elif line.startswith("eval @"):
            evals += 1
    err = proc.stderr.read()
    if proc.wait() != 0 or len(points) < 3:
        raise RuntimeError(f"train_ppo.py {' '.join(argv)} failed (rc {proc.returncode}):\n{err[-3000:]}")
    (t0, f0), (t1, f1) = points[1], points[-1]  # the first batch carries start-up: left out
    return {"fps": (f1 - f0) / (t1 - t0), "evals": evals, "batches": len(points)}


def training(args: argparse.Namespace, smoke: bool) -> None:
    flags = _train_flags()
    if smoke:
        sizes = {"--num-envs": 4, "--frames-per-batch": 512, "--minibatch": 128, "--epochs": 2, "--eval-episodes": 2}
        batches = 6
    elif "--device" in flags:
        sizes = {"--num-envs": 1024, "--frames-per-batch": 32768, "--minibatch": 4096, "--epochs": 5}
        sizes["--eval-episodes"] = 1024
        batches = 8 if args.quick else 20
    else:  # CPU training: the example's own sizes
        sizes = {"--num-envs": 8, "--frames-per-batch": 2048, "--minibatch": 64, "--epochs": 10, "--eval-episodes": 8}
        batches = 6 if args.quick else 15
    argv = [f"{k}={v}" for k, v in sizes.items()] + [f"--frames={sizes['--frames-per-batch'] * batches}"]
    where = "the CPU (train_ppo.py has no --device flag)"
    if "--device" in flags:
        argv.append(f"--device={args.device}")
        where = args.device
    if "--env-backend" in flags:
        argv.append(f"--env-backend={args.env_backend}")
    alone = train_run([*argv, "--eval-every=0"])
    print(f"\n(c) examples/train_ppo.py {' '.join(argv)}; training on {where}")
    print(f"    alone:                      {alone['fps']:>10,.0f} frames/s ({alone['batches']} batches)")
    # process: a child with its own CUDA context; thread: this process's context (a Warp env steps without graphs).
    # The smoke run shows the path runs: the process row alone (the thread row is the same code, another flag).
    backends = (("process",) if smoke else ("process", "thread")) if "--eval-backend" in flags else (None,)
    for backend in backends:
        extra = [f"--eval-backend={backend}"] if backend else []
        beside = train_run([*argv, *extra, f"--eval-every={sizes['--frames-per-batch']}"])
        label = f"evaluation, {backend} backend:" if backend else "with background evaluation:"
        print(
            f"    {label:<28}{beside['fps']:>10,.0f} frames/s ({beside['evals']} evaluation rounds finished, "
            f"triggered every batch, busy policy skip): {100 * (1 - beside['fps'] / alone['fps']):.1f}% fewer"
        )


# -- the report -------------------------------------------------------------------
def machine(device: str) -> str:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def ver(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    parts = [f"Python {platform.python_version()}", f"torch {torch.__version__}"]
    parts += [f"warp {ver('warp-lang')}", f"mujoco {ver('mujoco')}", f"mujoco-warp {ver('mujoco-warp')}"]
    if device.startswith("cuda"):
        driver = "unknown"
        try:
            driver = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", f"--id={_index(device)}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
        props = torch.cuda.get_device_properties(device)
        gpu = f"{props.name} ({props.total_memory / 2**30:.0f} GiB), driver {driver}, CUDA {torch.version.cuda}"
    else:
        gpu = "no GPU: the CPU (smoke mode)"
    return f"{gpu}; {os.cpu_count()} CPUs; " + ", ".join(parts)


def _index(device: str) -> int:
    return int(device.split(":", 1)[1]) if ":" in device else 0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for a smoke run on Warp's CPU device")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="num_envs of (a) (default 1024 4096 16384)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per configuration after a warm-up (median)")
    parser.add_argument("--quick", action="store_true", help="one round per configuration, shorter training runs")
    parser.add_argument("--env-backend", default="warp", help="make_env backend (default warp; native to compare)")
    parser.add_argument("--skip-training", action="store_true", help="leave out (c)")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "N", "REPEATS", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, n, repeats, steps = args.child
        print(json.dumps(KINDS[kind](int(n), args.device, args.env_backend, int(repeats), int(steps))))
        return

    import torch

    smoke = args.device == "cpu"
    if not smoke and not (args.device.startswith("cuda") and torch.cuda.is_available()):
        print(
            f"bench_gpu.py needs a CUDA GPU (--device {args.device}, torch.cuda.is_available() is "
            f"{torch.cuda.is_available()}); --device cpu runs a smoke test on Warp's CPU device.",
            file=sys.stderr,
        )
        sys.exit(2)
    from simeval.envs import env_backend

    try:
        env_backend(TASK, args.env_backend)
    except ValueError as exc:
        print(f"bench_gpu.py: make_env cannot build {TASK} with backend={args.env_backend!r}: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.quick:
        args.repeats = 1
    sizes = args.sizes or ([4, 16] if smoke else [1024, 4096, 16384])
    steps = SMOKE_STEPS if smoke else EPISODE

    print(f"machine: {machine(args.device)}")
    print(
        f"work: {TASK}, {steps}-step episodes, MLP 17-64-64-6 deterministic on {args.device}, "
        f"env backend {args.env_backend}; one warm-up round, then the median of {args.repeats}, "
        "each configuration in a fresh process\n"
    )
    print(f"(a) {'num_envs':>8}{'bare loop':>14}{'Evaluator':>14}{'ratio':>8}{'GPU MiB':>10}   Evaluator rounds")
    for n in sizes:
        alone = run("env", n, args, steps)
        ev = run("eval", n, args, steps)
        a, e = _median(alone["rates"]), _median(ev["rates"])
        mib = "-" if ev["gpu_mib"] is None else f"{ev['gpu_mib']:,.0f}"
        print(f"    {n:>8}{a:>14,.0f}{e:>14,.0f}{e / a:>8.2f}{mib:>10}   {[round(x) for x in ev['rates']]}", flush=True)
        if ev["episode_length"] != steps:
            print(f"    note: mean episode length {ev['episode_length']}, not {steps}")
    print("    env-steps/s; bare loop: the same MLP, torchrl's step_and_maybe_reset; GPU MiB: whole device")

    n = sizes[len(sizes) // 2]
    lat = run("latency", n, args, steps)
    print(f"\n(b) trigger_eval(weights on {args.device}) -> first env step, {n} envs:")
    print(f"    cold (the round builds the env): {lat['cold_s'] * 1e3:,.1f} ms")
    print(
        f"    warm: median {_median(lat['warm_s']) * 1e3:,.1f} ms of {[round(x * 1e3, 1) for x in lat['warm_s']]}; "
        f"trigger_eval() itself blocks the caller {_median(lat['call_s']) * 1e3:,.2f} ms"
    )
    if not args.skip_training:
        training(args, smoke)


if __name__ == "__main__":
    main()
