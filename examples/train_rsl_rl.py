"""Train an Isaac Lab task with rsl_rl, the way Isaac Lab's own ``train.py`` does, kit-less.

Writes Isaac Lab's run layout, which ``python -m simeval.launch --checkpoint``
and ``--watch`` read as they are::

    LOG_ROOT/rsl_rl/<experiment>/<run>/params/{agent,env}.yaml
    LOG_ROOT/rsl_rl/<experiment>/<run>/model_<iteration>.pt

With ``--eval-every N`` simeval evaluates the actor every N iterations beside
training (:func:`simeval.integrations.rsl_rl.evaluate_during_training`, in a child
process), into ``<run>/simeval/results.jsonl`` and the run's TensorBoard as ``Eval/*``.

Run in the Isaac Lab venv (``make isaaclab``)::

    .venv-isaaclab/bin/python examples/train_rsl_rl.py --task Simeval-Isaac-Cartpole-Direct \
        --num-envs 256 --max-iterations 150 --device cpu --eval-every 25
"""

from __future__ import annotations

import argparse
import datetime
import os


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="Simeval-Isaac-Cartpole-Direct")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--max-iterations", type=int, default=None, help="default: the task's rsl_rl config")
    p.add_argument("--save-interval", type=int, default=None, help="default: the task's rsl_rl config")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log-root", default="logs")
    p.add_argument("--run-name", default=None, help="default: the date and time, as Isaac Lab names runs")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate beside training every N iterations (0: off)")
    p.add_argument("--eval-episodes", type=int, default=32)
    p.add_argument("--eval-max-steps", type=int, default=None, help="default: the task's episode length")
    a = p.parse_args(argv)

    import gymnasium as gym
    from isaaclab.utils.io import dump_yaml
    from isaaclab_rl.rsl_rl import (
        RslRlVecEnvWrapper,
        check_rsl_rl_version,
        create_rsl_rl_runner,
        handle_deprecated_rsl_rl_cfg,
    )
    from isaaclab_tasks.utils import load_cfg_from_registry, parse_env_cfg

    from simeval.envs.simulators.isaaclab import env as isaaclab

    isaaclab.check_task(a.task)
    env_cfg = parse_env_cfg(a.task, device=a.device, num_envs=a.num_envs)
    agent_cfg = handle_deprecated_rsl_rl_cfg(
        load_cfg_from_registry(a.task, "rsl_rl_cfg_entry_point"), check_rsl_rl_version()
    )
    agent_cfg.device = a.device
    agent_cfg.seed = env_cfg.seed = a.seed
    if a.max_iterations is not None:
        agent_cfg.max_iterations = a.max_iterations
    if a.save_interval is not None:
        agent_cfg.save_interval = a.save_interval
    run = a.run_name or datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    log_dir = os.path.abspath(os.path.join(a.log_root, "rsl_rl", agent_cfg.experiment_name, run))
    dump_yaml(os.path.join(log_dir, "params", "env.yaml"), env_cfg)
    dump_yaml(os.path.join(log_dir, "params", "agent.yaml"), agent_cfg)

    with isaaclab.launch_for(env_cfg):
        env = RslRlVecEnvWrapper(gym.make(a.task, cfg=env_cfg), clip_actions=agent_cfg.clip_actions)
        runner = create_rsl_rl_runner(env, agent_cfg, log_dir=log_dir)
        if a.eval_every:
            from simeval.integrations.rsl_rl import evaluate_during_training

            evaluate_during_training(
                runner, f"isaaclab:{a.task}", every=a.eval_every, episodes=a.eval_episodes,
                max_steps=a.eval_max_steps, device=a.device,
            )  # fmt: skip
        runner.learn(num_learning_iterations=agent_cfg.max_iterations, init_at_random_ep_len=True)
        env.close()
    print(log_dir)
    return log_dir


if __name__ == "__main__":
    main()
