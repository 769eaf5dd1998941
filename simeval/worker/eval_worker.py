"""EvalWorker: owns one eval env and policy, runs rounds, returns plain numbers.

Every backend runs this same class (in a thread, a child process or a Ray
actor), so the same weights and seed give the same numbers everywhere. Its
results are plain Python (and NumPy for frames) so they cross process
boundaries without torch's shared-memory pickling.

A caller's env is left as it was found: what the rollout needs on top of it
(a step counter, a frame recorder) lives on a wrapper of the worker's own,
and the flags a round changes (VecNorm frozen, StepCounter caps, the
policy's train mode) are restored afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase
from torch import nn

from simeval import metrics
from simeval.conditions import episode_seed, round_seed
from simeval.envs.layout import resets_itself
from simeval.envs.perturb import chunk_tail_delays, unread_variants
from simeval.envs.simulators import Simulator, simulator_of
from simeval.policy_kinds import acting_of
from simeval.policy_kinds.acting import INIT_KEY, ActingPolicy
from simeval.records import append_record, make_record
from simeval.settings import EvalSettings, RoundOverrides, as_info_keys
from simeval.shards import Shard, sub_env_seed
from simeval.weights import load_weights, resolve_model
from simeval.worker import engines, vecnorm
from simeval.worker.frames import FrameBuffer, can_render
from simeval.worker.rollout import Episodes, RoundCounter, StoppablePolicy, run_round
from simeval.worker.round_scope import eval_mode, exploration, exploration_for_round, max_steps_for_round, step_counters

if TYPE_CHECKING:
    from torchrl.collectors import BaseCollector
    from torchrl.envs import EnvBase


def _collector_cls(cls_or_name: type | str | None) -> type:
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


def _episode_return_key(env: EnvBase, reward_key: tuple) -> tuple | None:
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


def _move_policy(policy: nn.Module, device: torch.device) -> None:
    """Move a policy to ``device``, with the tensors in its distributions' keyword arguments.

    ``.to()`` moves parameters and buffers only: a ProbabilisticActor built from
    a CPU env's action spec keeps its TanhNormal ``low``/``high`` on the CPU,
    which fails as soon as the policy runs on a GPU.
    """
    policy.to(device)
    for module in policy.modules():
        kwargs = getattr(module, "distribution_kwargs", None)
        if isinstance(kwargs, dict):
            for key, value in kwargs.items():
                if isinstance(value, torch.Tensor):
                    kwargs[key] = value.to(device)


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
    # Set by the thread backend: rounds run on a thread of the worker's own. torch's intra-op
    # thread count is per thread (OpenMP), so the worker can choose it without touching the caller's.
    owns_thread = False

    def __init__(
        self,
        settings: EvalSettings,
        *,
        env: EnvBase | None = None,
        policy: Any = None,
        env_factory: Callable | None = None,
        policy_factory: Callable | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.env = env  # what model ids ("env.transform[2]") and VecNorm checks refer to
        self.policy = policy
        self._env_factory = env_factory
        self._policy_factory = policy_factory
        self._owns_env = env is None
        self.stop = stop or threading.Event()
        self._collector = None
        # rounds without the Collector, where the simulator's engine reproduces it (simeval.worker.engines)
        self._direct: engines.RoundEngine | None = None
        self._rollout_env = None  # self.env, or a wrapper of this worker's own around it
        self._acting: ActingPolicy | None = None  # self.policy run with its history and chunks, where it has them
        self._simulator: Simulator | None = None  # the one that built self.env (None: an env of other making)
        self._round_seed = 0  # the base of the current round's episode seeds (simeval.conditions.round_seed)
        self._frames: FrameBuffer | None = None
        self._device: torch.device | None = None
        self.counter = RoundCounter()  # how far the running round is, for a backend's progress channel

    # -- building -------------------------------------------------------
    def build(self) -> None:
        """Build the env and policy (from the factories when not given) and the collector; once."""
        if self._collector is not None:
            return
        if self.env is None:
            self.env = vecnorm.freeze_owned(self._env_factory())
        owns_policy = self.policy is None
        if owns_policy:
            self.policy = self._policy_factory(self.env)
        problem = unread_variants(self.env, self.policy)
        if problem is not None:
            raise ValueError(problem)
        self._device = self._policy_device(owns_policy)
        acting = acting_of(self.policy)
        # inference_delay's chunk-tail mode is played by the chunk player (the env holds for a plain policy)
        self._acting = None if acting.plain else ActingPolicy(self.policy, acting, chunk_tail_delays(self.env))
        self._simulator = simulator_of(self.env)
        declared = () if self.settings.info_keys or self._simulator is None else self._simulator.info_keys(self.env)
        if declared:  # the simulator's per-step keys (e.g. a success flag), where the caller named none
            self.settings = dataclasses.replace(self.settings, info_keys=as_info_keys(declared))
        if (self.owns_process or self.owns_thread) and self._device.type == "cpu":
            # One intra-op thread: small CPU policies run faster, a second one fights the
            # simulator's threads for the cores, and an eval worker beside training should
            # not take every core from it.
            torch.set_num_threads(1)
        # An env that resets itself inside step has no "next" RewardSum/StepCounter values at an
        # episode's last step: the tally sums rewards and counts steps.
        self._native_autoreset = resets_itself(self.env)
        self._episode_return_key = (
            None if self._native_autoreset else _episode_return_key(self.env, self.settings.reward_key)
        )
        self._num_envs = max(1, int(torch.Size(self.env.batch_size).numel()))
        rollout_env = self._wrap(self.env)
        # The collector resets the env and probes the policy once: no statistics
        # update and no train-mode call may happen there either.
        with vecnorm.frozen_for_round(self.env), eval_mode(self.policy), torch.no_grad():
            self._collector = self._make_collector(rollout_env)
        self._rollout_env = self._collector.env
        recording = self._frames is not None
        horizon = self._collector.requested_frames_per_batch // self._num_envs
        self._direct = engines.choose(
            self._simulator, self._rollout_env, self._acting_policy, self.settings, recording, horizon
        )
        if self._direct is not None:
            self._direct.counter = self.counter

    @property
    def _acting_policy(self) -> Any:
        """What rounds call: the policy, or the policy under its observation history and action chunks."""
        return self.policy if self._acting is None else self._acting

    def _policy_device(self, owns_policy: bool) -> torch.device:
        """Where the policy runs: ``settings.device`` (a policy this worker built is moved there), else its own."""
        try:
            current = next(self.policy.parameters()).device
        except (AttributeError, StopIteration):
            current = None
        if self.settings.device is None:
            device = current or torch.device("cpu")
        else:
            device = torch.device(self.settings.device)
            if current is not None and current != device and not owns_policy:
                raise ValueError(
                    f"device={self.settings.device} but the given policy lives on {current}: pass policy_factory "
                    "(the evaluator then builds its own policy on that device) or move the policy there."
                )
        if owns_policy and isinstance(self.policy, nn.Module):
            _move_policy(self.policy, device)
        return device

    def _wrap(self, env: EnvBase) -> EnvBase:
        """The env the rollout steps: ``env`` itself, or a wrapper of this worker's own around it.

        A step counter (episode lengths, ``max_steps``) is added when the env has
        none, a frame recorder when frames are asked for and the env renders, and
        torchrl's InitTracker where the policy keeps a history or chunks per sub-env.
        ``auto_unwrap=False`` keeps torchrl from merging the wrapper into ``env``'s
        own transforms, which would clone them (and their VecNorm statistics).
        """
        from torchrl.envs import Compose, InitTracker, StepCounter, TransformedEnv

        extra = []
        if self._acting is not None and INIT_KEY not in env.observation_spec.keys():
            extra.append(InitTracker(init_key=INIT_KEY))  # where each sub-env's episode restarts
        if not step_counters(env):
            extra.append(StepCounter(self.settings.max_steps))
        self._frames = None
        if self.settings.record_frames and can_render(env):
            self._frames = FrameBuffer()
            extra.append(self._frames)
        if not extra:
            return env
        return TransformedEnv(env, Compose(*extra), auto_unwrap=False)

    def _make_collector(self, env: EnvBase) -> BaseCollector:
        settings = self.settings
        max_steps = settings.max_steps
        if max_steps is None and self._simulator is not None:  # an env that ends episodes itself: batches divide it
            max_steps = self._simulator.episode_length(env)
        fpb = settings.frames_per_batch or self._num_envs * batch_steps(max_steps, self._num_envs)
        fpb = -(-fpb // self._num_envs) * self._num_envs  # a whole number of steps per sub-env
        kwargs = dict(settings.collector_kwargs or {})
        cls = _collector_cls(settings.collector_cls)
        from torchrl.collectors import Collector

        if cls is Collector:  # torchrl's own, by default or by name: these settings suit it
            # The eval env is complete as given: do not let the collector add transforms.
            kwargs.setdefault("auto_register_policy_transforms", False)
            # A CPU simulator with a GPU policy (or the reverse): the collector moves the data
            # between them. The policy already lives on its device, so the collector uses it as is.
            kwargs.setdefault("policy_device", self._device)
            kwargs.setdefault("env_device", env.device)
            kwargs.setdefault("trust_policy", True)
        return cls(
            create_env_fn=env,
            policy=StoppablePolicy(self._acting_policy, self.stop),
            frames_per_batch=fpb,
            total_frames=-1,
            max_frames_per_traj=None,
            exploration_type=exploration(settings.exploration_type),
            **kwargs,
        )

    # -- weights --------------------------------------------------------
    def load(self, weights: Mapping[str, TensorDictBase] | None) -> None:
        """Load each model id's weights into the policy or env module it names."""
        if not weights:
            return
        self.build()
        roots = {"policy": self.policy, "env": self.env}
        env_device = self.env.device or torch.device("cpu")
        for model_id, td in weights.items():
            target = resolve_model(roots, model_id)
            # Training's tensors may live elsewhere (a GPU trainer, a CPU eval env): each goes
            # where the module it is loaded into lives.
            td = td.to(env_device if model_id.startswith("env") else self._device)
            load_weights(target, td, model_id)

    # -- one round ------------------------------------------------------
    def run(
        self,
        weights: Mapping[str, TensorDictBase] | None,
        step: int,
        overrides: RoundOverrides | None = None,
        shard: Shard | None = None,
    ) -> dict[str, Any]:
        """Load weights, evaluate the round's episodes (or ``shard``'s part of them), return raw metrics.

        After a failure the collector (and an env this worker built) is thrown
        away and rebuilt by the next round: a half-finished rollout leaves both
        in an unknown state.
        """
        try:
            return self._run(weights, step, overrides or RoundOverrides(), shard)
        except BaseException:
            self._discard()
            raise
        finally:
            self.counter.active = False

    def _discard(self) -> None:
        self._close_direct()
        collector, self._collector = self._collector, None
        if collector is not None:
            with contextlib.suppress(Exception):
                collector.shutdown(close_env=self._owns_env, raise_on_error=False)
        self._rollout_env = None
        if self._owns_env:
            self.env = None

    def _run(
        self, weights: Mapping[str, TensorDictBase] | None, step: int, overrides: RoundOverrides, shard: Shard | None
    ) -> dict:
        """Build, load ``weights``, roll out the round's episodes, then their metrics, frames and results record."""
        self.build()
        self.load(weights)
        max_steps = overrides.max_steps if overrides.max_steps is not None else self.settings.max_steps
        seed = overrides.seed if overrides.seed is not None else self.settings.seed  # this round's, or the settings'
        quotas, env_seed = self._quotas_and_seed(shard, overrides.num_trajectories, seed)
        first = shard.first if shard is not None else 0
        self.counter.begin(sum(quotas))
        perturbs = self._start_conditions(first, seed)
        episodes = self._roll_out(quotas, env_seed, max_steps, overrides.exploration_type)
        raw = self._raw_metrics(episodes, step)
        raw.update(self._episode_identities(episodes, first, perturbs, seeded=seed is not None))
        raw["round"] = self._round_shape(quotas, first, seed)
        self._add_frames(raw, step, leader=shard is None or shard.first == 0)
        self._append_record(raw)
        return raw

    def _start_conditions(self, first: int, seed: int | None) -> list:
        """Start the round on each condition layer (``Perturb``) of the env: episode seeds from the round's ``seed``."""
        perturbs = [t for t in vecnorm.iter_transforms(self._rollout_env) if hasattr(t, "start_round")]
        self._round_seed = round_seed(seed)
        for p in perturbs:
            p.start_round(self._round_seed, first)
        return perturbs

    def _episode_identities(self, episodes: Episodes, first: int, perturbs: list, seeded: bool) -> dict[str, Any]:
        """Where each episode ran, ``episode_seeds``, ``episode_env_seeds`` (``seeded`` rounds) and
        ``episode_conditions``, in episode order.

        ``episode_sub_envs`` / ``episode_ordinals``: episode ``k`` of global sub-env ``i`` (``first`` + its
        local index) is ``(i, k)``. It has :func:`simeval.conditions.episode_seed` ``(seed, i, k)`` (its
        conditions are drawn from it); ``episode_env_seeds`` is the seed the env's reset started it
        from, where the simulator names it (:meth:`~simeval.envs.simulators.Simulator.episode_env_seeds`:
        LeRobot's, to pair with lerobot-eval's).
        """
        positions = [(first + i, k) for i, k in zip(episodes.sub_envs, episodes.ordinals, strict=True)]
        out: dict[str, Any] = {
            "episode_sub_envs": [i for i, _ in positions],
            "episode_ordinals": [k for _, k in positions],
        }
        if seeded:
            out["episode_seeds"] = [episode_seed(self._round_seed, i, k) for i, k in positions]
            env_seeds = self._env_seeds(episodes)
            if env_seeds is not None:
                out["episode_env_seeds"] = env_seeds
        drawn: dict[str, list[float]] = {}
        for p in perturbs:
            for name in p.condition.ranged:
                drawn[name] = [p.draws[pos][name] for pos in positions]
        if drawn:
            out["episode_conditions"] = drawn
        return out

    def _round_shape(self, quotas: list[int], first: int, seed: int | None) -> dict[str, Any]:
        """The round as a replay re-runs it: its sub-envs and their quotas, its seed, its worker's range, its devices.

        ``seed`` is the round's own (a shard's sub-envs are seeded from it as its global ones), None for an
        unseeded round; ``shards`` holds this worker's ``[first, size]`` (``shards.merge`` lists every worker's);
        ``device`` is the settings' (None: the policy's own), ``policy_device`` and ``env_device`` where they ran.
        """
        env_device = getattr(self.env, "device", None)
        return {
            "num_envs": len(quotas),
            "quotas": [int(q) for q in quotas],
            "seed": None if seed is None else int(seed),
            "shards": [[int(first), len(quotas)]],
            "device": self.settings.device,
            "policy_device": str(self._device),
            "env_device": None if env_device is None else str(env_device),
        }

    def _env_seeds(self, episodes: Episodes) -> list[int] | None:
        """The env's own seed of each episode, where its simulator has one (else None)."""
        if self._simulator is None:
            return None
        return self._simulator.episode_env_seeds(self._rollout_env, episodes.sub_envs, episodes.ordinals)

    def _roll_out(
        self, quotas: list[int], seed: int | None, max_steps: int | None, exploration_type: str | None
    ) -> Episodes:
        """The round's episodes, with VecNorm frozen, the policy in eval mode and the round's caps and exploration."""
        with (
            vecnorm.frozen_for_round(self.env),
            eval_mode(self.policy),
            max_steps_for_round(self._rollout_env, max_steps),
            exploration_for_round(self._collector, exploration_type),
            torch.inference_mode(),
        ):
            vecnorm.check_stats(self.env)
            if seed is not None and self.owns_process:
                torch.manual_seed(seed)
            if self._direct is not None:
                return self._direct.run(quotas, seed, self.stop, self._collector.exploration_type)
            return self._collector_round(quotas, seed)

    def _collector_round(self, quotas: list[int], seed: int | None) -> Episodes:
        """The round stepped by the torchrl Collector (:func:`simeval.worker.rollout.run_round`)."""
        settings = self.settings
        return run_round(
            self._collector,
            self._rollout_env,
            quotas,
            reward_key=settings.reward_key,
            done_key=settings.done_key,
            episode_return_key=self._episode_return_key,
            use_step_count=not self._native_autoreset,
            seed=seed,
            keep_trajectories=settings.metrics_fn is not None,
            stop=self.stop,
            info_keys=settings.info_keys,
            counter=self.counter,
        )

    def _raw_metrics(self, episodes: Episodes, step: int) -> dict[str, Any]:
        """The round's raw metrics: summary, per-episode values, end metrics and ``metrics_fn``'s (as ``custom``)."""
        settings = self.settings
        raw = metrics.summarize(episodes.returns, episodes.lengths, episodes.env_steps, episodes.seconds)
        raw["episode_returns"] = episodes.returns
        raw["episode_lengths"] = episodes.lengths
        raw["step_reward_to_first_done"] = episodes.step_reward_to_first_done
        raw["episode_terminated"] = episodes.terminated
        raw["episode_truncated"] = episodes.truncated
        raw["episode_success_at_end"] = episodes.success_at_end  # None: no per-step success key
        raw["episode_success_once"] = episodes.success_once
        raw["episode_info"] = episodes.info
        raw["end_metrics"] = metrics.end_metrics(
            episodes.terminated, episodes.truncated, episodes.info, settings.info_keys
        )
        raw["step"] = step
        raw["seconds"] = episodes.seconds
        raw["started_at"] = episodes.started_at
        raw["num_envs"] = self._num_envs  # a round's time budget is planned in waves of num_envs episodes
        if settings.metrics_fn is not None:
            raw["custom"] = {k: _plain(v) for k, v in settings.metrics_fn(episodes.trajectories).items()}
        return raw

    def _add_frames(self, raw: dict[str, Any], step: int, leader: bool) -> None:
        """Take the recorded frames (and dump the videos): into ``raw`` on the ``leader``, global sub-env 0's worker."""
        if self._frames is not None:
            frames = self._frames.take()
            if leader:
                raw["frames"] = frames
        if self.settings.dump_video and leader:
            raw["video"] = self._dump_video(step)

    def _append_record(self, raw: dict[str, Any]) -> None:
        """Append the round's record to ``settings.results_path``, when there is one."""
        settings = self.settings
        if settings.results_path:
            result = metrics.prefixed(raw, settings.log_prefix, keep_episodes=True)
            append_record(settings.results_path, make_record(result, settings.log_prefix, **settings.results_context))

    def _quotas_and_seed(
        self, shard: Shard | None, num_trajectories: int | None, seed: int | None
    ) -> tuple[list[int], int | None]:
        """Each sub-env's episode quota and the seed of sub-env 0: the whole round's, or ``shard``'s.

        A whole round's quotas are laid out as the env's simulator declares
        (:attr:`~simeval.envs.simulators.Simulator.episodes_in_batch_order`).
        ``num_trajectories`` (the round's override) replaces the settings' count; a shard's quotas
        were planned by the caller with it already. ``seed`` is the round's (its override, else the
        settings'); a shard's sub-env 0 is seeded as global sub-env ``shard.first`` of it.
        """
        if shard is None:
            # None: one episode per sub-env
            quota = num_trajectories or self.settings.num_trajectories or self._num_envs
            in_batches = self._simulator is not None and self._simulator.episodes_in_batch_order
            return metrics.episode_quotas(quota, self._num_envs, batch_order=in_batches), seed
        if shard.size != self._num_envs:
            raise ValueError(
                f"shard {shard.index} covers {shard.size} sub-envs but this worker's env has {self._num_envs}: "
                "the env factory must build num_envs sub-envs when called with num_envs=."
            )
        return list(shard.quotas), None if seed is None else sub_env_seed(self._rollout_env, seed, shard.first)

    def _dump_video(self, step: int):
        """Collect recorded frames, then ``dump(step=...)`` every VideoRecorder."""
        frames = None
        for t in vecnorm.iter_transforms(self._rollout_env):
            if not hasattr(t, "dump"):
                continue
            recorded = getattr(t, "obs", None)
            if frames is None and recorded:
                frames = torch.stack([f.detach().cpu() for f in recorded]).numpy()
            t.dump(step=step)
        return frames

    def _close_direct(self) -> None:
        pipe, self._direct = self._direct, None
        if pipe is not None:
            pipe.close()

    def close(self) -> None:
        """Shut the collector down and close the env if this worker built it."""
        self._close_direct()
        if self._collector is not None:
            with contextlib.suppress(Exception):
                self._collector.shutdown(close_env=self._owns_env)
        if self._owns_env and self.env is not None and not self.env.is_closed:
            with contextlib.suppress(Exception):
                self.env.close()
