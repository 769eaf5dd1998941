"""Factories shared by the tests; module-level so worker processes can import them."""

from __future__ import annotations

import os

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase, RewardSum, TransformedEnv
from torchrl.envs.transforms import Transform, VecNormV2

# What the last env factory built in this process: lets metrics_fn (which runs
# wherever the env lives) report on the env itself.
BUILT: dict = {}


class CountEnv(EnvBase):
    """Sub-env i ends every episode after ``lengths[i]`` steps; reward = action.

    With a constant policy of value w, every episode of sub-env i returns
    exactly ``w * lengths[i]``: any episode begun under other weights, or any
    bias towards short episodes, shows up as a wrong number.
    """

    def __init__(
        self,
        lengths,
        fail_at_step: int | None = None,
        exit_at_step: int | None = None,
        pixels: bool = False,
        step_sleep: float = 0.0,
    ):
        n = len(lengths)
        self.pixels = pixels
        super().__init__(batch_size=torch.Size([n]))
        self.lengths = torch.tensor(lengths, dtype=torch.long)
        self.t = torch.zeros(n, dtype=torch.long)
        self.fail_at_step = fail_at_step
        self.exit_at_step = exit_at_step
        self.step_sleep = step_sleep
        self.total_steps = 0
        self.observation_spec = Composite(observation=Unbounded(shape=(n, 1)), shape=(n,))
        if pixels:
            self.observation_spec["pixels"] = Bounded(0, 255, shape=(n, 3, 8, 8), dtype=torch.uint8)
        self.action_spec = Bounded(-100.0, 100.0, shape=(n, 1))
        self.reward_spec = Unbounded(shape=(n, 1))

    def _obs(self):
        return self.t.float().unsqueeze(-1)

    def _observations(self) -> dict:
        out = {"observation": self._obs()}
        if self.pixels:  # a frame whose brightness is the step count
            out["pixels"] = self.t.clamp(max=255).to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 3, 8, 8).clone()
        return out

    def _reset(self, tensordict=None, **kwargs):
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self.t.zero_()
        else:
            self.t[mask.view(-1)] = 0
        zeros = torch.zeros(self.batch_size + (1,), dtype=torch.bool)
        return TensorDict(**self._observations(), done=zeros, terminated=zeros.clone(), batch_size=self.batch_size)

    def _step(self, tensordict):
        if self.step_sleep:
            import time

            time.sleep(self.step_sleep)
        self.total_steps += 1
        if self.fail_at_step is not None and self.total_steps >= self.fail_at_step:
            raise ValueError("CountEnv exploded on purpose")
        if self.exit_at_step is not None and self.total_steps >= self.exit_at_step:
            os._exit(17)
        self.t += 1
        done = (self.t >= self.lengths).unsqueeze(-1)
        return TensorDict(
            **self._observations(),
            reward=tensordict.get("action").clone(),
            done=done,
            terminated=done.clone(),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        return seed


class ConstPolicy(nn.Module):
    """action = w, whatever the observation; records its train/eval mode when called."""

    def __init__(self, w: float = 1.0):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([float(w)]))
        self.modes_seen: set = set()

    def forward(self, observation):
        self.modes_seen.add(self.training)
        return self.w.expand(*observation.shape[:-1], 1).clone()


def const_policy(env=None, w: float = 1.0) -> TensorDictModule:
    return TensorDictModule(ConstPolicy(w), in_keys=["observation"], out_keys=["action"])


def count_env(lengths=(3,), reward_sum: bool = True, **kwargs) -> EnvBase:
    env = CountEnv(list(lengths), **kwargs)
    env = TransformedEnv(env, RewardSum()) if reward_sum else env
    BUILT["env"] = env
    return env


def mlp_policy(env=None, seed: int = 0, obs_dim: int = 17, act_dim: int = 6, hidden: int = 64) -> TensorDictModule:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, act_dim), nn.Tanh())
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


def cheetah(num_envs: int = 2, obs_norm: bool = False, max_steps: int | None = None):
    from simeval.envs import make_env

    env = make_env("HalfCheetah-v5", num_envs=num_envs, obs_norm=obs_norm, max_steps=max_steps)
    BUILT["env"] = env
    return env


def warmed_cheetah(num_envs: int = 2, steps: int = 30, seed: int = 7):
    """A HalfCheetah env whose VecNorm already has statistics (as a training env would)."""
    env = cheetah(num_envs=num_envs, obs_norm=True)
    env.set_seed(seed)
    torch.manual_seed(seed)
    env.rollout(steps, break_when_any_done=False)
    return env


def vecnorm_of(env) -> VecNormV2:
    return next(t for t in env.transform if isinstance(t, VecNormV2))


def built_vecnorm_stats(td) -> dict:
    """metrics_fn: report the eval env's VecNorm count and mean loc, where the env lives."""
    vn = vecnorm_of(BUILT["env"])
    return {
        "vecnorm_count": float(vn._count["observation"]),
        "vecnorm_loc_sum": float(vn._loc["observation"].sum()),
        "vecnorm_frozen": float(vn.frozen),
    }


def where_am_i(td) -> dict:
    """metrics_fn: the pid and visible GPUs of the process that runs the env."""
    return {"pid": float(os.getpid()), "cuda_visible": float(os.environ.get("CUDA_VISIBLE_DEVICES", "-1") or -1)}


def failing_metrics(td) -> dict:
    raise KeyError("metrics_fn could not find 'success'")


def env_factory_that_fails():
    raise RuntimeError("env factory refused to build")


class DumpProbe(Transform):
    """Stands in for VideoRecorder: appends 'pid step' to a file on every dump()."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def dump(self, step=None):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()} {step}\n")


def probe_env(path: str):
    env = TransformedEnv(CountEnv([2]), DumpProbe(path))
    env.append_transform(RewardSum())
    return env


def video_env(log_dir: str):
    """A one-sub-env CountEnv filmed by torchrl's real VideoRecorder (frames kept as .pt)."""
    from torchrl.record import VideoRecorder
    from torchrl.record.loggers.csv import CSVLogger

    logger = CSVLogger("video", log_dir=log_dir, video_format="pt")
    env = TransformedEnv(CountEnv([4], pixels=True), VideoRecorder(logger, tag="eval_video", in_keys=["pixels"]))
    env.append_transform(RewardSum())
    return env
