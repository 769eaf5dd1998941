"""Train the shipped pixel policy: the shipped HalfCheetah PPO expert (state), cloned into a CNN that sees only pixels.

Usage (in the core venv; a few minutes on 2 CPU cores)::

    .venv/bin/python examples/train_pixel_bc.py --out simeval/data/halfcheetah_pixels_bc

The expert is the last checkpoint of ``simeval/data/halfcheetah_ppo`` (simeval's Gaussian actor,
acting with its mean, its frozen VecNorm applied to the state). It drives native HalfCheetah-v5
sub-envs that also render the ``track`` camera at ``--image-size`` pixels, two frames stacked
(``frame_stack=2``: the motion between them); its actions, run with a little noise so that the
data covers recoveries, label the images. Behaviour cloning fits ``simeval.policies:cnn_policy``
(the images alone: ``state=False``) to the expert's clean actions by mean squared error.
A checkpoint is written every ``--save-every`` epochs (step = gradient steps), in simeval's format,
with no observation normaliser: evaluate it with the same cameras, image size and frame stack.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # headless camera images; read when MuJoCo loads

import torch  # noqa: E402

from simeval import load_checkpoint, save_checkpoint  # noqa: E402
from simeval.envs import make_env  # noqa: E402
from simeval.factories import build_policy  # noqa: E402
from simeval.policies import cnn_policy  # noqa: E402
from simeval.weights import load_weights  # noqa: E402

EXPERT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "simeval", "data",
                      "halfcheetah_ppo", "step_001001472.pt")  # fmt: skip
CAMERA = "track"
IMAGE = f"observation.images.{CAMERA}"


def expert_of(env) -> callable:
    """The expert's deterministic action for a camera env's TensorDict (its VecNorm applied to the state)."""
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    ck = load_checkpoint(EXPERT)
    state_env = make_env("HalfCheetah-v5", num_envs=1, obs_norm=False)
    actor = build_policy(ck.policy_factory, ck.policy_kwargs, state_env)
    load_weights(actor, ck.policy, "policy")
    state_env.close()
    stats = ck.obs_norm["__extra_state__", "."]
    loc, scale = stats["loc.-|-.observation"], stats["var.-|-.observation"].sqrt().clamp_min(1e-4)

    def act(td: TensorDict) -> torch.Tensor:
        obs = (td["observation.state"] - loc) / scale
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            return actor(TensorDict({"observation": obs}, batch_size=obs.shape[:1]))["action"]

    return act


def collect(num_envs: int, steps: int, size: int, noise: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """(uint8 images [N, 6, S, S], the expert's actions [N, 6], episode returns) from the expert's rollouts."""
    env = make_env("HalfCheetah-v5", num_envs=num_envs, seed=seed, obs_norm=False, cameras=[CAMERA],
                   image_size=size, frame_stack=2)  # fmt: skip
    act = expert_of(env)
    gen = torch.Generator().manual_seed(seed)
    images, actions, returns = [], [], []
    td = env.reset()
    for _ in range(steps):
        clean = act(td)
        images.append((td[IMAGE] * 255).round().to(torch.uint8))
        actions.append(clean)
        noisy = (clean + noise * torch.randn(clean.shape, generator=gen)).clamp(-1, 1)
        out, td = env.step_and_maybe_reset(td.set("action", noisy))
        done = out["next", "done"].reshape(-1)
        returns += out["next", "episode_reward"].reshape(-1)[done].tolist()
    env.close()
    return torch.cat(images), torch.cat(actions), returns


def main() -> None:
    """Collect, clone, save."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2000, help="steps of every sub-env (the data: num-envs x steps)")
    parser.add_argument("--image-size", type=int, default=48)
    parser.add_argument("--noise", type=float, default=0.2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    start = time.time()
    images, actions, returns = collect(args.num_envs, args.steps, args.image_size, args.noise, args.seed)
    print(f"{len(images)} frames in {time.time() - start:.0f} s; the noisy expert's returns: {returns}")
    env = make_env("HalfCheetah-v5", num_envs=1, obs_norm=False, cameras=[CAMERA], image_size=args.image_size,
                   frame_stack=2)  # fmt: skip
    policy = cnn_policy(env, cameras=[CAMERA])
    env.close()
    net = policy.module
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    os.makedirs(args.out, exist_ok=True)
    step = 0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(images))
        total = 0.0
        for i in range(0, len(order), args.batch):
            rows = order[i : i + args.batch]
            loss = torch.nn.functional.mse_loss(net(images[rows].float() / 255), actions[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            total += loss.item() * len(rows)
        print(f"epoch {epoch}: mse {total / len(images):.4f} ({time.time() - start:.0f} s)")
        if epoch % args.save_every == 0 or epoch == args.epochs:
            save_checkpoint(os.path.join(args.out, f"step_{step:09d}.pt"), policy, step=step, env="HalfCheetah-v5")
    open(os.path.join(args.out, "DONE"), "w").close()


if __name__ == "__main__":
    main()
