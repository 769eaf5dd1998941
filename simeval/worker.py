"""EvalWorker: owns one eval env and policy, runs rounds, returns plain numbers.

Every backend runs this same class (in a thread, a child process or a Ray
actor), so the same weights and seed give the same numbers everywhere. Its
results are plain Python (and NumPy for video) so they cross process
boundaries without torch's shared-memory pickling.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from simeval import metrics, vecnorm
from simeval.rollout import StoppablePolicy, run_round
from simeval.spec import EvalSpec
from simeval.weights import load_weights, resolve_model


def _exploration(name: str):
    from torchrl.envs.utils import ExplorationType

    return ExplorationType[name] if isinstance(name, str) else name


def _collector_cls(cls_or_name):
    if cls_or_name is None:
        from torchrl.collectors import Collector

        return Collector
    if isinstance(cls_or_name, str):
        import torchrl.collectors as mod

        try:
            return getattr(mod, cls_or_name)
        except AttributeError:
            raise ValueError(f"unknown collector_cls {cls_or_name!r} in torchrl.collectors.") from None
    return cls_or_name


def _step_counters(env):
    from torchrl.envs.transforms import StepCounter

    return [t for t in vecnorm.iter_transforms(env) if isinstance(t, StepCounter)]


def _episode_return_key(env, reward_key: tuple) -> tuple | None:
    """The RewardSum output that accumulates ``reward_key``, if the env has one."""
    from torchrl.envs.transforms import RewardSum

    for t in vecnorm.iter_transforms(env):
        if not isinstance(t, RewardSum):
            continue
        for in_key, out_key in zip(t.in_keys, t.out_keys, strict=False):
            in_key = (in_key,) if isinstance(in_key, str) else tuple(in_key)
            out_key = (out_key,) if isinstance(out_key, str) else tuple(out_key)
            if ("next", *in_key) == tuple(reward_key):
                return ("next", *out_key)
    return None


def _plain(value: Any) -> Any:
    """metrics_fn output as plain Python / NumPy (safe to send between processes)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.numel() == 1 else value.numpy()
    return value


@contextlib.contextmanager
def _eval_mode(policy) -> Any:
    was_training = policy.training if isinstance(policy, nn.Module) else None
    if was_training:
        policy.eval()
    try:
        yield
    finally:
        if was_training:
            policy.train()


@contextlib.contextmanager
def _max_steps_for_round(env, max_steps: int | None):
    """Honour ``max_steps`` when the env already counts steps (restored afterwards)."""
    counters = _step_counters(env) if max_steps is not None else []
    before = [c.max_steps for c in counters]
    for c in counters:
        c.max_steps = max_steps if c.max_steps is None else min(c.max_steps, max_steps)
    try:
        yield
    finally:
        for c, b in zip(counters, before, strict=True):
            c.max_steps = b


def batch_steps(max_steps: int | None, num_envs: int, max_frames: int = 1 << 18) -> int:
    """Steps per sub-env in one collector batch.

    Small enough that a batch of thousands of GPU envs stays a few hundred MB,
    and a divisor of ``max_steps`` where one exists, so rounds whose episodes
    all run to the cap end exactly on a batch boundary (no wasted steps).
    """
    cap = max(1, min(128, max_frames // max(1, num_envs)))
    if max_steps is None:
        return cap
    if max_steps <= cap:
        return max_steps
    divisors = [d for d in range(cap, max(1, cap // 2) - 1, -1) if max_steps % d == 0]
    return divisors[0] if divisors else cap


class EvalWorker:
    """Builds env and policy (lazily, where it runs), loads weights, runs rounds."""

    # Set by the process and Ray backends: this worker is alone in its process, so
    # seeding torch's global RNG and choosing torch's thread count are its to do.
    owns_process = False

    def __init__(
        self,
        spec: EvalSpec,
        *,
        env=None,
        policy=None,
        env_factory: Callable | None = None,
        policy_factory: Callable | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.spec = spec
        self.env = env
        self.policy = policy
        self._env_factory = env_factory
        self._policy_factory = policy_factory
        self._owns_env = env is None
        self.stop = stop or threading.Event()
        self._collector = None
        self._device: torch.device | None = None

    # -- building -------------------------------------------------------
    def build(self) -> None:
        if self._collector is not None:
            return
        if self.env is None:
            self.env = vecnorm.freeze_owned(self._env_factory())
        if self.policy is None:
            self.policy = self._policy_factory(self.env)
        if self.spec.device is not None:
            self._device = torch.device(self.spec.device)
        else:
            try:
                self._device = next(self.policy.parameters()).device
            except (AttributeError, StopIteration):
                self._device = torch.device("cpu")
        if self.owns_process and self._device.type == "cpu":
            # One intra-op thread: small CPU policies run faster, and an eval worker
            # beside training should not take every core from it.
            torch.set_num_threads(1)
        if not _step_counters(self.env):
            # Count steps ourselves rather than letting the collector wrap the env: its
            # wrapper would clone the transforms, and freezing or loading VecNorm
            # statistics would then miss the copies the rollout really uses.
            from torchrl.envs import StepCounter, TransformedEnv

            counter = StepCounter(self.spec.max_steps)
            if isinstance(self.env, TransformedEnv):
                self.env.append_transform(counter)
            else:
                self.env = TransformedEnv(self.env, counter)
        self._episode_return_key = _episode_return_key(self.env, self.spec.reward_key)
        self._num_envs = max(1, int(torch.Size(self.env.batch_size).numel()))
        # The collector resets the env and probes the policy once: no statistics
        # update and no train-mode call may happen there either.
        with vecnorm.frozen_for_round(self.env), _eval_mode(self.policy), torch.no_grad():
            self._collector = self._make_collector()
        self.env = self._collector.env

    def _make_collector(self):
        spec = self.spec
        fpb = spec.frames_per_batch or self._num_envs * batch_steps(spec.max_steps, self._num_envs)
        fpb = -(-fpb // self._num_envs) * self._num_envs  # a whole number of steps per sub-env
        kwargs = dict(spec.collector_kwargs or {})
        if spec.collector_cls is None:
            # The eval env is complete as given: do not let the collector add transforms.
            kwargs.setdefault("auto_register_policy_transforms", False)
        return _collector_cls(spec.collector_cls)(
            create_env_fn=self.env,
            policy=StoppablePolicy(self.policy, self.stop),
            frames_per_batch=fpb,
            total_frames=-1,
            max_frames_per_traj=None,
            exploration_type=_exploration(spec.exploration_type),
            **kwargs,
        )

    # -- weights --------------------------------------------------------
    def load(self, weights: Mapping[str, TensorDictBase] | None) -> None:
        """Load each model id's weights into the policy or env module it names."""
        if not weights:
            return
        self.build()
        roots = {"policy": self.policy, "env": self.env}
        for model_id, td in weights.items():
            target = resolve_model(roots, model_id)
            if model_id == "policy" and self._device is not None:
                td = td.to(self._device)
            load_weights(target, td, model_id)

    # -- one round ------------------------------------------------------
    def run(self, weights: Mapping[str, TensorDictBase] | None, step: int) -> dict[str, Any]:
        """Load weights, evaluate ``num_trajectories`` episodes, return raw metrics.

        After a failure the collector (and an env this worker built) is thrown
        away and rebuilt by the next round: a half-finished rollout leaves both
        in an unknown state.
        """
        try:
            return self._run(weights, step)
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        collector, self._collector = self._collector, None
        if collector is not None:
            with contextlib.suppress(Exception):
                collector.shutdown(close_env=self._owns_env, raise_on_error=False)
        if self._owns_env:
            self.env = None

    def _run(self, weights: Mapping[str, TensorDictBase] | None, step: int) -> dict[str, Any]:
        self.build()
        self.load(weights)
        spec = self.spec
        with (
            vecnorm.frozen_for_round(self.env),
            _eval_mode(self.policy),
            _max_steps_for_round(self.env, spec.max_steps),
            torch.inference_mode(),
        ):
            vecnorm.check_stats(self.env)
            if spec.seed is not None and self.owns_process:
                torch.manual_seed(spec.seed)
            episodes = run_round(
                self._collector,
                self.env,
                metrics.episode_quotas(spec.num_trajectories, self._num_envs),
                reward_key=spec.reward_key,
                done_key=spec.done_key,
                episode_return_key=self._episode_return_key,
                seed=spec.seed,
                keep_trajectories=spec.metrics_fn is not None,
                stop=self.stop,
            )
        raw = metrics.summarize(episodes.returns, episodes.lengths, episodes.env_steps, episodes.seconds)
        raw["episode_returns"] = episodes.returns
        raw["episode_lengths"] = episodes.lengths
        raw["step"] = step
        if spec.metrics_fn is not None:
            raw["custom"] = {k: _plain(v) for k, v in spec.metrics_fn(episodes.trajectories).items()}
        if spec.dump_video:
            raw["video"] = self._dump_video(step)
        if spec.results_path:
            from simeval.results import append_jsonl, record_from_raw

            append_jsonl(spec.results_path, record_from_raw(raw))
        return raw

    def _dump_video(self, step: int):
        """Collect recorded frames, then ``dump(step=...)`` every VideoRecorder."""
        frames = None
        for t in vecnorm.iter_transforms(self.env):
            if not hasattr(t, "dump"):
                continue
            recorded = getattr(t, "obs", None)
            if frames is None and recorded:
                frames = torch.stack([f.detach().cpu() for f in recorded]).numpy()
            t.dump(step=step)
        return frames

    def close(self) -> None:
        if self._collector is not None:
            with contextlib.suppress(Exception):
                self._collector.shutdown(close_env=self._owns_env)
        if self._owns_env and self.env is not None and not self.env.is_closed:
            with contextlib.suppress(Exception):
                self.env.close()
