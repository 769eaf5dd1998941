"""Ray backend: the worker lives in a Ray actor that asks for ``num_gpus``.

Weights travel through Ray's object store. A named actor (``ray_kwargs=
{"name": ...}``) is detached and can be reached from any process on the
cluster with :func:`simeval.connect` or ``RayEvalWorker.from_name``. Every wait
on the actor is bounded: start-up by ``start_timeout``, a round by polling, so
a dead, unschedulable or stuck actor ends in an EvalError and shutdown is prompt.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from simeval.backends.base import Backend, BackendOptions, WorkerRecipe, cancelled, complete
from simeval.errors import EvalError
from simeval.settings import RoundOverrides

NAMESPACE = "simeval"
_POLL_S = 0.5


def ensure_ray() -> Any:
    """Import ray and join the cluster in RAY_ADDRESS, or start a local one."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("backend='ray' needs Ray: pip install 'simeval[ray]'.") from None
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=True)
    return ray


def _unwrap_actor_error(exc: BaseException) -> tuple[str, str]:
    """The user's exception behind a Ray actor error, as (message, traceback)."""
    cause = getattr(exc, "cause", None) or exc.__cause__
    text = str(exc)
    if cause is not None and not isinstance(cause, type(exc)):
        return f"{type(cause).__name__}: {cause}", text
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}", text


class RayBackend(Backend):
    """Owns (or, for a connected handle, borrows) one actor; replaces an owned actor that died.

    ``kill_on_shutdown`` is True for the evaluator that created the actor (and
    for ``RayEvalWorker`` handles, as in torchrl); a ``connect()`` handle leaves
    the served actor running.
    """

    name = "ray"

    def __init__(
        self,
        setup: dict | None,
        *,
        num_gpus: float = 1,
        ray_kwargs: Mapping[str, Any] | None = None,
        start_timeout: float = 120.0,
        actor=None,
        kill_on_shutdown: bool | None = None,
    ) -> None:
        super().__init__()
        self._ray = ensure_ray()
        self._setup = setup  # None for a borrowed actor: it cannot be recreated
        self._num_gpus = num_gpus
        self._ray_kwargs = dict(ray_kwargs or {})
        self._start_timeout = start_timeout
        self._kill_on_shutdown = actor is None if kill_on_shutdown is None else kill_on_shutdown
        self._lock = threading.Lock()
        self._ready = False
        self._actor = actor if actor is not None else self._create()
        self._thread: threading.Thread | None = None
        self._closing = False

    @classmethod
    def create(cls, recipe: WorkerRecipe, options: BackendOptions) -> RayBackend:
        from simeval.backends.host import make_setup

        recipe.require_factories("'ray'", "the Ray actor process")
        setup = make_setup(recipe)
        setup["info"] = dict(options.info or {})
        return cls(setup, num_gpus=options.num_gpus, ray_kwargs=options.ray_kwargs, start_timeout=options.start_timeout)

    @classmethod
    def attach(
        cls, name: str, namespace: str = NAMESPACE, start_timeout: float = 120.0, kill_on_shutdown: bool = False
    ) -> RayBackend:
        ray = ensure_ray()
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:
            raise ValueError(
                f"no simeval evaluator named {name!r} in Ray namespace {namespace!r}: "
                "start one with Evaluator(..., backend='ray', ray_kwargs={'name': ...}) or RayEvalWorker(name=...)."
            ) from None
        return cls(None, actor=actor, start_timeout=start_timeout, kill_on_shutdown=kill_on_shutdown)

    def describe(self) -> dict:
        actor = self._current_actor()
        self._wait_ready(actor)
        return self._ray.get(actor.describe.remote(), timeout=self._start_timeout)

    def _create(self):
        from simeval.backends.ray_actor import EvalActor

        kwargs = dict(self._ray_kwargs)
        options = {k: kwargs.pop(k) for k in ("name", "namespace", "lifetime") if k in kwargs}
        if options.get("name") is None:
            options.pop("name", None)
        else:
            options.setdefault("namespace", NAMESPACE)
            options.setdefault("lifetime", "detached")
        cls = self._ray.remote(num_gpus=self._num_gpus, **kwargs)(EvalActor)
        self._ready = False
        return cls.options(**options).remote(self._setup)

    def _current_actor(self):
        with self._lock:
            if self._actor is None:
                if self._setup is None:
                    raise EvalError("the served Ray evaluator is gone; connect again.")
                self._actor = self._create()
            return self._actor

    def _forget(self, actor, kill: bool = False) -> None:
        """Drop ``actor`` (replaced at the next request); kill it when it is of no further use."""
        with self._lock:
            if actor is self._actor:
                self._actor = None
        if kill:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def _start(
        self, step: int, weights: Mapping[str, Any] | None, future: Future, overrides: RoundOverrides | None
    ) -> None:
        try:
            actor = self._current_actor()
        except EvalError as exc:
            complete(future, exc=exc)
            return
        payload = None
        if weights:
            from simeval.weights import as_weights

            # One copy to CPU (training keeps changing its tensors); Ray ships it from there.
            payload = {k: as_weights(v).apply(lambda t: t.detach().to("cpu", copy=True)) for k, v in weights.items()}
        self._thread = threading.Thread(
            target=self._run, args=(actor, step, payload, overrides, future), name="simeval-ray-waiter", daemon=True
        )
        self._thread.start()

    def _run(self, actor, step: int, payload, overrides, future: Future) -> None:
        try:
            self._wait_ready(actor)
            outcome = self._get(actor.run.remote(step, payload, overrides))
        except EvalError as exc:
            complete(future, exc=cancelled() if self._closing else exc)
            return
        except Exception as exc:  # noqa: BLE001 - actor died, was killed, or failed to start
            if self._closing:
                complete(future, exc=cancelled())
                return
            self._forget(actor)
            message, tb = _unwrap_actor_error(exc)
            complete(future, exc=EvalError(f"Ray eval actor failed: {message}", tb))
            return
        if outcome[0] == "result":
            complete(future, outcome[1])
        elif outcome[0] == "fatal":
            self._forget(actor, kill=self._setup is not None)  # an owned actor is replaced by a fresh one
            complete(future, exc=EvalError(f"Ray eval worker failed to start: {outcome[1]}", outcome[2]))
        else:
            complete(future, exc=EvalError(f"Ray eval worker failed: {outcome[1]}", outcome[2]))

    def _get(self, ref):
        """``ray.get`` in short waits, so that shutdown is noticed and nothing blocks for ever."""
        ray = self._ray
        while True:
            ready, _ = ray.wait([ref], timeout=_POLL_S)
            if ready:
                return ray.get(ready[0])
            if self._closing:
                raise EvalError("evaluation cancelled by shutdown()")

    def _wait_ready(self, actor) -> None:
        if self._ready and actor is self._actor:
            return
        ray = self._ray
        deadline = time.monotonic() + self._start_timeout
        while True:
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=min(_POLL_S, max(0.01, deadline - time.monotonic())))
                break
            except ray.exceptions.GetTimeoutError:
                if self._closing:
                    raise EvalError("evaluation cancelled by shutdown()") from None
                if time.monotonic() < deadline:
                    continue
            self._forget(actor, kill=self._setup is not None)
            raise EvalError(
                f"the Ray eval actor did not start within {self._start_timeout:g} s: it asks for "
                f"num_gpus={self._num_gpus} (and {self._ray_kwargs or 'no other resources'}), the cluster "
                f"has {ray.cluster_resources()}. Lower num_gpus, add resources, or raise start_timeout."
            )
        with self._lock:
            if actor is self._actor:
                self._ready = True

    def _shutdown(self, timeout: float) -> None:
        self._closing = True
        deadline = time.monotonic() + timeout
        with self._lock:
            actor, self._actor = self._actor, None
        if actor is not None and self._kill_on_shutdown:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            else:
                self._confirm_dead(actor, deadline)
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def _confirm_dead(self, actor, deadline: float) -> None:
        """ray.kill is asynchronous: wait (within the shutdown timeout) until the actor is gone."""
        ray = self._ray
        while time.monotonic() < deadline:
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=min(0.5, max(0.05, deadline - time.monotonic())))
            except ray.exceptions.GetTimeoutError:
                continue
            except Exception:  # noqa: BLE001 - RayActorError: it is dead
                return
            time.sleep(0.05)
