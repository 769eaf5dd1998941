"""The front: ``simeval.Evaluator``, a drop-in for ``torchrl.collectors.Evaluator``.

It validates arguments, keeps the request queue and the ready results, applies
the busy policy and formats metrics; the backend (thread, process or Ray)
runs the rounds. Each request carries a Future, completed by the backend with
raw metrics or an EvalError, so every failure reaches ``evaluate``, ``wait``
or ``poll`` and nothing stays pending.

This module imports no torch at import time, so a training script can import
simeval before its simulator's ``init_fn`` has run.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from simeval import metrics
from simeval.backends import BACKENDS
from simeval.errors import EvalError
from simeval.spec import EvalSpec, as_key

logger = logging.getLogger(__name__)

BUSY_POLICIES = ("error", "queue", "skip")
_WAITING = object()


@dataclass(eq=False)
class _Request:
    step: int
    weights: Mapping[str, Any] | None
    sync: bool
    future: Future = field(default_factory=Future)
    outcome: Any = _WAITING


def _is_env_instance(env: Any) -> bool:
    from torchrl.envs import EnvBase

    return isinstance(env, EnvBase)


def _exploration_name(value: Any) -> str:
    if value is None:
        return "DETERMINISTIC"
    if isinstance(value, str):
        from torchrl.envs.utils import ExplorationType

        member = ExplorationType(value) if value.islower() else ExplorationType[value]
        return member.name
    return value.name


class Evaluator:
    """Evaluate a policy synchronously or in the background, on one of three backends.

    Arguments, defaults and error messages follow torchrl's ``Evaluator``;
    see the README for the additions (``seed``, ``start_timeout``,
    ``keep_episodes``, ``busy_policy="skip"``, bootstrap confidence interval,
    ``results_path``: the worker appends each result to this JSON-lines file,
    which keeps a served evaluator's results durable whoever triggers them).
    ``exploration_type`` accepts an ``ExplorationType`` or its name; the
    default is ``ExplorationType.DETERMINISTIC``.
    """

    def __init__(
        self,
        env: Any,
        policy: Any = None,
        *,
        policy_factory: Callable[..., Any] | None = None,
        num_trajectories: int = 10,
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
        keep_episodes: bool = False,
        results_path: str | None = None,
    ) -> None:
        if busy_policy not in BUSY_POLICIES:
            raise ValueError(f"Unknown busy_policy {busy_policy!r}. Choose 'error', 'queue' or 'skip'.")
        if backend not in BACKENDS:
            raise ValueError(f"Unknown backend {backend!r}. Choose 'thread', 'process', or 'ray'.")
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
        if backend == "thread" and weight_sync_schemes is not None:
            backend = "process"  # as in torchrl: schemes imply a worker process
        if backend in ("process", "ray"):
            self._check_remote_args(backend, env, policy_factory, weight_sync_schemes is not None)

        self._log_prefix = log_prefix
        self._on_result = on_result
        self._busy_policy = busy_policy
        self._keep_episodes = keep_episodes
        self._weight_sync_schemes = weight_sync_schemes
        self._step_counter = 0
        self._cond = threading.Condition()
        self._queue: deque[_Request] = deque()
        self._ready: deque[Any] = deque()
        self._current: _Request | None = None
        self._closed = False
        self._in_callback = threading.local()
        self.backend_name = backend
        spec = EvalSpec(
            num_trajectories=num_trajectories,
            max_steps=max_steps,
            frames_per_batch=frames_per_batch,
            collector_cls=collector_cls,
            collector_kwargs=dict(collector_kwargs or {}),
            reward_key=as_key(reward_keys),
            done_key=as_key(done_keys),
            device=None if device is None else str(device),
            exploration_type=_exploration_name(exploration_type),
            metrics_fn=metrics_fn,
            dump_video=dump_video,
            seed=seed,
            results_path=results_path,
        )
        self._backend = self._make_backend(
            backend, spec, env, policy, policy_factory, init_fn, num_gpus, ray_kwargs, start_timeout
        )

    @staticmethod
    def _check_remote_args(backend: str, env: Any, policy_factory: Any, schemes: bool) -> None:
        where = "a child process" if backend == "process" else "the Ray actor process"
        if not callable(env) or _is_env_instance(env):
            if backend == "process":
                raise ValueError(
                    f"The {'thread' if schemes else backend!r} backend with weight_sync_schemes "
                    "(or backend='process') requires `env` to be a callable "
                    "(factory function) because the env is created inside a child process."
                )
            raise ValueError(
                "The 'ray' backend requires `env` to be a callable (factory function) "
                f"because the env is created inside {where}."
            )
        if policy_factory is None:
            if backend == "process":
                raise ValueError(
                    f"The {'thread' if schemes else backend!r} backend with weight_sync_schemes "
                    "(or backend='process') requires `policy_factory` (a callable "
                    "`(env) -> policy`) because the policy is created inside a child process."
                )
            raise ValueError(
                "The 'ray' backend requires `policy_factory` (a callable "
                "`(env) -> policy`) because the policy is created inside the Ray actor process."
            )

    def _make_backend(self, backend, spec, env, policy, policy_factory, init_fn, num_gpus, ray_kwargs, start_timeout):
        if backend == "thread":
            from simeval.backends.thread import ThreadBackend
            from simeval.worker import EvalWorker

            if _is_env_instance(env) or policy is not None:
                if not _is_env_instance(env) and callable(env):
                    env = env()  # torchrl's eager path: a factory with a ready policy
                if policy is None:
                    policy = policy_factory(env)
                worker = EvalWorker(spec, env=env, policy=policy)
            else:
                worker = EvalWorker(spec, env_factory=env, policy_factory=policy_factory)
            return ThreadBackend(worker)

        import cloudpickle

        payload = cloudpickle.dumps((spec, env, policy_factory))
        init_payload = init_fn if (init_fn is None or isinstance(init_fn, str)) else cloudpickle.dumps(init_fn)
        if backend == "process":
            from simeval.backends.process import ProcessBackend

            return ProcessBackend(init_payload, payload, start_timeout=start_timeout)
        import sys

        from simeval.backends.ray import RayBackend

        setup = {
            "init_fn": init_payload,
            "payload": payload,
            "sys_path": list(sys.path),
            "info": {"log_prefix": self._log_prefix, "keep_episodes": self._keep_episodes},
        }
        return RayBackend(setup, num_gpus=num_gpus, ray_kwargs=ray_kwargs, start_timeout=start_timeout)

    @classmethod
    def _attached(cls, backend, log_prefix: str, keep_episodes: bool) -> Evaluator:
        self = cls.__new__(cls)
        self._log_prefix = log_prefix
        self._on_result = None
        self._busy_policy = "error"
        self._keep_episodes = keep_episodes
        self._weight_sync_schemes = None
        self._step_counter = 0
        self._cond = threading.Condition()
        self._queue, self._ready = deque(), deque()
        self._current = None
        self._closed = False
        self._in_callback = threading.local()
        self.backend_name = backend.name
        self._backend = backend
        return self

    # -- synchronous ------------------------------------------------------
    def evaluate(
        self, weights: Any = None, step: int | None = None, *, weights_dict: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run one evaluation round and return its metrics (blocking).

        If an asynchronous evaluation is running, ``busy_policy="error"``
        raises; otherwise this call waits for it (and any queued ones) first.
        The env and policy are never shared between two rounds.
        """
        if getattr(self._in_callback, "active", False):
            raise RuntimeError(
                "evaluate() cannot run inside on_result of a background evaluation (it would wait "
                "on the worker that runs the callback); call trigger_eval() there instead."
            )
        sources = self._sources(weights, weights_dict)
        with self._cond:
            self._check_open()
            busy = self._current is not None or bool(self._queue)
            if busy and self._busy_policy == "error":
                raise RuntimeError(
                    "evaluate() called while an asynchronous evaluation is pending: call wait() "
                    "first, or use busy_policy='queue' to run it after the pending ones."
                )
        request = self._submit(sources, step, sync=True)
        with self._cond:
            self._cond.wait_for(lambda: request.outcome is not _WAITING)
        if isinstance(request.outcome, BaseException):
            raise request.outcome
        self._invoke_on_result(request.outcome)
        return request.outcome

    # -- asynchronous -----------------------------------------------------
    def trigger_eval(
        self, weights: Any = None, step: int | None = None, *, weights_dict: Mapping[str, Any] | None = None
    ) -> bool:
        """Start an evaluation in the background.

        Returns True when the request was started or queued, False when
        ``busy_policy="skip"`` dropped it (without copying the weights).
        """
        with self._cond:
            self._check_open()
            busy = self._current is not None or bool(self._queue)
            if busy and self._busy_policy == "error":
                raise RuntimeError(
                    "Evaluation already pending. Wait for completion or set busy_policy='queue' (or 'skip')."
                )
            if busy and self._busy_policy == "skip":
                return False
        self._submit(self._sources(weights, weights_dict), step, sync=False)
        return True

    def poll(self, timeout: float = 0) -> dict[str, Any] | None:
        """The next finished result, or None if none is ready within ``timeout`` seconds."""
        if timeout and timeout > 0:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._ready), timeout)
        return self._pop_ready()

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Block until a background evaluation finishes; None at once if none is pending."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._ready) or (self._current is None and not self._queue), timeout)
        return self._pop_ready()

    @property
    def pending(self) -> bool:
        """True while an evaluation is running or queued."""
        with self._cond:
            return self._current is not None or bool(self._queue)

    # -- lifecycle --------------------------------------------------------
    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel queued and running evaluations and release the worker, within ``timeout``."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
        for request in queued:
            request.future.set_exception(EvalError("evaluation cancelled by shutdown()"))
            self._settle(request, request.future)
        self._backend.shutdown(timeout)
        with self._cond:
            self._current = None
            self._cond.notify_all()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown(timeout=2.0)
        except Exception:  # noqa: BLE001 - interpreter may be tearing down
            pass

    @staticmethod
    def extract_weights(module: Any) -> Any:
        """Detached CPU copy of a module's weights, VecNorm statistics included."""
        from simeval.weights import extract_weights

        return extract_weights(module)

    # -- internals --------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Evaluator was shut down; create a new one.")

    def _next_step(self, step: int | None) -> int:
        if step is not None:
            return int(step)
        step, self._step_counter = self._step_counter, self._step_counter + 1
        return step

    @staticmethod
    def _sources(weights: Any, weights_dict: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """{model_id: TensorDict view} of what to load; raises TypeError on anything else."""
        sources = dict(weights_dict or {})
        if weights is not None:
            sources.setdefault("policy", weights)
        if not sources:
            return None
        from simeval.weights import as_weights

        return {k: as_weights(v) for k, v in sources.items()}

    def _submit(self, sources: Mapping[str, Any] | None, step: int | None, sync: bool) -> _Request:
        """Start the request now if idle, else queue it with a private copy of the weights."""
        with self._cond:
            request = _Request(self._next_step(step), None, sync=sync)
            busy = self._current is not None or bool(self._queue)
            if busy:
                from simeval.weights import snapshot

                request.weights = snapshot(sources) if sources else None
                self._queue.append(request)
            else:
                request.weights = sources
                self._current = request
        if not busy:
            self._launch(request)
        return request

    def _pop_ready(self) -> dict[str, Any] | None:
        """The oldest ready result (None if there is none); a failed round raises its EvalError."""
        with self._cond:
            if not self._ready:
                return None
            outcome = self._ready.popleft()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _launch(self, request: _Request) -> None:
        request.future.add_done_callback(lambda fut, req=request: self._settle(req, fut))
        try:
            self._backend.start(request.step, request.weights, request.future)
        except BaseException as exc:  # noqa: BLE001 - e.g. weights that do not fit
            if not request.future.done():
                request.future.set_exception(
                    exc if isinstance(exc, EvalError) else EvalError(f"{type(exc).__name__}: {exc}")
                )
        request.weights = None

    def _settle(self, request: _Request, future: Future) -> None:
        """Runs when a request's future completes: publish, start the next one, call on_result.

        The result is published (and the evaluator marked idle) before
        ``on_result`` runs, so results keep their order and the callback may
        call ``trigger_eval`` itself.
        """
        if request.outcome is not _WAITING:
            return
        exc = future.exception()
        try:
            outcome: Any = exc if exc is not None else self._finalize(future.result())
        except Exception as err:  # noqa: BLE001 - e.g. a metrics value torch cannot hold
            outcome = EvalError.from_exception(err, "formatting the result")
        with self._cond:
            request.outcome = outcome
            if not request.sync:
                self._ready.append(outcome)
            nxt = None
            if self._current is request:
                nxt = self._queue.popleft() if (self._queue and not self._closed) else None
                self._current = nxt
            self._cond.notify_all()
        if nxt is not None:
            self._launch(nxt)
        if not request.sync and not isinstance(outcome, BaseException):
            self._in_callback.active = True
            try:
                self._invoke_on_result(outcome)
            finally:
                self._in_callback.active = False

    def _finalize(self, raw: dict[str, Any]) -> dict[str, Any]:
        result = metrics.format_result(raw, self._log_prefix, self._keep_episodes)
        if self._keep_episodes or raw.get("video") is not None:
            import torch

            for key in ("episode_returns", "episode_lengths"):
                full = f"{self._log_prefix}/{key}"
                if full in result:
                    dtype = torch.float64 if key == "episode_returns" else torch.long
                    result[full] = torch.tensor(result[full], dtype=dtype)
            video = f"{self._log_prefix}/video"
            if video in result and not isinstance(result[video], torch.Tensor):
                result[video] = torch.as_tensor(result[video])
        return result

    def _invoke_on_result(self, result: dict[str, Any]) -> None:
        if self._on_result is None:
            return
        try:
            import torch
            from tensordict import TensorDict

            data = {k: torch.as_tensor(v) for k, v in result.items() if v is not None}
            self._on_result(TensorDict(data, batch_size=[]))
        except Exception:  # noqa: BLE001 - a callback bug must not stop evaluation
            logger.exception("Evaluator on_result callback failed; evaluation goes on")


def connect(
    name: str, *, namespace: str | None = None, start_timeout: float = 120.0, busy_policy: str = "error"
) -> Evaluator:
    """Attach to a named Ray evaluator (``ray_kwargs={"name": name}``) from any process.

    The handle offers ``trigger_eval / poll / wait / pending / evaluate``;
    its ``shutdown()`` releases the handle and leaves the served actor running.
    """
    from simeval.backends.ray import NAMESPACE, RayBackend

    backend = RayBackend.attach(name, namespace or NAMESPACE, start_timeout)
    info = backend.describe()
    if busy_policy not in BUSY_POLICIES:
        raise ValueError(f"Unknown busy_policy {busy_policy!r}. Choose 'error', 'queue' or 'skip'.")
    handle = Evaluator._attached(backend, info.get("log_prefix", "eval"), info.get("keep_episodes", False))
    handle._busy_policy = busy_policy
    return handle
