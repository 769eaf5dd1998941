"""The launcher's one pipeline: a source of weights x cells -> jobs -> evaluator slots -> one record builder.

Every run that evaluates checkpoints goes through :class:`Pipeline`: a plain run
(``--checkpoint``, ``--watch``) is a run of one nominal cell
(:class:`~simeval.launch.cells.Nominal`), a suite run (``--suite``) one of the
suite's cells. The source (a :class:`~simeval.launch.sources.Watcher`, or
``--checkpoint``'s one file) hands out checkpoints in step order; each brings a
job per cell not done yet; each idle slot of the :class:`~simeval.launch.session.Session`
takes the next job (one of the cell it is built for first, so a backlog costs one
env build per cell). A result is appended to ``results.jsonl`` (whole, fsync'd,
built by :mod:`simeval.launch.lines`) the moment it is in, so with K > 1 lines
arrive in completion order: readers sort by step (the report does). The metrics
logger (whose dashboards, wandb's in particular, want steps in order) gets each
result once no lower step is still running.

Restart safety: a resume (:func:`resume`) skips every job already in the file,
and the checkpoints whose newest line is the checkpoint's own (a plain run's
lines, a file that could not be read) are never taken again; the failed ones it
retries are (see :mod:`simeval.launch.results`). After SIGTERM or a crash the
jobs that were still running are evaluated again, the others never.

``--until-step N`` ends the run once a checkpoint at or past N was taken and its
outcomes are in, whatever they are (ok, failed, unreadable, refused); on a resume
that already reached it (``closing``), the run evaluates what is left below N and
ends. A watched file skipped because it was still being written is judged as the run
ends (:meth:`~simeval.launch.sources.Watcher.left`): evaluated if it is a checkpoint
below N by then, failed if it is unreadable, else an ``unsettled`` failed line that the
next run reads again by itself; so is each such file at a stop by signal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import CheckpointError
from simeval.launch.cells import BoundsError
from simeval.launch.config import ConfigError
from simeval.launch.lines import failed_line, ok_line, unsettled_line
from simeval.launch.progress import ProgressBoard
from simeval.launch.results import failures_line, resume_from
from simeval.launch.session import PlanBusy, error_kind
from simeval.launch.sources import UNSETTLED, One, Unreadable, Unsettled, checkpoint_name
from simeval.launch.summary import RunSummary

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.cells import JobCell
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session
    from simeval.launch.sources import CheckpointSource

_TICK_S = 0.2


@dataclass
class Job:
    """One evaluation: a checkpoint on a cell."""

    ck: Any
    cell: JobCell
    name: str
    started: float = 0.0
    attempt: int = 1  # how many times this evaluation was started, in this launch and before

    @property
    def key(self) -> tuple:
        """(checkpoint name, *cell key): what a resume skips and the attempts journal counts."""
        return (self.name, *self.cell.key)


@dataclass
class Jobs:
    """What a run's jobs are: the cells of each checkpoint, and what is done already."""

    cells_for: Callable[[Checkpoint, str], list]
    """The cells of a checkpoint (its name given); empty when none fits it (the function says why)."""
    done: set = field(default_factory=set)
    """Job keys a resume does not evaluate again."""
    scope: dict = field(default_factory=dict)
    """The fields of a line about a whole checkpoint file (a suite's name)."""
    noun: str = "evaluation(s)"
    """What the stop message calls the running jobs."""
    backlog: bool = False
    """Queue every checkpoint the source has now (a suite: each slot finds jobs of its own cell)."""
    keep_going: bool = True
    """Record a failed job and go on; False: it is the run's error (``--checkpoint`` alone: exit 2)."""
    closing: bool = False
    """results.jsonl already reached ``--until-step`` (a resume)."""


class Pipeline:
    """The dispatch loop: queue jobs, start them on idle slots, record outcomes as they finish."""

    def __init__(self, session: Session, log: ResultsLog, jobs: Jobs) -> None:
        self.session, self.log, self.spec = session, log, jobs
        self.cfg = session.cfg
        self.jobs: list[Job] = []
        self.running: dict[int, Job] = {}
        self.held: list[dict] = []  # recorded, not yet given to the logger
        self.closed = False  # --until-step reached: take no more checkpoints
        self.starved = False  # the source had no checkpoint at its last look: the run waits for one
        self.summary = RunSummary(video_dir=os.path.join(session.out, "videos") if self.cfg.video else None)
        self.board = ProgressBoard(run_total=None)  # each running evaluation's progress; the run's wait

    def run(self, source: CheckpointSource) -> int:
        """Evaluate every job of every checkpoint ``source`` gives, until it is done, ``--until-step`` or a signal.

        The exit code: 0.
        """
        stop = self.session.stop
        next_scan = 0.0
        try:
            while not stop.is_set():
                if not self.closed and not source.done and time.monotonic() >= next_scan and self._wants():
                    self._take(source)
                    if isinstance(source, One) and self.board.run_total is None:
                        self.board.run_total = len(self.jobs)  # one checkpoint: the run's evaluations are known
                    next_scan = time.monotonic() + self.cfg.poll_interval
                self._start_idle()
                if self._collect():
                    next_scan = 0.0  # a slot is free: look for the next checkpoint at once
                self._publish()
                if self.starved and not (self.running or self.jobs or self.closed or source.done) and self.cfg.watch:
                    self.board.waiting(self.cfg.watch, len(getattr(source, "seen", ())))
                if not self.running and not self.jobs and (self.closed or source.done):
                    if self._left(source):
                        continue  # a file that settled since: its jobs run before the run ends
                    if self.closed:
                        print(f"reached --until-step {self.cfg.until_step}; done.", flush=True)
                    print(self.summary.render(retry=self.spec.keep_going), flush=True)
                    return 0
                wait = _TICK_S if self.running or self.jobs or not next_scan else next_scan - time.monotonic()
                stop.wait(max(0.01, wait))
            self._left(source, judge=False)
            where = f"{len(self.running)} running {self.spec.noun} abandoned, " if self.running else ""
            saved = f"results so far are in {self.log.path}" if os.path.exists(self.log.path) else "no results written"
            print(f"stopped by signal; {where}nothing partial written; {saved}")
            print(self.summary.render(retry=self.spec.keep_going), flush=True)
            return 0
        finally:
            self.board.close()
            self._publish(everything=True)

    def _idle(self) -> list[int]:
        return [i for i in range(len(self.session.slots)) if i not in self.running]

    def _wants(self) -> bool:
        """Whether to take checkpoints now: no job is queued, and a slot is idle (or the run queues its backlog)."""
        return not self.jobs and (self.spec.backlog or bool(self._idle()))

    def _take(self, source: CheckpointSource) -> None:
        """Queue the jobs of the checkpoints the source has now: one per idle slot, or its backlog."""
        until = self.cfg.until_step
        while self.spec.backlog or len(self.jobs) < len(self._idle()):
            ck = source.take()
            self.starved = ck is None
            if ck is None:
                self.closed = self.spec.closing  # a resume past --until-step: nothing is left below it now
                return
            past = reached(until, [ck.step] if ck.step is not None else [])
            if past and self.spec.closing:
                self.closed = True  # the run already reached --until-step: nothing past it is evaluated
                return
            if isinstance(ck, Unreadable):
                self._unreadable(ck)
            else:
                self._queue(ck)
            if past:
                self.closed = True
                return

    def _queue(self, ck: Checkpoint) -> None:
        """Queue the jobs of ``ck`` not done yet."""
        name = checkpoint_name(ck.path, self.cfg.watch)
        cells = self.spec.cells_for(ck, name)
        self.jobs.extend(Job(ck, c, name) for c in cells if (name, *c.key) not in self.spec.done)

    def _left(self, source: CheckpointSource, judge: bool = True) -> bool:
        """Record the files the source saw being written and never handed out; True if jobs of some are queued."""
        for item in source.left(self.cfg.until_step, judge):
            if isinstance(item, Unsettled):
                self._unsettled(item)
            elif isinstance(item, Unreadable):
                self._unreadable(item)
            else:
                self._queue(item)
        return bool(self.jobs)

    def _start_idle(self) -> None:
        """Give each idle slot a job: one of the cell it is built for first, else the oldest."""
        for index in self._idle():
            if not self.jobs:
                return
            built = self.session.slots[index].cell_key
            job = next((j for j in self.jobs if j.cell.key == built), self.jobs[0])
            try:
                job.attempt = self.session.start(
                    job.ck, index, job.cell, journal=lambda job=job: self.log.attempt(list(job.key))
                )
            except PlanBusy:
                return  # it waits, first in line, for the running evaluations of another plan
            except ConfigError:
                raise  # the run's settings: no job could be evaluated
            except Exception as exc:  # noqa: BLE001 - CheckpointError, PlanError, ValueError, EvalError: recorded
                self.jobs.remove(job)
                self._failed(job, exc)
                continue
            self.jobs.remove(job)
            job.started = time.monotonic()
            self.running[index] = job
            where = f" on worker {index}" if len(self.session.slots) > 1 else ""
            print(job.cell.started(job.ck, job.name, where), flush=True)
            evaluator = self.session.slots[index].evaluator
            if evaluator is not None:
                evaluator.set_on_progress(self.board.callback(index, job.cell.label(job.name)))

    def _collect(self) -> bool:
        """Record every finished evaluation; True if a slot became idle."""
        freed = False
        for index, job, result in self.session.finished(self.running, self.board):
            freed = True
            if isinstance(result, Exception):
                self._failed(job, result)
                continue
            try:
                job.cell.check(result)  # a return outside the suite's declared bounds: the cell fails
            except BoundsError as exc:
                self._failed(job, exc)
                continue
            record = ok_line(
                self.cfg,
                job.ck,
                job.cell,
                result,
                seconds=time.monotonic() - job.started,
                attempts=job.attempt,
                slot=self.session.slots[index],
                with_plan=self.session.one_plan,
            )
            self.log.append(record, publish=False)
            self.held.append(record)
            self.spec.done.add(job.key)
            self.summary.ok(job.cell.label(job.name), record)
            print(job.cell.finished(job.ck, job.name, result, record), flush=True)
        return freed

    def _publish(self, everything: bool = False) -> None:
        """Give the logger each recorded result once no lower step is still running."""
        lowest = min((j.ck.step for j in self.running.values()), default=None)
        self.held.sort(key=lambda r: r["step"])
        while self.held and (everything or lowest is None or self.held[0]["step"] <= lowest):
            self.log.publish(self.held.pop(0))

    def _failed(self, job: Job, exc: BaseException) -> None:
        """Record why ``job`` could not be evaluated, or raise it as the run's error."""
        message = _first_line(exc)
        if not self.spec.keep_going:
            if job.ck.path in message:
                raise exc
            raise CheckpointError(f"{job.ck.path}: {message}") from exc  # the one line names the file
        print(f"{job.cell.label(job.name)} failed: {message}", flush=True)
        wall = time.monotonic() - job.started if job.started else None
        self.summary.failed(job.cell.label(job.name), message, wall)
        self.log.append(failed_line(self.cfg, job.ck.path, message, job.ck.step, error_kind(exc), job.cell.context()))
        self.spec.done.add(job.key)

    def _unreadable(self, ck: Unreadable) -> None:
        name = checkpoint_name(ck.path, self.cfg.watch)
        print(f"checkpoint {name} failed: {ck.error}", flush=True)
        self.summary.failed(f"checkpoint {name}", ck.error)
        self.log.append(failed_line(self.cfg, ck.path, ck.error, ck.step, "checkpoint", self.spec.scope))

    def _unsettled(self, item: Unsettled) -> None:
        name = checkpoint_name(item.path, self.cfg.watch)
        print(f"checkpoint {name}: {UNSETTLED}; the next run reads it.", flush=True)
        self.summary.unsettled(f"checkpoint {name}", UNSETTLED)
        self.log.append(unsettled_line(self.cfg, item.path, item.step, self.spec.scope))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def reached(until: int | None, steps: list[int]) -> bool:
    """Whether any of ``steps`` is at or past ``--until-step`` ``until`` (None: never)."""
    return until is not None and any(step >= until for step in steps)


@dataclass
class Resumed:
    """What a restart finds in results.jsonl for this run."""

    done: set
    """Job keys not evaluated again: (name, *cell key) of cell lines, (name,) of checkpoint lines."""
    seen: set
    """Checkpoint names not taken again: their newest line is the checkpoint's own, and it is not retried."""
    closing: bool
    """Those lines reached ``--until-step``."""


def resume(log: ResultsLog, retry_failed: bool, until_step: int | None, suite: str | None = None) -> Resumed:
    """Sort the lines of ``log`` for a restart of the run (``suite``: a suite run's, by its name); say what it found.

    The newest line of each job decides (see :func:`simeval.launch.results.resume_from`); a checkpoint whose
    newest line names no cell (a plain run's line, a file that could not be read) is done or retried whole.
    """
    lines = [r for r in log.records() if "checkpoint_name" in r and (suite is None or r.get("suite") == suite)]
    files = resume_from(lines, lambda r: r["checkpoint_name"], retry_failed)
    jobs = resume_from(lines, _cell_key, retry_failed)
    whole = {name for name, r in files.newest.items() if "task" not in r}
    seen = whole & files.done
    done = len(jobs.done) if suite is not None else len(seen)
    if done:
        noun = "cell evaluation(s)" if suite is not None else "checkpoint(s)"
        print(f"resuming: {done} {noun} already in {log.path}", flush=True)
    failed_jobs, failed_files = bool(jobs.retried or jobs.left), bool(whole & (files.retried | files.left))
    noun = "evaluation(s)" if failed_jobs and failed_files else "cell evaluation(s)" if failed_jobs else "checkpoint(s)"
    retried, left = len(jobs.retried) + len(whole & files.retried), len(jobs.left) + len(whole & files.left)
    line = failures_line(noun, retried, left, retry_failed)
    if line:
        print(line, flush=True)
    steps = [files.newest[n]["step"] for n in seen if files.newest[n].get("step") is not None]
    return Resumed(jobs.done | {(n,) for n in seen}, seen, reached(until_step, steps))


def _cell_key(record: dict[str, Any]) -> tuple | None:
    """A cell line's job key (checkpoint name, task, condition); None for a line about a whole checkpoint."""
    return (record["checkpoint_name"], record["task"], record["condition"]) if "task" in record else None
