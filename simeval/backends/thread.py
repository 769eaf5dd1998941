"""Thread backend: one daemon thread owns the env and policy."""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from simeval.backends.base import Backend, BackendOptions, WorkerRecipe, cancelled, complete
from simeval.errors import Cancelled, EvalError
from simeval.settings import RoundOverrides
from simeval.weights import LocalStaging
from simeval.worker.eval_worker import EvalWorker


class ThreadBackend(Backend):
    """Runs rounds on a daemon thread; shutdown stops a round between two env steps.

    The thread closes the worker (and an env it built) on its way out, so an
    env is closed even when ``shutdown``'s timeout ends before the round stops.
    """

    name = "thread"

    def __init__(self, worker: EvalWorker) -> None:
        super().__init__()
        self._worker = worker
        self._staging = LocalStaging()
        self._requests: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    @classmethod
    def create(cls, recipe: WorkerRecipe, options: BackendOptions) -> ThreadBackend:
        """A worker for ``recipe`` on a thread of this process (env and policy as given, or built by the factories)."""
        from simeval.backends.base import is_env_instance

        env, policy = recipe.env, recipe.policy
        if is_env_instance(env) or policy is not None:
            if not is_env_instance(env) and callable(env):
                env = env()  # torchrl's eager path: a factory with a ready policy
            if policy is None:
                policy = recipe.policy_factory(env)
            worker = EvalWorker(recipe.settings, env=env, policy=policy)
        else:
            worker = EvalWorker(recipe.settings, env_factory=env, policy_factory=recipe.policy_factory)
        worker.owns_thread = True
        return cls(worker)

    def _start(
        self, step: int, weights: Mapping[str, Any] | None, future: Future, overrides: RoundOverrides | None
    ) -> None:
        staged = self._staging.write(weights) if weights else None
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="simeval-thread-worker", daemon=True)
            self._thread.start()
        self._requests.put((step, staged, future, overrides))

    def _loop(self) -> None:
        try:
            while True:
                item = self._requests.get()
                if item is None:
                    return
                step, staged, future, overrides = item
                try:
                    raw = self._worker.run(staged, step, overrides)
                except Cancelled:
                    complete(future, exc=cancelled())
                except BaseException as exc:  # noqa: BLE001 - every failure must reach the caller
                    complete(future, exc=EvalError.from_exception(exc, "thread eval worker"))
                else:
                    complete(future, raw)
        finally:
            self._worker.close()

    def _shutdown(self, timeout: float) -> None:
        thread = self._thread  # start() cannot run any more: the gate is closed
        self._worker.stop.set()
        if thread is None:
            self._worker.close()
            return
        self._requests.put(None)
        thread.join(timeout)  # if a step outlasts the timeout, the thread closes the worker when it ends
