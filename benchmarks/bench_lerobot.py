"""LeRobot's PushT with an ACT policy: simeval's Evaluator beside lerobot-eval's own loop, same policy, same episodes.

Prints, in one run and per number of envs B: the wall seconds and env-steps per second to evaluate
``--episodes`` episodes of ``--steps`` steps from seed 0, for

  * lerobot-eval: ``lerobot.scripts.lerobot_eval.eval_policy`` (what ``lerobot-eval`` runs, without
    its videos) on LeRobot's own SyncVectorEnv of B envs, batch after batch;
  * simeval: ``simeval.Evaluator`` (thread backend) on ``make_env("lerobot:pusht", num_envs=B)``,
    the checkpoint read from the same ``pretrained_model/`` directory;

and their ratio, with the mean return of each (the same episodes: they agree to float32 rounding).
The policy is tests/lerobot/act_policy.py's ACT (96-pixel image, chunks of 10, 5 played). Medians over
``--repeats``; the machine and the date are printed. Runs in .venv-lerobot (make lerobot).

    .venv-lerobot/bin/python benchmarks/bench_lerobot.py [--envs 4 16] [--episodes 16] [--steps 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # lerobot-eval's progress bars
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "lerobot"))


def lerobot_eval(policy_dir: str, envs: int, episodes: int, steps: int) -> tuple[float, float]:
    """(seconds, mean return) of lerobot-eval's eval_policy on ``envs`` PushT envs, from seed 0."""
    import torch
    from lerobot.envs.factory import make_env, make_env_config, make_env_pre_post_processors
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.scripts.lerobot_eval import eval_policy

    config = make_env_config("pusht", episode_length=steps)
    vec = make_env(config, n_envs=envs)["pusht"][0]
    policy = ACTPolicy.from_pretrained(policy_dir)
    pre, post = make_pre_post_processors(policy.config, pretrained_path=policy_dir)
    env_pre, env_post = make_env_pre_post_processors(config, policy.config)
    with torch.no_grad():  # warm, as simeval's row is: one batch
        eval_policy(vec, policy, env_pre, env_post, pre, post, n_episodes=envs, start_seed=0)
    start = time.perf_counter()
    with torch.no_grad():
        info = eval_policy(vec, policy, env_pre, env_post, pre, post, n_episodes=episodes, start_seed=0)
    seconds = time.perf_counter() - start
    vec.close()
    return seconds, info["aggregated"]["avg_sum_reward"]


def simeval_eval(policy_dir: str, envs: int, episodes: int, steps: int) -> tuple[float, float]:
    """(seconds, mean return) of simeval's Evaluator on ``envs`` sub-envs of lerobot:pusht, from seed 0."""
    import simeval
    from simeval.envs import make_env
    from simeval.factories import build_policy

    ck = simeval.load_checkpoint(policy_dir)
    ev = simeval.Evaluator(
        functools.partial(make_env, "lerobot:pusht", num_envs=envs, max_steps=steps),
        policy_factory=functools.partial(build_policy, ck.policy_factory, ck.policy_kwargs),
        num_trajectories=episodes,
        backend="thread",
        device="cpu",
        seed=0,
    )
    try:
        ev.evaluate(weights_dict=ck.weights_dict, step=0)  # warm: the env and policy are built
        start = time.perf_counter()
        result = ev.evaluate(weights_dict=ck.weights_dict, step=0)
        seconds = time.perf_counter() - start
    finally:
        ev.shutdown()
    return seconds, float(result["eval/reward"])


def main() -> None:
    """Run the rows and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from act_policy import save_act

    policy_dir = str(save_act(os.path.join(tempfile.mkdtemp(), "pretrained_model")))
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{datetime.date.today()}; PushT, ACT (tests/lerobot/act_policy.py), {args.episodes} episodes "
          f"of {args.steps} steps, medians of {args.repeats}")  # fmt: skip
    print("| envs | lerobot-eval s | simeval s | lerobot-eval env-steps/s | simeval env-steps/s | ratio | "
          "mean return (lerobot-eval, simeval) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    total = args.episodes * args.steps
    for envs in args.envs:
        theirs = [lerobot_eval(policy_dir, envs, args.episodes, args.steps) for _ in range(args.repeats)]
        ours = [simeval_eval(policy_dir, envs, args.episodes, args.steps) for _ in range(args.repeats)]
        t, o = statistics.median(s for s, _ in theirs), statistics.median(s for s, _ in ours)
        print(f"| {envs} | {t:.1f} | {o:.1f} | {total / t:.0f} | {total / o:.0f} | {t / o:.2f}x | "
              f"{theirs[0][1]:.3f}, {ours[0][1]:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
