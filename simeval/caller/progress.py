"""How far a round is, for ``Evaluator(on_progress=...)``: the record, and the watcher that reads the backend.

While a round runs, :class:`RoundWatcher` reads the backend's progress channel
(:meth:`simeval.backends.base.Backend.progress`: the worker's counters, sent by
the child process or the Ray actors, or read in place by the thread backend) at
most every ``interval`` seconds and calls ``on_progress`` with a
:class:`Progress` when the counts changed, then once more when the round ended
well, with its final counts. The worker counts where its engines already
account episodes (once per batch), so a round runs no slower and no number
changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simeval.backends.base import Backend

logger = logging.getLogger("simeval.caller.evaluator")

PROGRESS_INTERVAL_S = 0.5
"""How often a running round's progress is read (and ``on_progress`` called, when it changed), at most."""


@dataclass(frozen=True)
class Progress:
    """How far one round is: what ``on_progress`` receives.

    Attributes:
        step: the round's training step (the one given to ``trigger_eval`` / ``evaluate``).
        episodes: complete episodes counted so far (at most ``total``).
        total: the round's episode count; None when not known.
        env_steps: env steps taken so far (every sub-env's, all shards').
        seconds: since the round was started.
        done: True on the last call of a round (its result is in).
    """

    step: int
    episodes: int
    total: int | None
    env_steps: int
    seconds: float
    done: bool = False


class RoundWatcher:
    """Calls ``on_progress`` for each round a backend runs; calls never overlap.

    Args:
        backend: the backend whose :meth:`~simeval.backends.base.Backend.progress` is read.
        on_progress: the user's callback (its exceptions are logged, never raised).
        interval: the least time between two reads.
    """

    def __init__(
        self, backend: Backend, on_progress: Callable[[Progress], Any], interval: float = PROGRESS_INTERVAL_S
    ) -> None:
        self.backend, self.on_progress, self.interval = backend, on_progress, interval
        self._lock = threading.Lock()

    def watch(self, step: int, future: Future) -> None:
        """Watch the round of ``step`` that ``future`` completes, on a daemon thread of its own."""
        thread = threading.Thread(
            target=self._watch, args=(step, future, time.monotonic()), name="simeval-progress", daemon=True
        )
        thread.start()

    def _watch(self, step: int, future: Future, started: float) -> None:
        last = None
        while not wait_for([future], timeout=self.interval).done:
            try:
                now = self.backend.progress()
            except Exception:  # noqa: BLE001 - a progress read must never fail a round
                logger.debug("progress read failed", exc_info=True)
                now = None
            if now is not None and now != last:
                last = now
                episodes, total, env_steps = now
                self._call(Progress(step, min(episodes, total), total, env_steps, time.monotonic() - started))
        if future.cancelled() or future.exception() is not None:
            return
        raw = future.result()
        if not isinstance(raw, dict):
            return
        count = len(raw.get("episode_returns") or ()) or int(raw.get("num_episodes") or 0)
        env_steps = int(raw.get("frame_count") or (last[2] if last else 0))
        self._call(Progress(step, count, count, env_steps, time.monotonic() - started, done=True))

    def _call(self, progress: Progress) -> None:
        with self._lock:
            try:
                self.on_progress(progress)
            except Exception:  # noqa: BLE001 - a callback bug must not stop evaluation
                logger.exception("Evaluator on_progress callback failed; evaluation goes on")
