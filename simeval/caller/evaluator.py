"""``simeval.Evaluator``, a drop-in for ``torchrl.collectors.Evaluator``, and ``connect``.

The Evaluator checks its arguments, asks a backend (thread, process or Ray)
to build itself, and hands requests to a :class:`~simeval.caller.requests.RequestQueue`,
which applies the busy policy, runs one round at a time and delivers results
in order after ``on_result``. Results are the raw worker metrics under
``<log_prefix>/...`` keys.

This module imports no torch at import time, so a training script can import
simeval before its simulator's ``init_fn`` has run.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from simeval import backends, metrics
from simeval.backends.ray import NAMESPACE, RayBackend
from simeval.caller.requests import Request, RequestQueue, check_busy_policy
from simeval.caller.round_timeout import Deadline, RoundClock, check_round_timeout
from simeval.settings import EvalSettings, RoundOverrides, as_info_keys, as_key, exploration_name

if TYPE_CHECKING:
    from simeval.backends.base import Backend
    from simeval.caller.progress import Progress


class _DefaultCount(int):
    """torchrl's default ``num_trajectories`` (10), told apart from a 10 given explicitly (``is``)."""


_DEFAULT_TRAJECTORIES = _DefaultCount(10)


def _check_budget(time_budget_s: Any, num_trajectories: int) -> None:
    if time_budget_s is None:
        return
    if num_trajectories is not _DEFAULT_TRAJECTORIES:
        raise ValueError(
            "give num_trajectories or time_budget_s, not both: time_budget_s chooses each round's episode count."
        )
    ok = isinstance(time_budget_s, (int, float)) and not isinstance(time_budget_s, bool)
    if not ok or not (0 < time_budget_s < math.inf):
        raise ValueError(f"time_budget_s must be a number of seconds > 0, got {time_budget_s!r}.")


def episodes_for_budget(time_budget_s: float, round_seconds: float, num_episodes: int, num_envs: int) -> int:
    """The episode count of a round that fits in ``time_budget_s``, from an earlier round's measured time.

    Sub-env ``i`` of ``n`` runs ``(N + i) // n`` episodes side by side with the others, so a round
    takes about ``ceil(N / n)`` waves, each as long as one sub-env's episode; a partial wave costs
    as much as a full one. The earlier round (``num_episodes`` episodes on ``num_envs`` sub-envs
    in ``round_seconds``) gives the seconds per wave; the count is a whole number of waves,
    ``max(1, floor(time_budget_s / seconds_per_wave))``, times ``num_envs``: never fewer than
    ``num_envs`` episodes.
    """
    waves_run = -(-num_episodes // num_envs)  # the earlier round's largest quota
    seconds_per_wave = round_seconds / waves_run
    waves = max(1, math.floor(time_budget_s / seconds_per_wave)) if seconds_per_wave > 0 else 1
    return waves * num_envs


class _TimeBudget:
    """The caller's record of the latest round's rate, and the next round's count from it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self._last: tuple[float, int, int] | None = None  # (round seconds, episodes, sub-envs) of the latest round

    def next_count(self) -> int | None:
        """The next round's episode count; None before any round was measured (the worker runs one wave)."""
        if self._last is None:
            return None
        return episodes_for_budget(self.seconds, *self._last)

    def measured(self, raw: Mapping[str, Any]) -> None:
        """Keep a finished round's time: the latest rate, since policies change during training."""
        seconds, episodes = float(raw["seconds"]), int(raw["num_episodes"])
        num_envs = int(raw.get("num_envs") or episodes)
        if math.isfinite(seconds) and seconds > 0 and episodes > 0:
            self._last = (seconds, episodes, num_envs)


def _check_workers(backend: str, num_workers: Any, max_restarts: Any) -> None:
    for name, value, least in (("num_workers", num_workers, 1), ("max_restarts", max_restarts, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}.")
    if num_workers > 1 and backend != "ray":
        raise ValueError(
            f"num_workers={num_workers} needs backend='ray': the thread and process backends run one worker."
        )


def _check_arguments(
    policy: Any,
    policy_factory: Callable[..., Any] | None,
    num_trajectories: int,
    max_steps: int | None,
    init_fn: Callable[[], None] | str | None,
) -> None:
    if policy is not None and policy_factory is not None:
        raise ValueError("Provide either `policy` or `policy_factory`, not both.")
    if policy is None and policy_factory is None:
        raise ValueError("Either `policy` or `policy_factory` must be provided.")
    if num_trajectories < 1:
        raise ValueError(f"num_trajectories must be >= 1, got {num_trajectories}.")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}.")
    if init_fn is not None and not callable(init_fn) and not (isinstance(init_fn, str) and init_fn.count(":") == 1):
        raise ValueError(f"init_fn must be a callable or a 'module:function' string, got {init_fn!r}.")


class Evaluator:
    """Evaluate a policy synchronously or in the background, on one of three backends.

    Arguments, defaults and error messages follow torchrl's ``Evaluator``;
    see the docs' evaluator page for the additions (``seed``, and a round's own
    ``evaluate(seed=...)`` / ``trigger_eval(seed=...)``, ``start_timeout``,
    ``keep_episodes``, ``busy_policy="skip"``, bootstrap confidence interval,
    ``results_path``: the worker appends each result to this JSON-lines file,
    with ``results_context`` added to every line, which keeps a served
    evaluator's results durable whoever triggers them). ``exploration_type``
    accepts an ``ExplorationType`` or its name; the default is DETERMINISTIC.
    ``num_workers`` (Ray only) splits each round's sub-envs over that many
    actors, each asking for ``num_gpus``: the env factory takes ``num_envs=``
    (its default is the round's total) and a seeded round gives the same
    episodes for any ``num_workers``; a worker that dies mid-round has its
    share re-run, at most ``max_restarts`` times (see ``simeval.backends.ray``).
    ``info_keys`` (keys relative to "next", e.g. ``["success"]``) are read at
    each episode's last step and reported as their means over the episodes,
    beside ``terminated_fraction`` / ``truncated_fraction`` and the env's
    ``("next", "log")`` entries (see ``simeval.worker.episode_ends``).
    ``time_budget_s`` replaces ``num_trajectories`` (give one of them): each
    round's count is chosen before it starts, from the latest round's measured
    time, as the most whole waves of ``num_envs`` complete episodes that fit in
    the budget (see :func:`episodes_for_budget`); the first round runs one wave.
    Results then also carry ``<prefix>/time_budget_s``, ``<prefix>/round_seconds``
    (the rollout's measured time) and ``<prefix>/num_envs``.
    ``round_timeout_s`` bounds each round (see :mod:`simeval.caller.round_timeout`): a round
    still running past it fails with an :class:`~simeval.errors.EvalError`
    (a ``WorkerLost``) and its worker is replaced (process and Ray: killed; thread:
    abandoned, as a Python thread cannot be killed), so the next round runs on a
    fresh one. ``None`` (the default) is a generous rule from the measured step
    time (one hour before any round was measured, then at least ten minutes and
    20x the expected round time); ``math.inf`` is no limit. A round that starts
    its worker also gets ``start_timeout``.
    ``on_progress`` is called in this process while a round runs, at most twice a
    second when its counts changed, and once when its result is in, with a
    :class:`~simeval.caller.progress.Progress` (the round's step, episodes done,
    episodes total, env steps, seconds, ``done``); on every backend the worker
    reports through a side channel at the points where it already counts episodes,
    so progress slows no round and changes no number.
    """

    def __init__(
        self,
        env: Any,
        policy: Any = None,
        *,
        policy_factory: Callable[..., Any] | None = None,
        num_trajectories: int = _DEFAULT_TRAJECTORIES,
        time_budget_s: float | None = None,
        max_steps: int | None = None,
        frames_per_batch: int | None = None,
        collector_cls: type | str | None = None,
        collector_kwargs: dict | None = None,
        weight_sync_schemes: dict[str, Any] | None = None,
        log_prefix: str = "eval",
        reward_keys: Any = ("next", "reward"),
        done_keys: Any = ("next", "done"),
        device: Any = None,
        exploration_type: Any = "DETERMINISTIC",
        metrics_fn: Callable | None = None,
        dump_video: bool = True,
        on_result: Callable | None = None,
        busy_policy: str = "error",
        backend: str = "thread",
        init_fn: Callable[[], None] | str | None = None,
        num_gpus: float = 1,
        ray_kwargs: dict | None = None,
        seed: int | None = None,
        start_timeout: float = 120.0,
        round_timeout_s: float | None = None,
        keep_episodes: bool = False,
        results_path: str | None = None,
        results_context: Mapping[str, Any] | None = None,
        info_keys: Any = None,
        num_workers: int = 1,
        max_restarts: int = 3,
        on_progress: Callable[[Progress], Any] | None = None,
    ) -> None:
        check_busy_policy(busy_policy)
        if backend not in backends.NAMES:
            raise ValueError(f"Unknown backend {backend!r}. Choose 'thread', 'process', or 'ray'.")
        _check_workers(backend, num_workers, max_restarts)
        _check_arguments(policy, policy_factory, num_trajectories, max_steps, init_fn)
        _check_budget(time_budget_s, num_trajectories)
        check_round_timeout(round_timeout_s)
        if backend == "thread" and weight_sync_schemes is not None:
            backend = "process"  # as in torchrl: schemes imply a worker process
        settings = EvalSettings(
            # a budget's first round: one episode per sub-env (one wave); later rounds set their own count
            num_trajectories=None if time_budget_s is not None else int(num_trajectories),
            max_steps=max_steps,
            frames_per_batch=frames_per_batch,
            collector_cls=collector_cls,
            collector_kwargs=dict(collector_kwargs or {}),
            reward_key=as_key(reward_keys),
            done_key=as_key(done_keys),
            device=None if device is None else str(device),
            exploration_type=exploration_name(exploration_type),
            metrics_fn=metrics_fn,
            dump_video=dump_video,
            seed=seed,
            log_prefix=log_prefix,
            results_path=results_path,
            results_context=dict(results_context or {}),
            info_keys=as_info_keys(info_keys),
        )
        recipe = backends.WorkerRecipe(settings, env, policy, policy_factory, init_fn)
        options = backends.BackendOptions(
            start_timeout=start_timeout,
            num_gpus=num_gpus,
            ray_kwargs=ray_kwargs,
            num_workers=num_workers,
            max_restarts=max_restarts,
            info={"log_prefix": log_prefix, "keep_episodes": keep_episodes},
            progress=on_progress is not None,
        )
        budget = _TimeBudget(time_budget_s) if time_budget_s is not None else None
        clock = RoundClock(round_timeout_s, start_timeout, max_steps)
        created = backends.create(backend, recipe, options)
        self._num_trajectories = settings.num_trajectories  # None with a budget: each round's own count
        self._attach(created, log_prefix, keep_episodes, on_result, busy_policy, budget, clock, on_progress)

    def _attach(
        self,
        backend: Backend,
        log_prefix: str,
        keep_episodes: bool,
        on_result: Callable | None,
        busy_policy: str,
        budget: _TimeBudget | None = None,
        clock: RoundClock | None = None,
        on_progress: Callable[[Progress], Any] | None = None,
    ) -> None:
        self._log_prefix = log_prefix
        self._keep_episodes = keep_episodes
        self._user_on_result = on_result
        self._budget = budget
        self._clock = clock
        self.backend_name = backend.name
        self._front = RequestQueue(
            backend,
            self._finalize,
            self._call_on_result if on_result is not None else None,
            busy_policy,
            prepare=self._plan_round if budget is not None else None,
            deadline=self._deadline if clock is not None else None,
            on_progress=on_progress,
        )

    def set_on_progress(self, on_progress: Callable[[Progress], Any] | None) -> None:
        """Call ``on_progress`` (see the class) for the rounds from now on, the running one included; None: stop.

        On the Ray backend a round already running when it is first set reports only its end.
        """
        self._front.set_on_progress(on_progress)

    @property
    def _backend(self) -> Backend:
        return self._front.backend

    # -- synchronous ------------------------------------------------------
    def evaluate(
        self,
        weights: Any = None,
        step: int | None = None,
        *,
        weights_dict: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Run one evaluation round and return its metrics (blocking).

        If an asynchronous evaluation is running, ``busy_policy="error"``
        raises; otherwise this call waits for it (and any queued ones) first.
        The env and policy are never shared between two rounds.

        Args:
            weights: the policy's weights (a module or TensorDict); None: as loaded last.
            step: the result's step; None: a counter.
            weights_dict: weights of other model ids (``"env.transform[2]"``: VecNorm statistics).
            seed: this round's seed in place of the evaluator's own ``seed`` (None: the evaluator's):
                the round gives the episodes (returns, lengths, ``episode_seeds``) of an evaluator
                built with ``seed=`` this value, on every backend; later rounds go back to the
                evaluator's own seed.

        Raises:
            ValueError: ``seed`` is not a whole number.
        """
        self._refuse_in_callback("evaluate()")
        overrides = _seeded(seed)
        request = self._front.submit(
            lambda: _sources(weights, weights_dict),
            step,
            sync=True,
            overrides=overrides,
            busy_message="evaluate() called while an asynchronous evaluation is pending: call wait() first, "
            "or use busy_policy='queue' to run it after the pending ones.",
        )
        return self._front.result_of(request)

    # -- asynchronous -----------------------------------------------------
    def trigger_eval(
        self,
        weights: Any = None,
        step: int | None = None,
        *,
        weights_dict: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> bool:
        """Start an evaluation in the background.

        Args:
            weights: the policy's weights (a module or TensorDict); None: as loaded last.
            step: the result's step; None: a counter.
            weights_dict: weights of other model ids (``"env.transform[2]"``: VecNorm statistics).
            seed: this round's seed in place of the evaluator's own (None: the evaluator's); see
                :meth:`evaluate`.

        Returns:
            True when the request was started or queued, False when ``busy_policy="skip"``
            dropped it (without copying the weights).

        Raises:
            ValueError: ``seed`` is not a whole number.
        """
        overrides = _seeded(seed)
        return (
            self._front.submit(lambda: _sources(weights, weights_dict), step, sync=False, overrides=overrides)
            is not None
        )

    def poll(self, timeout: float = 0) -> dict[str, Any] | None:
        """The next finished result, or None if none is ready within ``timeout`` seconds.

        Its ``on_result`` has already returned. A failed round raises its EvalError.
        """
        return self._front.poll(timeout)

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Block until a background evaluation finishes; None at once if none is pending."""
        self._refuse_in_callback("wait()")
        return self._front.wait(timeout)

    @property
    def pending(self) -> bool:
        """True while an evaluation is running, queued, or its result not yet delivered."""
        return self._front.pending

    # -- lifecycle --------------------------------------------------------
    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel queued and running evaluations and release the worker, within ``timeout``."""
        front = getattr(self, "_front", None)
        if front is not None:
            front.shutdown(timeout)

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown(timeout=2.0)
        except Exception:  # noqa: BLE001, S110 - the interpreter may be tearing down: nothing left to report to
            pass

    @staticmethod
    def extract_weights(module: Any) -> Any:
        """Detached CPU copy of a module's weights, VecNorm statistics included."""
        from simeval.weights import extract_weights

        return extract_weights(module)

    # -- internals --------------------------------------------------------
    def _refuse_in_callback(self, what: str) -> None:
        if self._front.in_callback():
            raise RuntimeError(
                f"{what} cannot run inside on_result (it would wait on the thread that runs the callback); "
                "call trigger_eval() there instead."
            )

    def _plan_round(self, request: Request) -> None:
        """Set the round's episode count from the time budget, just before it starts (after the last result)."""
        planned = request.overrides or RoundOverrides()  # a round's seed, when it was given one
        request.overrides = dataclasses.replace(planned, num_trajectories=self._budget.next_count())

    def _deadline(self, request: Request) -> Deadline | None:
        """The round's time limit, as it starts (after ``_plan_round`` chose a budget's count)."""
        overridden = getattr(request.overrides, "num_trajectories", None)
        return self._clock.start_round(overridden or self._num_trajectories)

    def _finalize(self, raw: dict[str, Any], request: Request) -> dict[str, Any]:
        if self._clock is not None:
            self._clock.finished(raw)
        result = metrics.prefixed(raw, self._log_prefix, self._keep_episodes)
        if self._budget is not None:
            self._budget.measured(raw)
            prefix = self._log_prefix
            result[f"{prefix}/time_budget_s"] = self._budget.seconds
            result[f"{prefix}/round_seconds"] = float(raw["seconds"])
            result[f"{prefix}/num_envs"] = int(raw.get("num_envs") or raw["num_episodes"])
        if self._keep_episodes or raw.get("video") is not None:
            import torch

            lists = {"episode_returns": torch.float64, "episode_lengths": torch.long}
            lists.update(dict.fromkeys(metrics.EPISODE_FLAGS, torch.bool))
            for key, dtype in lists.items():
                full = f"{self._log_prefix}/{key}"
                if full in result:
                    result[full] = torch.tensor(result[full], dtype=dtype)
            info = f"{self._log_prefix}/episode_info/"
            for full in [k for k in result if k.startswith(info)]:
                result[full] = torch.tensor(result[full], dtype=torch.float64)
            video = f"{self._log_prefix}/video"
            if video in result and not isinstance(result[video], torch.Tensor):
                result[video] = torch.tensor(result[video])  # a copy: arrays from Ray's object store are read-only
        return result

    def _call_on_result(self, result: dict[str, Any]) -> None:
        """The user's on_result gets the result as a flat TensorDict (the torchrl guide's ``.item()`` works)."""
        import torch
        from tensordict import TensorDict

        skip = {f"{self._log_prefix}/workers", f"{self._log_prefix}/round"}  # where and how the round ran: no numbers
        data = {k: torch.as_tensor(v) for k, v in result.items() if v is not None and k not in skip}
        self._user_on_result(TensorDict(data, batch_size=[]))


def _seeded(seed: Any) -> RoundOverrides | None:
    """The overrides of a round given ``seed`` (None: none); ValueError unless it is a whole number."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed must be a whole number or None, got {seed!r}.")
    return RoundOverrides(seed=int(seed))


def _sources(weights: Any, weights_dict: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """{model_id: TensorDict view} of what to load; raises TypeError on anything else."""
    sources = dict(weights_dict or {})
    if weights is not None:
        sources.setdefault("policy", weights)
    if not sources:
        return None
    from simeval.weights import as_weights

    return {k: as_weights(v) for k, v in sources.items()}


def connect(
    name: str, *, namespace: str | None = None, start_timeout: float = 120.0, busy_policy: str = "error"
) -> Evaluator:
    """Attach to a named Ray evaluator (``ray_kwargs={"name": name}``) from any process.

    The handle offers ``trigger_eval / poll / wait / pending / evaluate``;
    its ``shutdown()`` releases the handle and leaves the served actor running.
    """
    check_busy_policy(busy_policy)
    backend = RayBackend.attach(name, namespace or NAMESPACE, start_timeout)
    info = backend.describe()
    handle = Evaluator.__new__(Evaluator)
    handle._attach(backend, info.get("log_prefix", "eval"), info.get("keep_episodes", False), None, busy_policy)
    return handle
