"""Ray backend: the worker lives in a Ray actor that asks for ``num_gpus``.

Weights travel through Ray's object store. A named actor (``ray_kwargs=
{"name": ...}``) is detached and can be reached from any process on the
cluster with :func:`simeval.connect`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from simeval.backends.base import Backend
from simeval.errors import EvalError

NAMESPACE = "simeval"


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
    """Owns (or, for ``connect``, borrows) one actor; replaces it when it dies."""

    name = "ray"

    def __init__(
        self,
        setup: dict | None,
        *,
        num_gpus: float = 1,
        ray_kwargs: Mapping[str, Any] | None = None,
        start_timeout: float = 120.0,
        actor=None,
    ) -> None:
        self._ray = ensure_ray()
        self._setup = setup
        self._num_gpus = num_gpus
        self._ray_kwargs = dict(ray_kwargs or {})
        self._start_timeout = start_timeout
        self._owner = actor is None
        self._ready = actor is not None
        self._actor = actor if actor is not None else self._create()
        self._thread: threading.Thread | None = None
        self._closing = False

    @classmethod
    def attach(cls, name: str, namespace: str = NAMESPACE, start_timeout: float = 120.0) -> RayBackend:
        ray = ensure_ray()
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:
            raise ValueError(
                f"no simeval evaluator named {name!r} in Ray namespace {namespace!r}: "
                "start one with Evaluator(..., backend='ray', ray_kwargs={'name': ...})."
            ) from None
        return cls(None, actor=actor, start_timeout=start_timeout)

    def describe(self) -> dict:
        return self._ray.get(self._actor.describe.remote(), timeout=self._start_timeout)

    def _create(self):
        from simeval.backends.ray_actor import EvalActor

        kwargs = dict(self._ray_kwargs)
        options = {k: kwargs.pop(k) for k in ("name", "namespace", "lifetime") if k in kwargs}
        if "name" in options:
            options.setdefault("namespace", NAMESPACE)
            options.setdefault("lifetime", "detached")
        cls = self._ray.remote(num_gpus=self._num_gpus, **kwargs)(EvalActor)
        self._ready = False
        return cls.options(**options).remote(self._setup)

    def start(self, step: int, weights: Mapping[str, Any] | None, future: Future) -> None:
        if self._actor is None:
            if not self._owner:
                future.set_exception(EvalError("the served Ray evaluator is gone; connect again."))
                return
            self._actor = self._create()
        payload = None
        if weights:
            from simeval.weights import as_weights

            # One copy to CPU (training keeps changing its tensors); Ray ships it from there.
            payload = {k: as_weights(v).apply(lambda t: t.detach().to("cpu", copy=True)) for k, v in weights.items()}
        self._thread = threading.Thread(
            target=self._run, args=(self._actor, step, payload, future), name="simeval-ray-waiter", daemon=True
        )
        self._thread.start()

    def _run(self, actor, step: int, payload, future: Future) -> None:
        ray = self._ray
        try:
            if not self._ready:
                self._wait_ready(actor)
            outcome = ray.get(actor.run.remote(step, payload))
        except EvalError as exc:
            future.set_exception(exc)
            return
        except Exception as exc:  # noqa: BLE001 - actor died, was killed, or failed to start
            if self._closing:
                future.set_exception(EvalError("evaluation cancelled by shutdown()"))
                return
            if actor is self._actor:
                self._actor = None  # replaced at the next request
            message, tb = _unwrap_actor_error(exc)
            future.set_exception(EvalError(f"Ray eval actor failed: {message}", tb))
            return
        if outcome[0] == "result":
            future.set_result(outcome[1])
        else:
            future.set_exception(EvalError(f"Ray eval worker failed: {outcome[1]}", outcome[2]))

    def _wait_ready(self, actor) -> None:
        ray = self._ray
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=self._start_timeout)
        except ray.exceptions.GetTimeoutError:
            ray.kill(actor)
            if actor is self._actor:
                self._actor = None
            raise EvalError(
                f"the Ray eval actor did not start within {self._start_timeout:g} s: it asks for "
                f"num_gpus={self._num_gpus} (and {self._ray_kwargs or 'no other resources'}), the cluster "
                f"has {ray.cluster_resources()}. Lower num_gpus, add resources, or raise start_timeout."
            ) from None
        self._ready = True

    def shutdown(self, timeout: float) -> None:
        self._closing = True
        deadline = time.monotonic() + timeout
        actor, self._actor = self._actor, None
        if actor is not None and self._owner:
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
