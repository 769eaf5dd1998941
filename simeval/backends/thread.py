"""Thread backend: one daemon thread owns the env and policy."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from simeval.backends.base import Backend, BackendOptions, WorkerRecipe, cancelled, complete, is_env_instance
from simeval.backends.bootstrap import start_resource_tracker
from simeval.errors import Cancelled, EvalError
from simeval.settings import RoundOverrides
from simeval.weights import LocalStaging
from simeval.worker.eval_worker import EvalWorker


@dataclass(eq=False)
class _Lane:
    """One worker, the daemon thread that runs its rounds, and its request queue.

    ``abandoned``: the lane's round timed out; the thread (which cannot be killed) completes nothing
    more and ends when it next reaches a step boundary.
    """

    worker: EvalWorker
    requests: queue.Queue = field(default_factory=queue.Queue)
    thread: threading.Thread | None = None
    abandoned: bool = False


class ThreadBackend(Backend):
    """Runs rounds on a daemon thread; shutdown stops a round between two env steps.

    The thread closes the worker (and an env it built) on its way out, so an
    env is closed even when ``shutdown``'s timeout ends before the round stops.
    A round that times out leaves its thread behind (a Python thread cannot be
    killed): it is told to stop at its next step and the next round runs on a
    fresh worker and thread. A fresh worker needs its own env and policy: from
    the factories, or, where the caller passed instances, once the old thread
    has let go of them.
    """

    name = "thread"

    def __init__(self, make_worker: Callable[[], EvalWorker], shares_instances: bool = False) -> None:
        super().__init__()
        self._make_worker = make_worker
        self._shares_instances = shares_instances  # the caller's env/policy objects: one thread at a time
        self._staging = LocalStaging()
        self._lane: _Lane | None = self._new_lane()
        self._abandoned: list[threading.Thread] = []

    @classmethod
    def create(cls, recipe: WorkerRecipe, options: BackendOptions) -> ThreadBackend:
        """A worker for ``recipe`` on a thread of this process (env and policy as given, or built by the factories).

        multiprocessing's resource tracker is started here (:func:`~simeval.backends.bootstrap.start_resource_tracker`),
        before the worker's env makes a lock (torchrl's VecNorm) that would start it from the working directory.
        """
        start_resource_tracker()
        env, policy = recipe.env, recipe.policy
        if is_env_instance(env) or policy is not None:
            if not is_env_instance(env) and callable(env):
                env = env()  # torchrl's eager path: a factory with a ready policy
            if policy is None:
                policy = recipe.policy_factory(env)
            return cls(lambda: EvalWorker(recipe.settings, env=env, policy=policy), shares_instances=True)
        return cls(lambda: EvalWorker(recipe.settings, env_factory=env, policy_factory=recipe.policy_factory))

    def _new_lane(self) -> _Lane:
        worker = self._make_worker()
        worker.owns_thread = True
        return _Lane(worker)

    def _start(
        self, step: int, weights: Mapping[str, Any] | None, future: Future, overrides: RoundOverrides | None
    ) -> None:
        lane = self._lane or self._replacement(future)
        if lane is None:
            return
        staged = self._staging.write(weights) if weights else None
        if lane.thread is None:
            lane.thread = threading.Thread(target=self._loop, args=(lane,), name="simeval-thread-worker", daemon=True)
            lane.thread.start()
        lane.requests.put((step, staged, future, overrides))

    def progress(self) -> tuple[int, int, int] | None:
        """The running round's counts, read from its worker's counter (same process: no channel needed)."""
        lane = self._lane
        return None if lane is None else lane.worker.counter.snapshot()

    def _replacement(self, future: Future) -> _Lane | None:
        """A fresh lane after a timed-out round; None (and ``future`` failed) while the old thread holds instances."""
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        if self._shares_instances and self._abandoned:
            complete(
                future,
                exc=EvalError(
                    "the round before timed out and its thread is still running in the env and policy you passed; "
                    "pass an env factory and policy_factory so a timed-out round's worker can be rebuilt, or use "
                    "backend='process'."
                ),
            )
            return None
        self._lane = self._new_lane()
        return self._lane

    def _loop(self, lane: _Lane) -> None:
        try:
            while True:
                item = lane.requests.get()
                if item is None:
                    return
                step, staged, future, overrides = item
                try:
                    raw, exc = lane.worker.run(staged, step, overrides), None
                except Cancelled:
                    raw, exc = None, cancelled()
                except BaseException as err:  # noqa: BLE001 - every failure must reach the caller
                    raw, exc = None, EvalError.from_exception(err, "thread eval worker")
                if not lane.abandoned:  # a timed-out round was already failed: its late answer is nobody's
                    complete(future, raw, exc)
        finally:
            lane.worker.close()

    def _replace_worker(self, error: EvalError) -> None:
        """Abandon the lane of a timed-out round: stop it at its next step; the next round gets a fresh lane."""
        lane, self._lane = self._lane, None
        if lane is None:
            return
        lane.abandoned = True  # before stop: a round that stops now must not complete with "cancelled"
        lane.worker.stop.set()
        lane.requests.put(None)
        if lane.thread is not None:
            self._abandoned.append(lane.thread)
        self._staging = LocalStaging()  # the stuck thread may still read the old buffers

    def _shutdown(self, timeout: float) -> None:
        lane = self._lane  # start() cannot run any more: the gate is closed
        if lane is None:
            return
        lane.worker.stop.set()
        if lane.thread is None:
            lane.worker.close()
            return
        lane.requests.put(None)
        lane.thread.join(timeout)  # if a step outlasts the timeout, the thread closes the worker when it ends
