"""Thread backend: one daemon thread owns the env and policy."""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from simeval.backends.base import Backend
from simeval.errors import Cancelled, EvalError
from simeval.weights import LocalStaging
from simeval.worker import EvalWorker


class ThreadBackend(Backend):
    """Runs rounds on a daemon thread; shutdown stops a round between two env steps."""

    name = "thread"

    def __init__(self, worker: EvalWorker) -> None:
        self._worker = worker
        self._staging = LocalStaging()
        self._requests: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self, step: int, weights: Mapping[str, Any] | None, future: Future) -> None:
        staged = self._staging.write(weights) if weights else None
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="simeval-thread-worker", daemon=True)
            self._thread.start()
        self._requests.put((step, staged, future))

    def _loop(self) -> None:
        while True:
            item = self._requests.get()
            if item is None:
                return
            step, staged, future = item
            try:
                raw = self._worker.run(staged, step)
            except Cancelled:
                future.set_exception(EvalError("evaluation cancelled by shutdown()"))
            except BaseException as exc:  # noqa: BLE001 - every failure must reach the caller
                future.set_exception(EvalError.from_exception(exc, "thread eval worker"))
            else:
                future.set_result(raw)

    def shutdown(self, timeout: float) -> None:
        self._worker.stop.set()
        self._requests.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return  # still inside an env step; it exits at the next step
        self._worker.close()
