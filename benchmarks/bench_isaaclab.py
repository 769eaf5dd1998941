"""Isaac Lab (kit-less, Newton) through simeval vs the loops a user would write instead.

One run on ``Simeval-Isaac-Cartpole-Direct`` (Isaac Lab's ``Isaac-Cartpole-Direct``,
robot from a local file), the same MLP policy (4-32-32-1) in every row, deterministic:

  (a) bare Isaac Lab loop: ``obs = env.step(policy(obs))`` on the gymnasium env,
      what rsl_rl's ``play.py`` does: the floor;
  (b) torchrl: ``IsaacLabWrapper(env, native_autoreset=True)`` stepped by a torchrl
      ``Collector``, no episode accounting;
  (c) simeval: ``Evaluator(make_env("isaaclab:..."), backend="thread")`` with its
      defaults, rounds of exactly ``num_envs`` complete episodes with their returns,
      lengths, end flags, Isaac Lab's logged metrics and a bootstrap interval
      (``simeval.worker.tensor_rollout``: no Collector).

Env-steps/s, median over rounds of ``--steps`` steps per sub-env (episodes capped at
that many steps, so a simeval round and a loop round step the same amount), for each
``--num-envs``. Every row runs in fresh child processes (Isaac Lab keeps one simulation
per process), ``--trials`` of them, the rows interleaved so that a shared machine's drift
hits every row alike; each process times ``--repeats`` rounds after a warm-up round. Not a
test: shared machines are noisy, so it reports medians and ratios and names the machine.

    python benchmarks/bench_isaaclab.py [--num-envs 64 256 1024 4096] [--device cpu] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

TASK = "Simeval-Isaac-Cartpole-Direct"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _policy(device):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(device)


def _timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up: Warp kernels, first resets
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        steps = fn()
        out.append(steps / (time.perf_counter() - start))
    return out


def bare(num_envs: int, steps: int, device: str, repeats: int) -> list[float]:
    import gymnasium as gym
    import torch

    from simeval.envs.simulators.isaaclab import env as isaaclab

    isaaclab.check_task(TASK)
    from isaaclab_tasks.utils import parse_env_cfg

    cfg = parse_env_cfg(TASK, device=device, num_envs=num_envs)
    cfg.episode_length_s = (steps - 0.5) * cfg.sim.dt * cfg.decimation
    env = gym.make(TASK, cfg=cfg)
    policy = _policy(device)
    obs, _ = env.reset(seed=0)

    def one_round():
        nonlocal obs
        with torch.inference_mode():
            for _ in range(steps):
                obs, _, _, _, _ = env.step(policy(obs["policy"]))
        return steps * num_envs

    try:
        return _timed(one_round, repeats)
    finally:
        env.close()


def torchrl_collector(num_envs: int, steps: int, device: str, repeats: int) -> list[float]:
    import torch
    from torchrl.collectors import Collector

    from simeval.envs import make_env

    env = make_env(f"isaaclab:{TASK}", num_envs=num_envs, device=device, max_steps=steps, obs_norm=False)
    policy = _td_policy(env, device)
    collector = Collector(env, policy, frames_per_batch=num_envs * steps, total_frames=-1)
    it = iter(collector)

    def one_round():
        next(it)
        return steps * num_envs

    try:
        with torch.inference_mode():
            return _timed(one_round, repeats)
    finally:
        collector.shutdown()


def _td_policy(env, device):
    """The rows' MLP as a TensorDictModule ("observation" -> "action"), for torchrl and simeval."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(_policy(device), in_keys=["observation"], out_keys=["action"])


def simeval_evaluator(num_envs: int, steps: int, device: str, repeats: int) -> list[float]:
    import functools

    import simeval
    from simeval.envs import make_env

    ev = simeval.Evaluator(
        # No VecNorm: the other rows have no normaliser either (and a random policy has no statistics).
        functools.partial(
            make_env, f"isaaclab:{TASK}", num_envs=num_envs, device=device, max_steps=steps, obs_norm=False
        ),
        policy_factory=functools.partial(_td_policy, device=device),
        num_trajectories=num_envs,
        device=device,
        backend="thread",
        seed=0,
    )
    last = {}

    def one_round():
        result = ev.evaluate(step=0)
        last.update(result)
        return int(result["eval/frame_count"])

    try:
        return _timed(one_round, repeats)
    finally:
        ev.shutdown()


ROWS = {"bare": bare, "torchrl": torchrl_collector, "simeval": simeval_evaluator}
LABELS = {
    "bare": "(a) bare Isaac Lab loop",
    "torchrl": "(b) torchrl IsaacLabWrapper + Collector",
    "simeval": "(c) simeval Evaluator (thread)",
}


def child(row: str, num_envs: int, steps: int, device: str, repeats: int) -> None:
    rates = ROWS[row](num_envs, steps, device, repeats)
    print("RESULT " + json.dumps({"rates": rates}), flush=True)


def run_row(row: str, num_envs: int, args) -> float | None:
    cmd = [sys.executable, __file__, "--child", row, "--num-envs", str(num_envs), "--steps", str(args.steps)]
    cmd += ["--device", args.device, "--repeats", str(args.repeats)]
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return statistics.median(json.loads(line[7:])["rates"])
    print(f"  {row} at {num_envs} envs failed:\n{proc.stderr[-1500:]}", file=sys.stderr)
    return None


def _machine(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPU cores"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, Isaac Lab on Warp's CPU device"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024, 4096])
    p.add_argument("--steps", type=int, default=100, help="steps per sub-env per round (= the episode cap)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per process (after a warm-up round)")
    p.add_argument("--trials", type=int, default=3, help="processes per row, the rows interleaved (median)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.num_envs[0], args.steps, args.device, args.repeats)
        return
    print(f"Isaac Lab {TASK}, device {args.device}; {_machine(args.device)}")
    print(
        f"env-steps/s: the median over {args.trials} processes per row (rows interleaved) of each one's median "
        f"of {args.repeats} rounds of {args.steps} steps per sub-env (after a warm-up round)\n"
    )
    header = f"{'num_envs':>8}  " + "  ".join(f"{LABELS[r]:>40}" for r in ROWS) + f"  {'simeval / bare':>14}"
    print(header)
    for n in args.num_envs:
        trials = {row: [] for row in ROWS}
        for _ in range(args.trials):  # rows interleaved: a shared machine's drift hits every row alike
            for row in ROWS:
                trials[row].append(run_row(row, n, args))
        rates = {r: statistics.median(v) if None not in v else None for r, v in trials.items()}
        cells = "  ".join(f"{rates[r]:>40,.0f}" if rates[r] else f"{'failed':>40}" for r in ROWS)
        ratio = rates["simeval"] / rates["bare"] if rates["simeval"] and rates["bare"] else float("nan")
        print(f"{n:>8}  {cells}  {ratio:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
