"""What a launcher run shows while it evaluates: episodes done of total, env-steps/s and an ETA per evaluation.

:class:`ProgressBoard` takes each running evaluation's
:class:`~simeval.caller.progress.Progress` (``Evaluator.set_on_progress``) and
shows it: on a terminal a live bar per running evaluation (rich, imported here
only when stdout is one); elsewhere (a Slurm log, a pipe) one plain line per
running evaluation every :data:`LINE_INTERVAL_S` seconds. Where the total is
known, a line has an ETA; where it is not (a round's count not known yet), counts
and rates only. While a ``--watch`` run waits it says so every
:data:`WAIT_INTERVAL_S` seconds, not at every poll.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simeval.caller.progress import Progress

LINE_INTERVAL_S = float(os.environ.get("SIMEVAL_PROGRESS_INTERVAL_S", "10"))
"""Seconds between two plain progress lines of one evaluation (stdout not a terminal);
the environment variable ``SIMEVAL_PROGRESS_INTERVAL_S`` sets it."""
WAIT_INTERVAL_S = 30.0
"""Seconds between two "waiting for checkpoints" lines."""


def rate_and_eta(progress: Progress) -> tuple[float | None, float | None]:
    """(env-steps per second, seconds left) of ``progress``; None where it cannot be told yet."""
    rate = progress.env_steps / progress.seconds if progress.seconds > 0 and progress.env_steps else None
    eta = None
    if progress.total and progress.episodes and progress.seconds > 0:
        eta = progress.seconds * (progress.total - progress.episodes) / progress.episodes
    return rate, eta


def describe(label: str, progress: Progress) -> str:
    """One plain line: ``LABEL: 8/16 episodes, 12,345 env-steps/s, ETA 0:12`` (no ETA without a total)."""
    total = f"/{progress.total}" if progress.total is not None else ""
    rate, eta = rate_and_eta(progress)
    parts = [f"{progress.episodes}{total} episodes", f"{progress.env_steps:,} env-steps"]
    if rate is not None:
        parts.append(f"{rate:,.0f} env-steps/s")
    parts.append(f"{clock(progress.seconds)} elapsed")
    if eta is not None:
        parts.append(f"ETA {clock(eta)}")
    return f"{label}: " + ", ".join(parts)


def clock(seconds: float) -> str:
    """``M:SS`` or ``H:MM:SS``."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class _Running:
    label: str
    last_line: float
    bar: Any = None  # the rich task id, on a terminal


class ProgressBoard:
    """The run's progress display (see the module docstring).

    Args:
        stream: where lines go (default: stdout).
        live: a live bar (default: whether ``stream`` is a terminal).
        interval: seconds between two plain lines of one evaluation.
        wait_interval: seconds between two "waiting for checkpoints" lines.
        run_total: evaluations the run will make, where known (an ETA of the run is shown then).
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        live: bool | None = None,
        interval: float = LINE_INTERVAL_S,
        wait_interval: float = WAIT_INTERVAL_S,
        run_total: int | None = None,
    ) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.interval, self.wait_interval = interval, wait_interval
        self.run_total, self.run_done = run_total, 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._running: dict[Any, _Running] = {}
        self._next_wait = 0.0
        self._bars: Any = None  # rich.progress.Progress, started with the first bar

    def callback(self, key: Any, label: str) -> Callable[[Progress], None]:
        """The ``on_progress`` of evaluation ``key`` (a slot), shown as ``label``; replaces that key's last one."""
        self.finished(key, count=False)
        with self._lock:
            self._running[key] = _Running(label, time.monotonic())
        return lambda progress: self._show(key, progress)

    def _show(self, key: Any, progress: Progress) -> None:
        with self._lock:
            entry = self._running.get(key)
            if entry is None or progress.done:
                return
            if self.live:
                self._bar(entry, progress)
                return
            now = time.monotonic()
            if now - entry.last_line < self.interval:
                return
            entry.last_line = now
            line = describe(entry.label, progress) + self._run_part()
        print(line, file=self.stream, flush=True)

    def _run_part(self) -> str:
        """``; run: 2/8 evaluations done, ETA 1:02`` where the run's total is known, else its count alone."""
        if self.run_total is None:
            return f"; run: {self.run_done} evaluation(s) done" if self.run_done else ""
        part = f"; run: {self.run_done}/{self.run_total} evaluations done"
        if self.run_done:
            elapsed = time.monotonic() - self.started
            part += f", ETA {clock(elapsed * (self.run_total - self.run_done) / self.run_done)}"
        return part

    def _bar(self, entry: _Running, progress: Progress) -> None:
        if self._bars is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("episodes {task.fields[rate]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bars.start()
        rate, _ = rate_and_eta(progress)
        shown = f"{rate:,.0f} env-steps/s" if rate is not None else ""
        if entry.bar is None:
            entry.bar = self._bars.add_task(entry.label, total=progress.total, rate=shown)
        self._bars.update(entry.bar, completed=progress.episodes, total=progress.total, rate=shown)

    def finished(self, key: Any, count: bool = True) -> None:
        """Evaluation ``key`` ended (``count``: it counts as one of the run's evaluations): its bar goes."""
        with self._lock:
            entry = self._running.pop(key, None)
            if entry is not None and entry.bar is not None and self._bars is not None:
                self._bars.remove_task(entry.bar)
            if count and entry is not None:
                self.run_done += 1

    def waiting(self, directory: str, seen: int) -> None:
        """Say the run waits for checkpoints in ``directory`` (``seen`` so far): at most every ``wait_interval``."""
        now = time.monotonic()
        if now < self._next_wait:
            return
        self._next_wait = now + self.wait_interval
        print(f"waiting for checkpoints in {directory} ({seen} seen)", file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the live display (its bars vanish; the lines printed stay)."""
        with self._lock:
            bars, self._bars = self._bars, None
            self._running.clear()
        if bars is not None:
            bars.stop()
