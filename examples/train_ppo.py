"""Compact PPO on a MuJoCo task with torchrl, evaluated asynchronously by simeval.

    python examples/train_ppo.py --env HalfCheetah-v5 --frames 1000000 --ckpt-dir runs/ppo/ckpt

Every ``--eval-every`` frames the current actor and the training env's VecNormV2
statistics go to a simeval Evaluator: in-process (``--eval-backend``, the process
backend by default), or to a served evaluator (``python -m simeval.launch --serve
NAME``) with ``--eval-serve NAME``. Checkpoints are written with
``simeval.save_checkpoint`` every ``--ckpt-every`` frames (atomically; a watcher
can evaluate them).

On a GPU (``--device cuda:0``) the env's tensors, the networks, the batch, the
replay storage and the loss all live there, and the in-process evaluator runs its
policy there too; ``--env-backend warp`` also steps the physics there:

    python examples/train_ppo.py --device cuda:0 --env-backend warp --num-envs 1024 \
        --frames-per-batch 32768 --minibatch 4096 --epochs 5

(keep ``--eval-backend process``, the default, with a Warp env on a GPU: a thread-backend
worker steps it without CUDA graphs and took 71% of training's speed on an H200.)
"""

from __future__ import annotations

import argparse
import os
import time

# make_env's backends (simeval.envs.ENV_BACKENDS), spelled out so that --help needs no import.
ENV_BACKENDS = ("native", "gymnasium", "warp")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--frames", type=int, default=1_000_000)
    p.add_argument("--frames-per-batch", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--minibatch", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lmbda", type=float, default=0.95)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--entropy", type=float, default=0.0)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (small MLPs: 1 is fastest)")
    p.add_argument(
        "--device",
        default=None,
        help="where training runs and the env puts its tensors, e.g. cpu or cuda:0 (default: the env's device, "
        "cpu for the MuJoCo backends native and gymnasium)",
    )
    p.add_argument(
        "--env-backend",
        default=None,
        choices=ENV_BACKENDS,
        help="make_env backend (default: make_env's, native for the MuJoCo tasks it has); warp steps on --device",
    )
    p.add_argument("--eval-every", type=int, default=100_000, help="frames between evaluations (0: never)")
    p.add_argument("--eval-episodes", type=int, default=8)
    p.add_argument("--eval-serve", default=None, help="name of a served evaluator to use instead of a local one")
    p.add_argument(
        "--eval-backend",
        default="process",
        choices=("thread", "process"),
        help="the in-process evaluator's backend: thread shares this process (and its CUDA context), "
        "process runs a child (a second CUDA context on a GPU)",
    )
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--ckpt-every", type=int, default=100_000)
    return p.parse_args(argv)


def _eval_env(name: str, num_envs: int, device: str | None = None, backend: str | None = None):
    from simeval.envs import make_env

    return make_env(name, num_envs=num_envs, device=device, backend=backend)


def _to_device(module, device):
    """``module.to(device)``, with the tensors in its distributions' keyword arguments (``.to`` leaves those).

    The actor's TanhNormal ``low``/``high`` come from the env's action spec: they
    must live where the actor runs.
    """
    import torch

    module.to(device)
    for sub in module.modules():
        kwargs = getattr(sub, "distribution_kwargs", None)
        if isinstance(kwargs, dict):
            for key, value in kwargs.items():
                if isinstance(value, torch.Tensor):
                    kwargs[key] = value.to(device)
    return module


def _fill_autoreset_next_obs(batch) -> None:
    """Envs that reset themselves inside step (Isaac Lab) have no final observation: torchrl marks it NaN.

    GAE would turn NaN into NaN advantages, even where ``terminated`` masks the
    value. The last observation stands in for it, which bootstraps a time-out
    with V(s_T-1), as rsl_rl does.
    """
    import torch

    nxt = batch["next", "observation"]
    missing = nxt.isnan().any(-1, keepdim=True)
    if missing.any():
        batch["next", "observation"] = torch.where(missing, batch["observation"], nxt)


def main(argv=None) -> None:
    args = parse(argv)
    import functools

    import torch
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
    from torchrl.modules import MLP, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    import simeval
    from simeval.envs import OBS_NORM_ID, make_env
    from simeval.policies import gaussian_actor

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    env = make_env(args.env, num_envs=args.num_envs, seed=args.seed, device=args.device, backend=args.env_backend)
    # Training runs where the env puts its tensors (--device, or the env's own: CPU for the MuJoCo
    # backends, cuda:0 for Warp or Isaac Lab on a GPU machine), so no batch crosses devices. The env's
    # device comes with its index ("cuda" -> cuda:0), which the collector compares with the actor's.
    device = env.device if env.device is not None else torch.device(args.device or "cpu")
    vecnorm = env.transform[2]
    actor = _to_device(gaussian_actor(env, hidden=args.hidden), device)
    obs_dim = env.observation_spec["observation"].shape[-1]
    critic = ValueOperator(
        MLP(in_features=obs_dim, out_features=1, num_cells=args.hidden, activation_class=torch.nn.Tanh),
        in_keys=["observation"],
    ).to(device)
    with torch.no_grad():
        td = env.reset()
        actor(td)
        critic(td)

    # The actor already lives on `device`: the collector runs it as is (no copy) and stores batches there.
    collector = Collector(
        env,
        actor,
        frames_per_batch=args.frames_per_batch,
        total_frames=args.frames,
        policy_device=device,
        env_device=env.device,
        storing_device=device,
    )
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(args.frames_per_batch, device=device),
        sampler=SamplerWithoutReplacement(),
        batch_size=args.minibatch,
    )
    advantage = GAE(gamma=args.gamma, lmbda=args.lmbda, value_network=critic, average_gae=False)
    loss_fn = ClipPPOLoss(
        actor, critic, clip_epsilon=args.clip, entropy_coeff=args.entropy, critic_coeff=0.5, normalize_advantage=True
    ).to(device)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=args.lr, eps=1e-5)

    if args.eval_serve:
        evaluator = simeval.connect(args.eval_serve, busy_policy="skip")
    elif args.eval_every:
        # The eval env is built like the training env (device, backend) and the evaluator's own actor
        # is moved to `device`; the weights handed over are moved to each module's device on load.
        evaluator = simeval.Evaluator(
            functools.partial(_eval_env, args.env, args.eval_episodes, args.device, args.env_backend),
            policy_factory=functools.partial(gaussian_actor, hidden=args.hidden),
            num_trajectories=args.eval_episodes,
            device=str(device),
            backend=args.eval_backend,
            busy_policy="skip",
            seed=args.seed,
        )
    else:
        evaluator = None

    frames, next_eval, next_ckpt = 0, args.eval_every, args.ckpt_every
    start = time.time()
    updates_per_batch = args.epochs * (args.frames_per_batch // args.minibatch)
    total_updates = updates_per_batch * (args.frames // args.frames_per_batch)
    step = 0
    try:
        for batch in collector:
            frames += batch.numel()
            _fill_autoreset_next_obs(batch)
            with torch.no_grad():
                advantage(batch)
            buffer.extend(batch.reshape(-1))
            for _ in range(args.epochs):
                for _ in range(args.frames_per_batch // args.minibatch):
                    alpha = 1.0 - step / max(1, total_updates)
                    for group in optim.param_groups:
                        group["lr"] = args.lr * alpha
                    losses = loss_fn(buffer.sample())
                    loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                    optim.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
                    optim.step()
                    step += 1
            collector.update_policy_weights_()
            done = batch["next", "done"]
            # The sum before the last step plus its reward: also right where the env reset itself
            # in that step and its "next" episode_reward is gone (Isaac Lab).
            ended = batch["episode_reward"][done] + batch["next", "reward"][done]
            train_return = ended.mean().item() if ended.numel() else float("nan")
            print(
                f"frames {frames:>9,}  train return {train_return:9.1f}  {frames / (time.time() - start):6.0f} fps",
                flush=True,
            )
            if evaluator is not None and frames >= next_eval:
                next_eval += args.eval_every
                evaluator.trigger_eval(weights_dict={"policy": actor, OBS_NORM_ID: vecnorm}, step=frames)
            if evaluator is not None:
                result = evaluator.poll()
                if result is not None:
                    print(
                        f"eval @ {result['eval/step']:,}: return {result['eval/reward']:.1f} "
                        f"[{result['eval/reward_ci_low']:.1f}, {result['eval/reward_ci_high']:.1f}]",
                        flush=True,
                    )
            if args.ckpt_dir and frames >= next_ckpt:
                next_ckpt += args.ckpt_every
                path = os.path.join(args.ckpt_dir, f"step_{frames:09d}.pt")
                simeval.save_checkpoint(path, actor, frames, obs_norm=vecnorm, env=args.env)
        if args.ckpt_dir:
            simeval.save_checkpoint(
                os.path.join(args.ckpt_dir, f"step_{frames:09d}.pt"), actor, frames, obs_norm=vecnorm, env=args.env
            )
        if evaluator is not None:
            result = evaluator.wait(600)
            if result is not None:
                print(f"eval @ {result['eval/step']:,}: return {result['eval/reward']:.1f}", flush=True)
    finally:
        collector.shutdown()
        if evaluator is not None:
            evaluator.shutdown()


if __name__ == "__main__":
    main()
