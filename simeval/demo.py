"""``make demo``: evaluate the shipped PPO checkpoint on batched HalfCheetah-v5.

Runs the launcher on its embedded defaults (thread backend, 8 envs, 16
episodes, seed 0), then the same evaluation for an untrained policy and for
the trained policy without its VecNorm statistics, prints the three side by
side and draws the eval plot.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _last(out: str) -> dict:
    with open(os.path.join(out, "results.jsonl")) as f:
        return json.loads(f.read().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    from simeval import launch, report

    root = os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S"))
    trained = os.path.join(root, "trained")
    print("$ python -m simeval.launch --out", trained, flush=True)
    if launch.main(["--out", trained]) != 0:
        return 1

    # An untrained actor of the same architecture, with the same VecNorm statistics.
    import torch

    from simeval import load_checkpoint, save_checkpoint
    from simeval.envs import make_env
    from simeval.policies import gaussian_actor

    shipped = load_checkpoint(launch.SHIPPED_CHECKPOINT)
    torch.manual_seed(0)
    env = make_env(shipped.env, num_envs=1)
    random_ckpt = save_checkpoint(
        os.path.join(root, "untrained.pt"),
        gaussian_actor(env, **shipped.policy_kwargs),
        0,
        obs_norm=None,
        env=shipped.env,
    )
    env.close()
    rows = {"trained (shipped checkpoint)": trained}
    for label, args in (
        ("trained, VecNorm stats left out", ["--checkpoint", launch.SHIPPED_CHECKPOINT, "--no-obs-norm"]),
        ("untrained policy", ["--checkpoint", random_ckpt, "--no-obs-norm"]),
    ):
        out = os.path.join(root, label.split(",")[0].split()[0] + ("-no-vecnorm" if "left out" in label else ""))
        print(f"\n$ python -m simeval.launch {' '.join(args)} --out {out}", flush=True)
        if launch.main([*args, "--out", out]) != 0:
            return 1
        rows[label] = out

    print("\nHalfCheetah-v5, 16 episodes of 1000 steps, seed 0 (same initial states for every row):\n")
    print(f"{'policy':<34}{'return':>10}{'95% CI':>22}")
    for label, out in rows.items():
        m = _last(out)["metrics"]
        ci = "[{:.1f}, {:.1f}]".format(m["reward_ci_low"], m["reward_ci_high"])
        print(f"{label:<34}{m['reward']:>10.1f}{ci:>22}")
    png = report.plot({trained: report.read_results(trained)}, os.path.join(trained, "eval_curve.png"))
    print(f"\nresults: {os.path.join(trained, 'results.jsonl')}\nplot:    {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
