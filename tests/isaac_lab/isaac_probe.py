"""What the Isaac Lab tests run in a fresh process (Isaac Lab holds one simulation per process).

    python isaac_probe.py evaluate BACKEND CHECKPOINT OUT.json [--device cpu] [--episodes 6] ...
    python isaac_probe.py bare CHECKPOINT OUT.json [--device cpu] ...
    python isaac_probe.py layout OUT.json [--device cpu]
    python isaac_probe.py rsl_rl CHECKPOINT OUT.json [--device cpu] ...
    python isaac_probe.py batch PLAN.json


``evaluate`` runs simeval's Evaluator on the offline Isaac Lab cartpole with a
checkpoint's weights and VecNorm statistics; ``bare`` steps the same env with
the same policy in a plain loop (no simeval rollout code) and reports each
sub-env's first episode; ``layout`` describes what make_env built; ``rsl_rl``
plays an rsl_rl checkpoint the way Isaac Lab's play script does (rsl_rl's own
runner and inference policy), reports each sub-env's first episode, and how far
simeval's rebuilt actor's actions are from rsl_rl's on the observations seen.
``batch`` runs a plan's probes (a JSON list of the argument lists above) one
after the other in this one process, so Isaac Lab starts once for all of them;
a probe that raises writes ``{"probe_error": TRACEBACK}`` to its OUT.json and
the next one still runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import traceback

TASK = "isaaclab:Simeval-Isaac-Cartpole-Direct"


def _args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("what")
    p.add_argument("rest", nargs="*")
    p.add_argument("--device", default="cpu")
    p.add_argument("--episodes", type=int, default=6)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--seed", type=int, default=3)
    return p.parse_intermixed_args(argv)


def _write(path, data):
    with open(path, "w") as f:
        json.dump(data, f)


def evaluate(a) -> None:
    backend, ckpt_path, out = a.rest
    import simeval
    from simeval.envs import make_env
    from simeval.factories import build_policy

    ck = simeval.load_checkpoint(ckpt_path)
    norm = ck.obs_norm is not None  # rsl_rl normalises inside its actor; a simeval checkpoint carries VecNorm
    ev = simeval.Evaluator(
        functools.partial(make_env, TASK, num_envs=a.num_envs, device=a.device, max_steps=a.max_steps, obs_norm=norm),
        policy_factory=functools.partial(build_policy, ck.policy_factory, ck.policy_kwargs),
        num_trajectories=a.episodes,
        backend=backend,
        device=a.device,
        seed=a.seed,
        keep_episodes=True,
        start_timeout=300,
        num_gpus=0 if a.device == "cpu" else 1,
    )
    try:
        results = [ev.evaluate(weights_dict=ck.weights_dict, step=i) for i in range(2)]
    finally:
        ev.shutdown()
    plain = [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in r.items()} for r in results]
    _write(out, [{k: v for k, v in r.items() if k != "eval/video"} for r in plain])


def bare(a) -> None:
    ckpt_path, out = a.rest
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    import simeval
    from simeval.envs import OBS_NORM_ID, make_env
    from simeval.factories import build_policy
    from simeval.weights import load_weights

    ck = simeval.load_checkpoint(ckpt_path)
    env = make_env(TASK, num_envs=a.num_envs, device=a.device, max_steps=a.max_steps)
    policy = build_policy(ck.policy_factory, ck.policy_kwargs, env).to(a.device)
    vecnorm = env.transform[2]
    load_weights(policy, ck.policy.to(a.device), "policy")
    load_weights(vecnorm, ck.obs_norm.to(a.device), OBS_NORM_ID)  # a simeval checkpoint with VecNorm statistics
    vecnorm.freeze()
    torch.manual_seed(a.seed)
    env.set_seed(a.seed)
    returns = [None] * a.num_envs
    total = torch.zeros(a.num_envs, dtype=torch.float64)
    td = env.reset()
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        while any(r is None for r in returns):
            td = policy(td)
            td, td_next = env.step_and_maybe_reset(td)
            total += td["next", "reward"].reshape(-1).double().cpu()
            for e in td["next", "done"].reshape(-1).nonzero().flatten().tolist():
                if returns[e] is None:
                    returns[e] = float(total[e])
                total[e] = 0.0
            td = td_next
    env.close()
    _write(out, {"returns": returns})


def rsl_rl(a) -> None:
    ckpt_path, out = a.rest
    import gymnasium as gym
    import torch
    from isaaclab_rl.rsl_rl import (
        RslRlVecEnvWrapper,
        check_rsl_rl_version,
        create_rsl_rl_runner,
        handle_deprecated_rsl_rl_cfg,
    )
    from isaaclab_tasks.utils import load_cfg_from_registry, parse_env_cfg
    from tensordict.nn import TensorDictModule

    import simeval
    from simeval.checkpoints.formats.rsl_rl_net import RslRlActor
    from simeval.envs.simulators.isaaclab import env as isaaclab
    from simeval.weights import load_weights

    task = TASK.split(":", 1)[1]
    isaaclab.check_task(task)
    env_cfg = parse_env_cfg(task, device=a.device, num_envs=a.num_envs)
    env_cfg.seed = a.seed
    env_cfg.episode_length_s = (a.max_steps - 0.5) * env_cfg.sim.dt * env_cfg.decimation
    agent_cfg = load_cfg_from_registry(task, "rsl_rl_cfg_entry_point")
    agent_cfg = handle_deprecated_rsl_rl_cfg(agent_cfg, check_rsl_rl_version())
    agent_cfg.device = a.device
    with isaaclab.launch_for(env_cfg):
        env = RslRlVecEnvWrapper(gym.make(task, cfg=env_cfg), clip_actions=agent_cfg.clip_actions)
        runner = create_rsl_rl_runner(env, agent_cfg, log_dir=None)
        runner.load(ckpt_path, map_location=a.device)
        policy = runner.get_inference_policy(device=a.device)
        ck = simeval.load_checkpoint(ckpt_path)
        obs_dim, act_dim = ck.meta["obs_dim"], ck.meta["action_dim"]
        ours = TensorDictModule(RslRlActor(obs_dim, act_dim, **ck.policy_kwargs), ["observation"], ["action"])
        load_weights(ours, ck.policy, "policy")
        returns = [None] * a.num_envs
        total = torch.zeros(a.num_envs, dtype=torch.float64)
        max_diff = 0.0
        obs = env.get_observations()
        with torch.inference_mode():
            while any(r is None for r in returns):
                actions = policy(obs)
                mine = ours.module(obs["policy"].cpu())
                max_diff = max(max_diff, float((mine - actions.cpu()).abs().max()))
                obs, rew, dones, _ = env.step(actions)
                total += rew.reshape(-1).double().cpu()
                for e in dones.reshape(-1).nonzero().flatten().tolist():
                    if returns[e] is None:
                        returns[e] = float(total[e])
                    total[e] = 0.0
        env.close()
    _write(out, {"returns": returns, "max_action_diff": max_diff, "architecture": ck.meta["architecture"]})


def layout(a) -> None:
    (out,) = a.rest
    from simeval.envs import OBS_NORM_ID, make_env
    from simeval.weights import resolve_model
    from simeval.worker.vecnorm import iter_transforms

    env = make_env(TASK, num_envs=a.num_envs, device=a.device, max_steps=a.max_steps)
    td = env.rollout(a.max_steps + 5, break_when_any_done=False)
    _write(
        out,
        {
            "transforms": [type(t).__name__ for t in env.transform],
            "wrapper_transforms": [type(t).__name__ for t in iter_transforms(env.base_env)],
            "obs_norm_id": type(resolve_model({"env": env}, OBS_NORM_ID)).__name__,
            "batch_size": list(env.batch_size),
            "device": str(env.device),
            "obs_shape": list(td["observation"].shape),
            "log_keys": sorted("/".join(k[2:]) for k in td.keys(True, True) if k[:2] == ("next", "log")),
            "done_steps": td["next", "done"].reshape(a.num_envs, -1).nonzero()[:, 1].tolist(),
            "native_autoreset": bool(env.__dict__.get("_torchrl_native_autoreset", False)),
        },
    )
    env.close()


def batch(a) -> None:
    (plan,) = a.rest
    with open(plan) as f:
        steps = [_args(argv) for argv in json.load(f)]
    for step in steps:
        try:
            PROBES[step.what](step)
        except Exception:  # noqa: BLE001  (the test that reads this probe's OUT.json fails with it)
            _write(step.rest[-1], {"probe_error": traceback.format_exc()})


PROBES = {"evaluate": evaluate, "bare": bare, "layout": layout, "rsl_rl": rsl_rl}

if __name__ == "__main__":
    args = _args(sys.argv[1:])
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    {**PROBES, "batch": batch}[args.what](args)
