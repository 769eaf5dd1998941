"""The front's request machinery: busy policy, queue, ordered delivery, on_result.

Shared by :class:`simeval.Evaluator`, :func:`simeval.connect` handles and
:class:`simeval.RayEvalWorker`. One request runs on the backend at a time;
each carries a Future the backend always completes, so every failure reaches
``evaluate``, ``wait`` or ``poll`` and nothing stays pending.

Ordering: results are handed out in the order their rounds ran, and only
after their ``on_result`` returned. ``on_result`` runs on one delivery thread,
one result at a time. As soon as a round's result is in, the next queued
request starts and the front counts as idle for ``trigger_eval`` (so
``on_result`` may chain the next round), but ``pending`` stays True until
the result is delivered.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simeval.backends.base import Backend, cancelled, complete
from simeval.caller.progress import Progress, RoundWatcher
from simeval.errors import EvalError, WorkerLost

if TYPE_CHECKING:
    from simeval.caller.round_timeout import Deadline

logger = logging.getLogger("simeval.caller.evaluator")

BUSY_POLICIES = ("error", "queue", "skip")
_WAITING = object()


def check_busy_policy(busy_policy: str) -> None:
    """A ValueError unless ``busy_policy`` is one of ``BUSY_POLICIES``."""
    if busy_policy not in BUSY_POLICIES:
        raise ValueError(f"Unknown busy_policy {busy_policy!r}. Choose 'error', 'queue' or 'skip'.")


@dataclass(eq=False)
class Request:
    """One evaluation asked for: its step, weights, whether a caller waits for it, and its outcome."""

    step: int
    weights: Mapping[str, Any] | None
    sync: bool
    overrides: Any = None  # RoundOverrides for the worker
    tag: Any = None  # the front end's own note, read by its finalize
    future: Future = field(default_factory=Future)
    outcome: Any = _WAITING  # the finalized result, or the EvalError
    delivered: bool = False  # on_result has returned (or was not due)
    timer: threading.Timer | None = None  # its deadline, while it runs


class RequestQueue:
    """Admits requests under the busy policy, runs them one at a time, delivers results in order.

    ``finalize(raw, request)`` turns a backend's raw metrics into what callers
    receive; ``on_result(result)`` is called on the delivery thread before the
    result is handed out (its exceptions are logged, never raised).
    ``prepare(request)`` is called just before a request starts on the backend
    (after the previous request was finalized), and may set its ``overrides``.
    ``deadline(request)``, called right after it, gives the round's
    :class:`~simeval.caller.round_timeout.Deadline` (None: no limit): a round still
    running past it fails with a :class:`~simeval.errors.WorkerLost` saying so,
    and the backend replaces its worker before the next request starts.
    ``on_progress(progress)`` (a :class:`~simeval.caller.progress.Progress`) is called
    while a round runs, at most twice a second, and once at its end (see
    :class:`~simeval.caller.progress.RoundWatcher`).
    """

    def __init__(
        self,
        backend: Backend,
        finalize: Callable[[dict, Request], Any],
        on_result: Callable[[Any], None] | None = None,
        busy_policy: str = "error",
        prepare: Callable[[Request], None] | None = None,
        deadline: Callable[[Request], Deadline | None] | None = None,
        on_progress: Callable[[Progress], Any] | None = None,
    ) -> None:
        check_busy_policy(busy_policy)
        self.backend = backend
        self._watcher = RoundWatcher(backend, on_progress) if on_progress is not None else None
        self._prepare = prepare
        self._deadline = deadline
        self.busy_policy = busy_policy
        self._finalize = finalize
        self._on_result = on_result
        self._cond = threading.Condition()
        self._queue: deque[Request] = deque()
        self._ready: deque[Any] = deque()
        self._current: Request | None = None
        self._undelivered = 0
        self._closed = False
        self._step_counter = 0
        self._deliveries: queue.SimpleQueue = queue.SimpleQueue()
        self._delivery_thread: threading.Thread | None = None

    # -- admitting ----------------------------------------------------------
    def submit(
        self,
        sources: Callable[[], Mapping[str, Any] | None],
        step: int | None,
        *,
        sync: bool,
        overrides: Any = None,
        tag: Any = None,
        busy_message: str = "Evaluation already pending. Wait for completion or set busy_policy='queue' (or 'skip').",
    ) -> Request | None:
        """Start the request now if idle, else queue it (with a private copy of the weights).

        ``sources()`` gives the weights; it is not called when ``busy_policy="skip"``
        drops the request (None is returned). The busy check and the admission are
        one atomic step, so two callers can never both pass an ``error``/``skip`` check.
        """
        with self._cond:
            if self._closed:
                raise RuntimeError("this Evaluator was shut down; create a new one.")
            busy = self._current is not None or bool(self._queue)
            if busy and self.busy_policy == "error":
                raise RuntimeError(busy_message)
            if busy and self.busy_policy == "skip" and not sync:
                return None
            weights = sources()
            request = Request(self._next_step(step), None, sync=sync, overrides=overrides, tag=tag)
            if busy:
                from simeval.weights import snapshot

                request.weights = snapshot(weights) if weights else None
                self._queue.append(request)
            else:
                request.weights = weights
                self._current = request
        if not busy:
            self._launch(request)
        return request

    def set_on_progress(self, on_progress: Callable[[Progress], Any] | None) -> None:
        """Call ``on_progress`` for the rounds from now on, and for the running one (None: no longer)."""
        self.backend.want_progress()
        with self._cond:
            self._watcher = RoundWatcher(self.backend, on_progress) if on_progress is not None else None
            current = self._current
        if self._watcher is not None and current is not None and not current.future.done():
            self._watcher.watch(current.step, current.future)

    def _next_step(self, step: int | None) -> int:
        if step is not None:
            return int(step)
        step, self._step_counter = self._step_counter, self._step_counter + 1
        return step

    def _launch(self, request: Request) -> None:
        request.future.add_done_callback(lambda fut, req=request: self._settle_future(req, fut))
        try:
            if self._prepare is not None:
                self._prepare(request)
            self._arm(request)
            if self._watcher is not None:
                self._watcher.watch(request.step, request.future)
            self.backend.start(request.step, request.weights, request.future, request.overrides)
        except BaseException as exc:  # noqa: BLE001 - e.g. weights that do not fit
            complete(
                request.future, exc=exc if isinstance(exc, EvalError) else EvalError(f"{type(exc).__name__}: {exc}")
            )
        request.weights = None

    def _arm(self, request: Request) -> None:
        """Start the round's timer, if it has a deadline; it is cancelled as soon as the round ends."""
        deadline = self._deadline(request) if self._deadline is not None else None
        if deadline is None:
            return
        timer = threading.Timer(deadline.seconds, self._time_out, args=(request, deadline.message))
        timer.name, timer.daemon = "simeval-round-timer", True
        request.timer = timer
        timer.start()
        request.future.add_done_callback(lambda _fut: timer.cancel())

    def _time_out(self, request: Request, message: str) -> None:
        """The round overran its deadline: the backend replaces its worker, then fails it with ``message``."""
        self.backend.time_out(request.future, WorkerLost(message))

    # -- settling and delivering ---------------------------------------------
    def _settle_future(self, request: Request, future: Future) -> None:
        exc = future.exception()
        try:
            outcome: Any = exc if exc is not None else self._finalize(future.result(), request)
        except Exception as err:  # noqa: BLE001 - e.g. a metrics value torch cannot hold
            outcome = EvalError.from_exception(err, "formatting the result")
        self._settle(request, outcome)

    def _settle(self, request: Request, outcome: Any) -> None:
        """Record a request's outcome (once), start the next queued one, queue the delivery."""
        with self._cond:
            if request.outcome is not _WAITING:
                return
            request.outcome = outcome
            self._undelivered += 1
            nxt = None
            if self._current is request:
                nxt = self._queue.popleft() if (self._queue and not self._closed) else None
                self._current = nxt
            if self._delivery_thread is None:
                self._delivery_thread = threading.Thread(
                    target=self._deliver_loop, name="simeval-delivery", daemon=True
                )
                self._delivery_thread.start()
            self._deliveries.put(request)
        if nxt is not None:
            self._launch(nxt)

    def _deliver_loop(self) -> None:
        while True:
            request = self._deliveries.get()
            if request is None:
                return
            outcome = request.outcome
            if self._on_result is not None and not isinstance(outcome, BaseException):
                try:
                    self._on_result(outcome)
                except Exception:  # noqa: BLE001 - a callback bug must not stop evaluation
                    logger.exception("Evaluator on_result callback failed; evaluation goes on")
            with self._cond:
                request.delivered = True
                if not request.sync:
                    self._ready.append(outcome)
                self._undelivered -= 1
                self._cond.notify_all()

    def in_callback(self) -> bool:
        """True on the delivery thread, i.e. inside ``on_result``."""
        return threading.current_thread() is self._delivery_thread

    # -- handing out ------------------------------------------------------------
    def result_of(self, request: Request) -> Any:
        """Block until ``request`` (a synchronous one) is delivered; its result, or raise its error."""
        with self._cond:
            self._cond.wait_for(lambda: request.delivered)
        if isinstance(request.outcome, BaseException):
            raise request.outcome
        return request.outcome

    def poll(self, timeout: float = 0) -> Any:
        """The next delivered result, waiting up to ``timeout`` seconds; None if there is none (raises a failure)."""
        if timeout and timeout > 0:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._ready), timeout)
        return self._pop_ready()

    def wait(self, timeout: float | None = None) -> Any:
        """The next delivered result once one is in or nothing is pending (None then); raises a failure."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._ready) or not self._pending(), timeout)
        return self._pop_ready()

    def _pop_ready(self) -> Any:
        with self._cond:
            if not self._ready:
                return None
            outcome = self._ready.popleft()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _pending(self) -> bool:
        return self._current is not None or bool(self._queue) or self._undelivered > 0

    @property
    def pending(self) -> bool:
        """Whether a request is running, queued or not yet delivered."""
        with self._cond:
            return self._pending()

    # -- shutting down ------------------------------------------------------------
    def shutdown(self, timeout: float) -> None:
        """Cancel queued and running requests, stop the backend, deliver what is settled."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._closed:
                return
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
            running = self._current
        if running is not None and running.timer is not None:
            running.timer.cancel()  # shutdown ends the round: its timer must not outlive the evaluator
        for request in queued:
            self._settle(request, cancelled())
        self.backend.shutdown(timeout)
        with self._cond:
            current = self._current
        if current is not None:  # the backend did not complete it in time
            self._settle(current, cancelled())
        with self._cond:
            thread = self._delivery_thread
        if thread is not None:
            self._deliveries.put(None)
            if thread is not threading.current_thread():
                thread.join(max(0.1, deadline - time.monotonic()))
