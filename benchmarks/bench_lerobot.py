"""LeRobot's PushT with an ACT policy: simeval's Evaluator beside lerobot-eval's own loop, same policy, same episodes.

Prints, in one run and per number of envs B: the env-steps per second to evaluate
``--episodes`` episodes of ``--steps`` steps from seed 0, for

  * lerobot-eval: ``lerobot.scripts.lerobot_eval.eval_policy`` (what ``lerobot-eval`` runs, without
    its videos) on LeRobot's own SyncVectorEnv of B envs, batch after batch;
  * simeval: ``simeval.Evaluator`` (thread backend) on ``make_env("lerobot:pusht", num_envs=B)``,
    the checkpoint read from the same ``pretrained_model/`` directory. Its CPU workers run torch on
    one intra-op thread (they leave the cores to the simulator and to training), so lerobot-eval
    is run twice: on every core, as it runs by default, and on one thread;

and their ratios, with the mean return of each (the same episodes: they agree to float32 rounding).
The policy is tests/le_robot/act_policy.py's ACT (96-pixel image, chunks of 10, 5 played). Medians over
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "le_robot"))


def lerobot_eval(policy_dir: str, envs: int, episodes: int, steps: int, threads: int) -> tuple[float, float]:
    """(seconds, mean return) of lerobot-eval's eval_policy on ``envs`` PushT envs from seed 0, on ``threads``."""
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
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    with torch.no_grad():  # warm, as simeval's row is: one batch
        eval_policy(vec, policy, env_pre, env_post, pre, post, n_episodes=envs, start_seed=0)
    start = time.perf_counter()
    with torch.no_grad():
        info = eval_policy(vec, policy, env_pre, env_post, pre, post, n_episodes=episodes, start_seed=0)
    seconds = time.perf_counter() - start
    torch.set_num_threads(before)
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
          f"{datetime.date.today()}; PushT, ACT (tests/le_robot/act_policy.py), {args.episodes} episodes "
          f"of {args.steps} steps, medians of {args.repeats}")  # fmt: skip
    cores = os.cpu_count() or 1
    print(f"| envs | lerobot-eval, {cores} threads: env-steps/s | lerobot-eval, 1 thread | simeval (1 thread) | "
          "simeval / lerobot-eval (all threads, 1 thread) | mean return (lerobot-eval, simeval) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    total = args.episodes * args.steps
    for envs in args.envs:
        rows = {}
        for name, run in (
            ("all", functools.partial(lerobot_eval, threads=cores)),
            ("one", functools.partial(lerobot_eval, threads=1)),
            ("simeval", simeval_eval),
        ):
            runs = [run(policy_dir, envs, args.episodes, args.steps) for _ in range(args.repeats)]
            rows[name] = (total / statistics.median(s for s, _ in runs), runs[0][1])
        (a, ret), (b, _), (o, ours) = rows["all"], rows["one"], rows["simeval"]
        print(f"| {envs} | {a:.0f} | {b:.0f} | {o:.0f} | {o / a:.2f}x, {o / b:.2f}x | {ret:.3f}, {ours:.3f} |")


if __name__ == "__main__":
    main()
