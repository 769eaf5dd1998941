"""``make demo``: evaluate a policy on batched HalfCheetah-v5 and print a metrics table.

Runs on embedded defaults with the thread backend: one blocking evaluation,
then one in the background (trigger, keep "training", wait). The policy is a
fixed-seed MLP; a trained checkpoint replaces it once checkpoints exist.
"""

from __future__ import annotations

import argparse
import time


def _policy(env=None, seed: int = 0):
    import torch
    from tensordict.nn import TensorDictModule
    from torch import nn

    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(17, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 6), nn.Tanh())
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


def _env(num_envs: int):
    from simeval.envs import make_env

    return make_env("HalfCheetah-v5", num_envs=num_envs, obs_norm=False)


def table(rows: list[tuple[str, dict]]) -> str:
    """Metrics side by side, one column per evaluation."""
    keys = [k for k in rows[0][1] if not k.endswith("/step")]
    width = max(len(k) for k in keys) + 2
    head = f"{'metric':<{width}}" + "".join(f"{name:>16}" for name, _ in rows)
    lines = [head, "-" * len(head)]
    for key in keys:
        cells = "".join(f"{float(result[key]):>16.2f}" for _, result in rows)
        lines.append(f"{key:<{width}}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from simeval import Evaluator

    print(
        f"simeval demo: HalfCheetah-v5, {args.num_envs} batched envs, {args.episodes} episodes of up to "
        f"{args.max_steps} steps, thread backend, seed {args.seed}\n"
    )
    evaluator = Evaluator(
        lambda: _env(args.num_envs),
        policy_factory=_policy,
        num_trajectories=args.episodes,
        max_steps=args.max_steps,
        seed=args.seed,
    )
    try:
        policy = _policy(seed=1)
        blocking = evaluator.evaluate(policy, step=0)
        evaluator.trigger_eval(policy, step=1)
        start = time.perf_counter()
        while evaluator.pending:  # training would run here
            time.sleep(0.05)
        background = evaluator.wait()
        print(table([("evaluate()", blocking), ("trigger_eval()", background)]))
        print(
            f"\nbackground round returned after {time.perf_counter() - start:.1f} s; "
            "same weights and seed, same numbers: "
            f"{blocking['eval/reward'] == background['eval/reward']}"
        )
    finally:
        evaluator.shutdown()


if __name__ == "__main__":
    main()
