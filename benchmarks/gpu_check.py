"""GPU check: the Evaluator with a CUDA policy on the thread and process backends, and the launcher.

    python benchmarks/gpu_check.py [--num-envs 256] [--out DIR] [--device cuda:0]

Run on a machine with a GPU (it exits 2 without one; ``--device cpu`` is a smoke run of the
same code on the CPU, for CI). Checks, and prints the figures of:
1. the shipped final checkpoint evaluated on batched HalfCheetah-v5 with the policy on
   cpu, on cuda:0 in a thread, and on cuda:0 in a child process (its own CUDA context),
   the training-side weights living on cuda:0 as a trainer's would (staged through
   shared memory for the child): the two cuda:0 rows must agree exactly, and the cpu
   row within its confidence interval;
2. trigger_eval() latency for a 1M-parameter policy whose weights live on cuda:0;
3. ``python -m simeval.launch --device cuda:0 --backend process`` over the shipped run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time


def _env(num_envs: int, obs_norm: bool = True):
    from simeval.envs import make_env

    return make_env("HalfCheetah-v5", num_envs=num_envs, obs_norm=obs_norm)


def _actor(env, device: str):
    from simeval.policies import gaussian_actor

    return gaussian_actor(env).to(device)  # as a user's factory would; the action bounds stay on the CPU


def _big_policy(env, device: str):
    import torch
    from tensordict.nn import TensorDictModule

    net = torch.nn.Sequential(torch.nn.Linear(17, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 1024))
    net.append(torch.nn.Linear(1024, 6))
    return TensorDictModule(net.to(device), in_keys=["observation"], out_keys=["action"])


def evaluate_rows(num_envs: int, episodes: int, gpu: str) -> dict[str, dict]:
    import torch

    from simeval import Evaluator, load_checkpoint
    from simeval.checkpoints.shipped import shipped_checkpoint

    ck = load_checkpoint(shipped_checkpoint())
    rows = {}
    for label, backend, device in (
        ("cpu, thread", "thread", "cpu"),
        (f"{gpu}, thread", "thread", gpu),
        (f"{gpu}, process", "process", gpu),
    ):
        # The trainer's tensors: on the GPU when evaluation is on the GPU.
        weights = {k: v.to(device) for k, v in ck.weights_dict.items()}
        ev = Evaluator(
            functools.partial(_env, num_envs),
            policy_factory=functools.partial(_actor, device=device),
            num_trajectories=episodes,
            max_steps=1000,
            seed=0,
            device=device,
            backend=backend,
            keep_episodes=True,
        )
        try:
            ev.evaluate(weights_dict=weights, step=0)  # warm-up: builds the env, CUDA context, kernels
            start = time.perf_counter()
            result = ev.evaluate(weights_dict=weights, step=ck.step)
            seconds = time.perf_counter() - start
        finally:
            ev.shutdown()
        rows[label] = {
            "reward": float(result["eval/reward"]),
            "ci": (float(result["eval/reward_ci_low"]), float(result["eval/reward_ci_high"])),
            "returns": result["eval/episode_returns"].tolist(),
            "env_steps_per_s": float(result["eval/frame_count"]) / seconds,
        }
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return rows


def trigger_latency(gpu: str, repeats: int = 30) -> dict[str, float]:
    import torch

    from simeval import Evaluator

    out = {}
    for backend in ("thread", "process"):
        policy = _big_policy(None, gpu)
        ev = Evaluator(
            functools.partial(_env, 1, obs_norm=False),
            policy_factory=functools.partial(_big_policy, device=gpu),
            num_trajectories=1,
            max_steps=5,
            backend=backend,
            device=gpu,
        )
        try:
            times = []
            for i in range(repeats):
                with torch.no_grad():
                    policy.module[0].weight.add_(1e-6)  # training changed the weights
                if gpu.startswith("cuda"):
                    torch.cuda.synchronize()
                start = time.perf_counter()
                ev.trigger_eval(policy, step=i)
                times.append((time.perf_counter() - start) * 1e3)
                ev.wait(120)
            out[backend] = statistics.median(times[3:])
        finally:
            ev.shutdown()
    return out


def launcher_run(out: str, num_envs: int, gpu: str, max_steps: int | None) -> tuple[int, float, list[dict]]:
    cmd = [sys.executable, "-m", "simeval.launch", "--device", gpu, "--backend", "process"]
    cmd += ["--num-envs", str(num_envs), "--episodes", str(num_envs), "--out", out]
    if max_steps is not None:
        cmd += ["--max-steps", str(max_steps)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    path = os.path.join(out, "results.jsonl")
    records = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    return proc.returncode, seconds, records


def _explained(fn, *args):
    """Run ``fn``; on an EvalError print the worker's traceback too (it is the part that explains a GPU failure)."""
    from simeval import EvalError

    try:
        return fn(*args)
    except EvalError as exc:
        print(exc.remote_traceback, file=sys.stderr)
        raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--episodes", type=int, default=256)
    p.add_argument("--out", default=os.path.join("runs", "gpu-check"))
    p.add_argument("--device", default="cuda:0", help="the GPU rows' device (cpu: a smoke run, 100-step episodes)")
    args = p.parse_args(argv)
    import torch

    gpu = args.device
    if gpu.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (--device cpu runs the same code on the CPU).", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0) if gpu.startswith("cuda") else "CPU smoke run (no GPU row measured)"
    print(f"{name}, torch {torch.__version__}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    failures = []

    rows = _explained(evaluate_rows, args.num_envs, args.episodes, gpu)
    print(
        f"\nHalfCheetah-v5, shipped final checkpoint, {args.episodes} episodes x 1000 steps, "
        f"{args.num_envs} envs, seed 0"
    )
    print(f"{'policy on, backend':<22}{'return':>10}{'95% CI':>22}{'env-steps/s':>14}")
    for label, r in rows.items():
        ci = "[{:.1f}, {:.1f}]".format(*r["ci"])
        print(f"{label:<22}{r['reward']:>10.1f}{ci:>22}{r['env_steps_per_s']:>14,.0f}")
    if rows[f"{gpu}, thread"]["returns"] != rows[f"{gpu}, process"]["returns"]:
        failures.append(f"{gpu} thread and process backends gave different episode returns")
    lo, hi = rows["cpu, thread"]["ci"]
    if not lo <= rows[f"{gpu}, thread"]["reward"] <= hi:
        failures.append(f"the {gpu} mean return is outside the cpu row's 95% interval")

    latency = _explained(trigger_latency, gpu, 30 if gpu.startswith("cuda") else 6)
    print(f"\ntrigger_eval() with a 1.07M-parameter policy on {gpu}, median ms:")
    for backend, ms in latency.items():
        print(f"  {backend:<8}{ms:8.2f}")

    code, seconds, records = launcher_run(args.out, args.num_envs, gpu, None if gpu.startswith("cuda") else 100)
    ok = [r for r in records if r.get("status") == "ok"]
    print(
        f"\npython -m simeval.launch --device {gpu} --backend process --num-envs {args.num_envs}: exit {code}, "
        f"{len(ok)} checkpoints in {seconds:.1f} s"
    )
    for r in ok:
        print(f"  step {r['step']:>9,}  return {r['metrics']['reward']:8.1f}  {r['metrics']['fps']:10,.0f} env-steps/s")
    if code != 0 or len(ok) != 8:
        failures.append(f"the launcher run failed (exit {code}, {len(ok)} results)")

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
