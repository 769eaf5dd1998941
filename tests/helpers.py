"""Factories shared by the tests; module-level so worker processes can import them."""

from __future__ import annotations

import os
from pathlib import Path

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


# -- what an episode's last step says (terminated/truncated, info keys, "log" entries) --
class InfoProbe(Transform):
    """Adds per-step keys computed from the simulator's state, as a task would.

    ``success`` ([*B, 1] bool) = ``observation[..., index] > 0``; under "log" (one
    float per sub-env, shape [*B], as Isaac Lab's ``extras["log"]``):
    ``Metrics/success_rate`` = ``observation[..., index]`` at done steps with an
    even step count and NaN at every other step (the env did not report), and
    ``Episode_Reward/length`` = the step count at done steps, NaN elsewhere.
    """

    def __init__(self, index: int = 1, log: bool = True):
        super().__init__()
        self.index = index
        self.log = log

    def _values(self, td, done):
        obs = td.get("observation")[..., self.index]
        td.set("success", (obs > 0).unsqueeze(-1))
        if self.log:
            steps = td.get("step_count").squeeze(-1)
            nan = torch.full_like(obs, float("nan"))
            reported = done & (steps % 2 == 0)
            td.set(("log", "Metrics/success_rate"), torch.where(reported, obs, nan))
            td.set(("log", "Episode_Reward/length"), torch.where(done, steps.to(obs.dtype), nan))
        return td

    def _step(self, tensordict, next_tensordict):
        return self._values(next_tensordict, next_tensordict.get("done").squeeze(-1))

    def _reset(self, tensordict, tensordict_reset):
        done = torch.zeros(tensordict_reset.batch_size, dtype=torch.bool, device=tensordict_reset.device)
        return self._values(tensordict_reset, done)

    def transform_observation_spec(self, observation_spec):
        from torchrl.data import Categorical

        shape, device = observation_spec.shape, observation_spec.device
        observation_spec["success"] = Categorical(2, shape=(*shape, 1), dtype=torch.bool, device=device)
        if self.log:
            observation_spec["log"] = Composite(
                {
                    "Metrics/success_rate": Unbounded(shape=shape, device=device),
                    "Episode_Reward/length": Unbounded(shape=shape, device=device),
                },
                shape=shape,
                device=device,
            )
        return observation_spec


def probed_env(name: str = "HalfCheetah-v5", num_envs: int = 3, index: int = 1, log: bool = True, **kwargs):
    """``make_env(name)`` with an :class:`InfoProbe` on top (no VecNorm: the probe reads raw observations)."""
    from simeval.envs import make_env

    env = make_env(name, num_envs=num_envs, obs_norm=False, **kwargs)
    env.append_transform(InfoProbe(index, log))
    return env


def episode_ends(td) -> dict:
    """metrics_fn: what the kept episodes' last steps say, read from their padded trajectories.

    Independent of the evaluator's own reading (torchrl's split_trajectories and
    the ("collector", "mask") padding, not the collector batches): ``check_*``
    are the fractions and means the evaluator should report.
    """
    import numpy as np

    last = td.get(("collector", "mask")).sum(-1) - 1
    rows = torch.arange(td.shape[0])

    def at_end(key):
        value = td.get(key, None)
        return None if value is None else value.reshape(*td.shape, -1)[rows, last, 0].double().numpy()

    out = {}
    term, trunc = at_end(("next", "terminated")), at_end(("next", "truncated"))
    out["check_terminated"] = float(term.mean())
    out["check_truncated"] = float(((trunc > 0) & ~(term > 0)).mean())
    out["check_length"] = float(at_end(("next", "step_count")).mean())
    for name, key in (
        ("check_success", ("next", "success")),
        ("check_log_success", ("next", "log", "Metrics/success_rate")),
        ("check_log_length", ("next", "log", "Episode_Reward/length")),
    ):
        values = at_end(key)
        if values is not None:
            values = values[~np.isnan(values)]
            out[name] = float(values.mean()) if values.size else float("nan")
            out[name + "_count"] = float(values.size)
    return out


class StepDelay(Transform):
    """Sleeps ``seconds`` in every step: a round long enough to kill a worker in the middle of it."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def _step(self, tensordict, next_tensordict):
        import time

        time.sleep(self.seconds)
        return next_tensordict


def slow_cheetah(num_envs: int = 4, delay: float = 0.01, max_steps: int = 100, obs_norm: bool = True):
    """HalfCheetah whose steps take at least ``delay`` seconds each."""
    env = cheetah(num_envs=num_envs, obs_norm=obs_norm, max_steps=max_steps)
    env.append_transform(StepDelay(delay))
    return env


def count_envs(num_envs: int = 4, length: int = 3):
    """``num_envs`` CountEnv sub-envs whose episodes all last ``length`` steps (a factory taking num_envs)."""
    return count_env(lengths=[length] * num_envs)


def write_dist_info(site: Path, module: str, group: str, entries: str) -> None:
    """An installed distribution's metadata in ``site`` (a folder on sys.path): ``module``'s dist-info with
    ``entries`` (``name = module:attr`` lines) in the entry-point group ``group``; nothing is installed into a venv."""
    dist = Path(site) / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{entries}\n")
