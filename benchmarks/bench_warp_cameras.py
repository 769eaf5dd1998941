"""Camera observations on the MuJoCo Warp env: the cost of MuJoCo Warp's batch renderer per step.

Prints, per (worlds, image side): the milliseconds a step of every world takes without cameras
(the physics alone) and with the track camera's images (``make_env("HalfCheetah-v5",
backend="warp", cameras=["track"], image_size=S)``: the worlds' poses recomputed, the BVH
refitted and every world's pixels ray-traced in one launch, then handed over as float CHW
tensors), the difference (the renderer's cost per step), and images per second. Medians over
``--steps`` steps after one warm-up step; the device, the machine and the date are printed.

    python benchmarks/bench_warp_cameras.py [--device cuda:0] [--worlds 1024 4096] [--sizes 64 128]
    python benchmarks/bench_warp_cameras.py --device cpu --worlds 1 4 16 --sizes 64   # Warp's CPU device

On Warp's CPU device every kernel is launched from Python and runs on the CPU's threads: those
figures say what development on a machine without a GPU costs, not what a GPU does.
``--opt-level 0`` compiles the kernels as the tests do (shares their kernel cache; a smoke run).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

TASK = "HalfCheetah-v5"


def step_ms(worlds: int, size: int | None, device: str, steps: int) -> float:
    """Median ms per step of ``worlds`` Warp worlds, with ``size``-pixel images of the track camera (None: none)."""
    import torch

    from simeval.envs import make_env

    kw = {"cameras": ["track"], "image_size": size} if size else {}
    env = make_env(TASK, backend="warp", device=device, num_envs=worlds, seed=0, obs_norm=False, **kw)
    td = env.reset()
    cuda = env.device.type == "cuda"
    times = []
    for _ in range(steps + 1):
        td["action"] = torch.zeros(env.action_spec.shape, device=env.device)
        if cuda:
            torch.cuda.synchronize(env.device)
        start = time.perf_counter()
        td = env.step(td)["next"]
        if cuda:
            torch.cuda.synchronize(env.device)
        times.append(time.perf_counter() - start)
    env.close()
    return 1e3 * statistics.median(times[1:])  # the first step loads the render kernels


def _cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else platform's."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    """Print the table; 2 when ``--device`` is a GPU this machine lacks."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for Warp's CPU device")
    p.add_argument("--worlds", type=int, nargs="+", default=None, help="default: 1024 4096 on CUDA, 1 4 16 on cpu")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128], help="image sides in pixels")
    p.add_argument("--steps", type=int, default=None, help="timed steps per row (default: 50 on CUDA, 5 on cpu)")
    p.add_argument("--opt-level", type=int, default=None, help="Warp's kernel optimisation level (default: Warp's)")
    args = p.parse_args(argv)
    cuda = args.device.startswith("cuda")
    import torch
    import warp as wp

    if cuda and not torch.cuda.is_available():
        print(f"bench_warp_cameras: no CUDA device here (--device {args.device}); --device cpu runs on Warp's CPU "
              "device.", file=sys.stderr)  # fmt: skip
        return 2
    if args.opt_level is not None:
        wp.config.optimization_level = args.opt_level
    worlds = args.worlds or ([1024, 4096] if cuda else [1, 4, 16])
    steps = args.steps or (50 if cuda else 5)
    where = torch.cuda.get_device_name(args.device) if cuda else f"Warp's CPU device, {_cpu_name()}"
    print(f"{TASK}, MuJoCo Warp's batch renderer (track camera), {where}, {os.cpu_count()} CPUs, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, median of {steps} steps")  # fmt: skip
    print(f"{'worlds':>7}{'pixels':>8}{'step ms':>10}{'+images ms':>12}{'render ms':>11}{'images/s':>11}")
    for n in worlds:
        bare = step_ms(n, None, args.device, steps)
        for size in args.sizes:
            seen = step_ms(n, size, args.device, steps)
            rate = n / (seen / 1e3)
            print(f"{n:>7}{size:>8}{bare:>10.1f}{seen:>12.1f}{seen - bare:>11.1f}{rate:>11,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
