"""Train the shipped ManiSkill3 checkpoint: a scripted PushCube-v1 expert, cloned into simeval's MLP policy.

Usage (in the ManiSkill3 venv, ``make maniskill``; a few minutes on 2 CPU cores)::

    .venv-maniskill/bin/python examples/train_maniskill_bc.py --out simeval/data/maniskill_pushcube_bc

The expert reads the state (TCP, cube and goal positions in the 35-dim observation) and
pushes the cube along +x into the goal: above the cube's back, down behind it, then through
it. It controls ManiSkill3's default ``pd_joint_delta_pos`` arm by differential inverse
kinematics on the robot's own kinematic model (a finite-difference Jacobian of the TCP pose,
damped least squares, the gripper closed and pointing down). Its episodes, run with a
little action noise (so that the data covers recoveries), are the data; behaviour cloning
fits ``simeval.policies:mlp_policy`` to the expert's clean actions by mean squared error.
A checkpoint is written every ``--save-every`` epochs (step = gradient steps), in
simeval's format, with no observation normaliser (evaluate with ``obs_norm=False``).
The clone succeeds on part of the episodes, which is what the tests want: a success
metric that breaks shows up as 0 or 1.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from simeval import save_checkpoint
from simeval.envs import make_env
from simeval.envs.simulators.maniskill.env import one_env
from simeval.policies import mlp_policy

TASK = "PushCube-v1"
ENV_ID = f"maniskill:{TASK}"
# The 35-dim state of PushCube-v1: qpos 0:9, qvel 9:18, tcp_pose 18:25, goal_pos 25:28, obj_pose 28:35.
TCP, GOAL, CUBE = slice(18, 21), slice(25, 28), slice(28, 31)
ARM_JOINTS = 7
JOINT_DELTA = 0.1  # rad per unit of action: pd_joint_delta_pos's bounds
STEP_M = 0.04  # the largest TCP move the expert asks for in one step
BEHIND = 0.055  # where the TCP waits behind the cube's centre (m), at PUSH_Z
PUSH_Z = 0.025
ABOVE_Z = 0.08


def _rotvec(rot: np.ndarray) -> np.ndarray:
    """The rotation vector of a rotation matrix."""
    from transforms3d.axangles import mat2axangle

    if np.allclose(rot, np.eye(3), atol=1e-9):
        return np.zeros(3)
    axis, angle = mat2axangle(rot, unit_thresh=1e-3)
    return axis * angle


class Expert:
    """The scripted pusher of one ManiSkill3 env: ``act(obs)`` -> an 8-dim pd_joint_delta_pos action."""

    def __init__(self, env) -> None:
        from transforms3d.quaternions import quat2mat

        self._quat2mat = quat2mat
        robot = env.unwrapped.agent.robot
        self.model = robot._objs[0].create_pinocchio_model()
        self.tcp = [link.name for link in robot.get_links()].index("panda_hand_tcp")
        self.down = self._pose(robot.get_qpos()[0].numpy())[1]  # the initial, downward orientation

    def _pose(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.model.compute_forward_kinematics(q.astype(np.float64))
        pose = self.model.get_link_pose(self.tcp)
        return np.asarray(pose.p), self._quat2mat(pose.q)

    def target(self, obs: np.ndarray) -> np.ndarray:
        """Where the TCP goes next: behind the cube (from above where it is not behind yet), then through it."""
        tcp, goal, cube = obs[TCP], obs[GOAL], obs[CUBE]
        behind = np.array([cube[0] - BEHIND, cube[1], PUSH_Z])
        misplaced = tcp[0] > cube[0] - 0.025 or abs(tcp[1] - cube[1]) > 0.015
        if misplaced or tcp[2] > 0.04:
            if misplaced and tcp[0] > cube[0] - 0.045:
                behind[2] = ABOVE_Z
            return behind
        return np.array([goal[0] - 0.03, cube[1], PUSH_Z])

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Damped least squares on the TCP's position (to :meth:`target`) and orientation (held downward)."""
        q = obs[:9].astype(np.float64)
        move = self.target(obs) - obs[TCP]
        norm = np.linalg.norm(move)
        if norm > STEP_M:
            move *= STEP_M / norm
        p0, r0 = self._pose(q)
        jac = np.zeros((6, ARM_JOINTS))
        for j in range(ARM_JOINTS):
            dq = np.zeros_like(q)
            dq[j] = 1e-4
            p, r = self._pose(q + dq)
            jac[:3, j] = (p - p0) / 1e-4
            jac[3:, j] = _rotvec(r @ r0.T) / 1e-4
        err = np.concatenate([move, 0.3 * _rotvec(self.down @ r0.T)])
        dq = jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), err)
        return np.concatenate([np.clip(dq / JOINT_DELTA, -1.0, 1.0), [-1.0]]).astype(np.float32)


def collect(episodes: int, seed: int, noise: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The expert's (observation, clean action) pairs over ``episodes`` episodes, and its success_once rate."""
    env = one_env(TASK)
    expert = Expert(env)
    rng = np.random.default_rng(seed)
    observations, actions, successes = [], [], []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            done, once = False, False
            while not done:
                action = expert.act(obs)
                observations.append(obs)
                actions.append(action)
                noisy = np.clip(action + noise * rng.standard_normal(action.shape), -1.0, 1.0)
                noisy[-1] = -1.0
                obs, _, terminated, truncated, info = env.step(noisy.astype(np.float32))
                once |= bool(info["success"])
                done = bool(terminated or truncated)
            successes.append(once)
    finally:
        env.close()
    return np.stack(observations), np.stack(actions), float(np.mean(successes))


def main() -> None:
    """Collect, clone, checkpoint; prints the expert's rate and each checkpoint's path."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/maniskill_pushcube_bc", help="the run directory")
    parser.add_argument("--episodes", type=int, default=100, help="expert episodes of 50 steps")
    parser.add_argument("--noise", type=float, default=0.3, help="std of the noise on the executed actions")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=20, help="epochs between checkpoints")
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--seed", type=int, default=10_000, help="the expert's episodes use seed .. seed+episodes-1")
    args = parser.parse_args()

    start = time.time()
    obs, act, rate = collect(args.episodes, args.seed, args.noise)
    print(f"expert: {len(obs)} steps, success_once {rate:.2f} (noisy actions), {time.time() - start:.0f} s")

    torch.manual_seed(0)
    probe = make_env(ENV_ID, num_envs=1, obs_norm=False, seed=0)
    policy = mlp_policy(probe, hidden=args.hidden)
    probe.close()
    net = policy.module
    optim = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = torch.as_tensor(obs), torch.as_tensor(act)
    os.makedirs(args.out, exist_ok=True)
    steps = 0
    for epoch in range(1, args.epochs + 1):
        for idx in torch.randperm(len(x)).split(256):
            loss = torch.nn.functional.mse_loss(net(x[idx]), y[idx])
            optim.zero_grad()
            loss.backward()
            optim.step()
            steps += 1
        if epoch % args.save_every == 0 or epoch == args.epochs:
            path = save_checkpoint(os.path.join(args.out, f"step_{steps:09d}.pt"), policy, steps, env=ENV_ID)
            print(f"epoch {epoch}: loss {loss.item():.4f} -> {path}")
    open(os.path.join(args.out, "DONE"), "w").close()
    print(f"done in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
