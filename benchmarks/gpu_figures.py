"""Every GPU figure simeval documents, in one go: ``make gpu-check``.

    python benchmarks/gpu_figures.py [--device cuda:0] [--out runs/gpu-figures]
    python benchmarks/gpu_figures.py --smoke      # the same parts, tiny, on the CPU (CI runs this)

Runs each part in its own process, streams its output, keeps it in ``OUT/<part>.txt``
and ends with one table (part, exit code, minutes, log):

1. ``gpu_check.py``: the shipped checkpoint with its policy on the GPU beside the native
   MuJoCo env (thread and process backends must agree exactly), ``trigger_eval`` latency
   with a 1M-parameter policy, and the launcher on the GPU;
2. ``bench_gpu.py``: the MuJoCo Warp env at 1k-16k envs in the bare loop and under the Evaluator,
   ``trigger_eval`` to the first env step (cold and warm), and training with an eval
   worker beside it on the same GPU (the slowdown in %);
3. ``bench_isaaclab.py`` (in the Isaac Lab venv): the offline Isaac Lab cartpole at
   1k-16k envs, the bare loop beside simeval and torchrl's Collector;
4. ``bench_warp_cameras.py``: the MuJoCo Warp env's camera images (MuJoCo Warp's batch
   renderer) at 64 and 128 pixels, 1k and 4k worlds: ms per step with and without them.

``--smoke`` runs parts 1-4 on the CPU with tiny sizes, ``bench_gpu`` on the native env
(Warp's CPU device steps ~100 env-steps/s; tests/test_warp_env.py covers that env) and
``bench_warp_cameras`` on one world of Warp's CPU device with -O0 kernels (the tests' cache): it
measures nothing worth quoting and says so; it shows that the command and every part run. Exit code: the number of
parts that failed (0: all ran). Without CUDA and without ``--smoke`` it exits 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ISAAC_PYTHON = os.path.join(ROOT, ".venv-isaaclab", "bin", "python")


def parts(device: str, smoke: bool, out: str) -> list[tuple[str, list[str]]]:
    """(name, command) of each part, for ``device`` (``smoke``: the CPU, tiny sizes)."""
    py = sys.executable
    if smoke:
        return [
            ("gpu_check", [py, f"{HERE}/gpu_check.py", "--device", "cpu", "--num-envs", "4", "--episodes", "4",
                           "--out", os.path.join(out, "gpu-check")]),
            ("bench_gpu", [py, f"{HERE}/bench_gpu.py", "--device", "cpu", "--sizes", "8", "--repeats", "1", "--quick",
                           "--env-backend", "native"]),
            ("bench_isaaclab", [ISAAC_PYTHON, f"{HERE}/bench_isaaclab.py", "--device", "cpu", "--num-envs", "16",
                                "--steps", "10", "--repeats", "1", "--trials", "1"]),
            ("bench_warp_cameras", [py, f"{HERE}/bench_warp_cameras.py", "--device", "cpu", "--worlds", "1",
                                    "--sizes", "16", "--steps", "1", "--opt-level", "0"]),
        ]  # fmt: skip
    sizes = ["1024", "4096", "16384"]
    return [
        ("gpu_check", [py, f"{HERE}/gpu_check.py", "--device", device, "--out", os.path.join(out, "gpu-check")]),
        ("bench_gpu", [py, f"{HERE}/bench_gpu.py", "--device", device, "--sizes", *sizes]),
        ("bench_isaaclab", [ISAAC_PYTHON, f"{HERE}/bench_isaaclab.py", "--device", device, "--num-envs", *sizes]),
        ("bench_warp_cameras", [py, f"{HERE}/bench_warp_cameras.py", "--device", device, "--worlds", "1024", "4096",
                                "--sizes", "64", "128"]),
    ]  # fmt: skip


def run_part(name: str, cmd: list[str], out: str) -> tuple[int, float, str]:
    """Run one part, echoing and saving its output; (exit code, seconds, log path)."""
    log = os.path.join(out, f"{name}.txt")
    print(f"\n=== {name}: {' '.join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)}", flush=True)
    if not os.path.exists(cmd[0]):
        message = f"{cmd[0]} is missing (the Isaac Lab venv: `make isaaclab`)"
        print(message, flush=True)
        with open(log, "w") as f:
            f.write(message + "\n")
        return 127, 0.0, log
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HERE])}
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
        code = proc.wait()
    return code, time.perf_counter() - start, log


def main(argv: list[str] | None = None) -> int:
    """Run every part; print the summary table; the number of failed parts (2 without CUDA unless --smoke)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--smoke", action="store_true", help="every part on the CPU with tiny sizes (what CI runs)")
    p.add_argument("--out", default=os.path.join("runs", "gpu-figures"))
    args = p.parse_args(argv)
    if not args.smoke:
        import torch

        if not torch.cuda.is_available():
            print("gpu_figures: no CUDA device here; --smoke runs every part on the CPU.", file=sys.stderr)
            return 2
    os.makedirs(args.out, exist_ok=True)
    where = "CPU smoke run: no GPU figure measured" if args.smoke else args.device
    print(f"simeval GPU figures ({where}), {time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True)
    results = [(name, *run_part(name, cmd, args.out)) for name, cmd in parts(args.device, args.smoke, args.out)]
    print(f"\n{'part':<20}{'exit':>6}{'minutes':>9}  log")
    for name, code, seconds, log in results:
        print(f"{name:<20}{code:>6}{seconds / 60:>9.1f}  {log}")
    return sum(code != 0 for _, code, _, _ in results)


if __name__ == "__main__":
    sys.exit(main())
