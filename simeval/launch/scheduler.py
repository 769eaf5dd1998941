"""The launcher's one dispatch loop: a strategy's jobs -> the session's evaluator slots -> results lines.

Every run that evaluates checkpoints goes through :class:`Scheduler`, driving a
:class:`~simeval.strategies.Strategy` (what to evaluate next, when to stop): the fixed
evaluation (:class:`~simeval.strategies.FixedStrategy`: ``--checkpoint``, ``--watch``, a
suite; a plain run is a run of one nominal cell, :class:`~simeval.launch.cells.Nominal`) or
the look-by-look runs (:class:`~simeval.strategies.LookStrategy`: ``--until-decided``,
``--until-precise``). The scheduler owns what the strategies share: the
:class:`~simeval.launch.session.Session`'s slots, the attempts journal, the results files
(one per side: ``OUT`` or ``OUT/a`` and ``OUT/b``), the progress board, the summary, signals,
``--until-step`` and the watcher's unsettled files.

Each loop: take checkpoints from the run's source (a fixed run's: a
:class:`~simeval.launch.sources.Watcher`, or ``--checkpoint``'s one file) when a slot is idle
(or always, a suite's backlog), each bringing a job per cell not done yet; queue what the
strategy proposes; give each idle slot a job (of the cell it is built for first, of the side
it ran last first, so a backlog costs one env build per cell and A and B of other plans
rebuild it once a look); record each finished round as the strategy says (its
:class:`~simeval.strategies.Step`): an ok line (whole, fsync'd, built by
:mod:`simeval.launch.lines`) the moment it is in, or a look's lines together once all its
rounds are in. With K > 1 lines arrive in completion order: readers sort by step (the
report does). The metrics logger (whose dashboards, wandb's in particular, want steps in
order) gets each result once no lower step is still running.

Restart safety: a fixed run's resume (:func:`resume`) skips every job already in the file,
and the checkpoints whose newest line is the checkpoint's own (a plain run's lines, a file
that could not be read) are never taken again; the failed ones it retries are (see
:mod:`simeval.launch.results`). A look-by-look run replays its lines through the strategy
(:meth:`~simeval.strategies.LookStrategy.replay`). After SIGTERM or a crash the rounds that
were still running are evaluated again, the others never.

``--until-step N`` ends the run once a checkpoint at or past N was taken and its outcomes
are in, whatever they are (ok, failed, unreadable, refused); on a resume that already
reached it (``closing``), the run evaluates what is left below N and ends. A watched file
skipped because it was still being written is judged as the run ends
(:meth:`~simeval.launch.sources.Watcher.left`): evaluated if it is a checkpoint below N by
then, failed if it is unreadable, else an ``unsettled`` failed line that the next run reads
again by itself; so is each such file at a stop by signal.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import CheckpointError
from simeval.launch.cells import BoundsError
from simeval.launch.config import ConfigError
from simeval.launch.lines import Look, failed_line, ok_line, unsettled_line
from simeval.launch.progress import ProgressBoard
from simeval.launch.results import failures_line, resume_from
from simeval.launch.session import PlanBusy, error_kind, slot_key
from simeval.launch.sources import UNSETTLED, One, Unreadable, Unsettled, checkpoint_name
from simeval.launch.summary import RunSummary
from simeval.strategies import EpisodeError, Job, Step, Strategy

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session
    from simeval.launch.sources import CheckpointSource

_TICK_S = 0.2


class Scheduler:
    """The dispatch loop: queue the strategy's jobs, start them on idle slots, record outcomes as they finish.

    ``logs``: each side's results file (``""``: the run's one; ``"A"``, ``"B"``: a comparison's).
    """

    def __init__(self, session: Session, logs: dict[str, ResultsLog], strategy: Strategy) -> None:
        self.session, self.logs, self.strategy = session, logs, strategy
        self.cfg = session.cfg
        self.jobs: list[Job] = []
        self.running: dict[int, Job] = {}
        self.last: dict[int, str] = {}  # slot -> the side it evaluated last
        self.held: list[tuple[ResultsLog, dict]] = []  # recorded, not yet given to the logger
        self.closed = False  # --until-step reached: take no more checkpoints
        self.starved = False  # the source had no checkpoint at its last look: the run waits for one
        self.summary = RunSummary(video_dir=os.path.join(session.out, "videos") if self.cfg.video else None)
        self.board = ProgressBoard(run_total=None)  # each running evaluation's progress; the run's wait

    @property
    def log(self) -> ResultsLog:
        """The first side's results file (a fixed run's one)."""
        return next(iter(self.logs.values()))

    def run(self, source: CheckpointSource | None = None) -> int:
        """Evaluate every job until the strategy is finished (and ``source``, if any, is done), ``--until-step``
        or a signal. The exit code: 0."""
        stop = self.session.stop
        next_scan = 0.0
        try:
            while not stop.is_set():
                if source is not None and not self.closed and not source.done and time.monotonic() >= next_scan:
                    if self._wants():
                        self._take(source)
                        if isinstance(source, One) and self.board.run_total is None:
                            self.board.run_total = len(self.jobs)  # one checkpoint: the run's evaluations are known
                        next_scan = time.monotonic() + self.cfg.poll_interval
                self._propose()
                self._start_idle()
                if self._collect():
                    next_scan = 0.0  # a slot is free: look for the next checkpoint at once
                self._propose()
                self._publish()
                ended = source is None or self.closed or source.done or not self.strategy.accepting
                if source is not None and self.starved and not (self.running or self.jobs or ended) and self.cfg.watch:
                    self.board.waiting(self.cfg.watch, len(getattr(source, "seen", ())))
                if not self.running and not self.jobs and ended and self.strategy.finished:
                    if source is not None and self._left(source):
                        continue  # a file that settled since: its jobs run before the run ends
                    if self.closed:
                        print(f"reached --until-step {self.cfg.until_step}; done.", flush=True)
                    self.board.close()
                    print(self._end(), flush=True)
                    return 0
                wait = _TICK_S if self.running or self.jobs or not next_scan else next_scan - time.monotonic()
                stop.wait(max(0.01, wait))
            if source is not None:
                self._left(source, judge=False)
            where = f"{len(self.running)} running {self.strategy.noun} abandoned, " if self.running else ""
            print(f"stopped by signal; {where}nothing partial written; {self._saved()}", flush=True)
            if self.strategy.itemized:
                print(self.summary.render(retry=self.strategy.keep_going), flush=True)
            return 0
        finally:
            self.board.close()
            self._publish(everything=True)

    def _end(self) -> str:
        """What the run prints at its end: the summary of rounds, or the strategy's table."""
        if self.strategy.itemized:
            return self.summary.render(retry=self.strategy.keep_going)
        return self.strategy.table()

    def _saved(self) -> str:
        if not self.strategy.itemized:
            return "the same command resumes."
        return f"results so far are in {self.log.path}" if os.path.exists(self.log.path) else "no results written"

    def _idle(self) -> list[int]:
        return [i for i in range(len(self.session.slots)) if i not in self.running]

    def _wants(self) -> bool:
        """Whether to take checkpoints now: no job is queued, and a slot is idle (or the run queues its backlog)."""
        return self.strategy.accepting and not self.jobs and (self.strategy.backlog or bool(self._idle()))

    def _take(self, source: CheckpointSource) -> None:
        """Queue the jobs of the checkpoints the source has now: one per idle slot, or its backlog."""
        until, fixed = self.cfg.until_step, self.strategy
        while fixed.backlog or len(self.jobs) < len(self._idle()):
            ck = source.take()
            self.starved = ck is None
            if ck is None:
                self.closed = fixed.closing  # a resume past --until-step: nothing is left below it now
                return
            past = reached(until, [ck.step] if ck.step is not None else [])
            if past and fixed.closing:
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
        self.jobs.extend(self.strategy.jobs_for(ck, checkpoint_name(ck.path, self.cfg.watch)))

    def _propose(self) -> None:
        self.jobs.extend(self.strategy.propose())

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
        """Give each idle slot a job: one of the cell it is built for first (of the side it ran last first), else
        the oldest; a look's round gets its look's seed, so the slot's evaluator serves every look of the cell."""
        for index in self._idle():
            if not self.jobs:
                return
            built, last = self.session.slots[index].cell_key, self.last.get(index)
            mine = [j for j in self.jobs if slot_key(j.cell) == built]
            job = next((j for j in mine if j.side == last), mine[0] if mine else self.jobs[0])
            try:
                job.attempt = self.session.start(
                    job.ck,
                    index,
                    job.cell,
                    journal=lambda job=job: self.logs[job.side].attempt(list(job.key)),
                    seed=job.seed,
                )
            except PlanBusy:
                return  # it waits, first in line, for the running evaluations of another plan
            except ConfigError:
                raise  # the run's settings: no job could be evaluated
            except Exception as exc:  # noqa: BLE001 - CheckpointError, PlanError, ValueError, EvalError: recorded
                self.jobs.remove(job)
                self.last[index] = job.side
                self._failed(job, exc)
                continue
            self.jobs.remove(job)
            self.last[index] = job.side
            job.started = time.monotonic()
            self.running[index] = job
            if self.strategy.itemized:
                where = f" on worker {index}" if len(self.session.slots) > 1 else ""
                print(job.cell.started(job.ck, job.name, where), flush=True)
            evaluator = self.session.slots[index].evaluator
            if evaluator is not None:
                evaluator.set_on_progress(self.board.callback(index, job.cell.label(job.name)))

    def _collect(self) -> bool:
        """Record every finished round as the strategy says; True if a slot became idle."""
        freed = False
        for index, job, result in self.session.finished(self.running, self.board):
            freed = True
            if isinstance(result, Exception):
                self._failed(job, result)
                continue
            slot = dataclasses.replace(self.session.slots[index], evaluator=None)  # what built it, as it was
            self._apply(self.strategy.observe(job, result, time.monotonic() - job.started, slot))
        return freed

    def _apply(self, step: Step) -> None:
        """Write a step's lines (ok lines first, in order), then print its message."""
        for write in step.writes:
            job = write.job
            record = ok_line(
                self.cfg, job.ck, job.cell, write.result, seconds=write.seconds, attempts=job.attempt,
                slot=write.slot, with_plan=self.session.one_plan, look=Look(*write.look) if write.look else None,
            )  # fmt: skip
            record.update(write.fields)
            log = self.logs[job.side]
            log.append(record, publish=False)
            self.held.append((log, record))
            if self.strategy.itemized:
                self.summary.ok(job.cell.label(job.name), record)
                print(job.cell.finished(job.ck, job.name, write.result, record), flush=True)
        for failure in step.failures:
            job, exc = failure.job, failure.error
            if isinstance(exc, EpisodeError):
                exc = BoundsError(str(exc))  # recorded as a return outside the bounds is
            message = _first_line(exc)
            if not self.strategy.keep_going:
                if job.ck.path in message:
                    raise exc
                raise CheckpointError(f"{job.ck.path}: {message}") from exc  # the one line names the file
            if self.strategy.itemized:
                print(f"{job.cell.label(job.name)} failed: {message}", flush=True)
                wall = time.monotonic() - job.started if job.started else None
                self.summary.failed(job.cell.label(job.name), message, wall)
            context = {**job.cell.context(), **failure.fields}
            self.logs[job.side].append(
                failed_line(self.cfg, job.ck.path, message, job.ck.step, error_kind(exc), context)
            )
        if step.message is not None:
            print(step.message, flush=True)

    def _failed(self, job: Job, exc: BaseException) -> None:
        """Record why ``job`` could not be evaluated (as the strategy says), or raise it as the run's error."""
        self._apply(self.strategy.failed(job, exc))
        self.jobs = [j for j in self.jobs if self.strategy.wants(j)]

    def _publish(self, everything: bool = False) -> None:
        """Give the logger each recorded result once no lower step is still running."""
        lowest = min((j.ck.step for j in self.running.values()), default=None)
        self.held.sort(key=lambda held: held[1]["step"])
        while self.held and (everything or lowest is None or self.held[0][1]["step"] <= lowest):
            log, record = self.held.pop(0)
            log.publish(record)

    def _unreadable(self, ck: Unreadable) -> None:
        name = checkpoint_name(ck.path, self.cfg.watch)
        print(f"checkpoint {name} failed: {ck.error}", flush=True)
        self.summary.failed(f"checkpoint {name}", ck.error)
        self.log.append(failed_line(self.cfg, ck.path, ck.error, ck.step, "checkpoint", self.strategy.scope))

    def _unsettled(self, item: Unsettled) -> None:
        name = checkpoint_name(item.path, self.cfg.watch)
        print(f"checkpoint {name}: {UNSETTLED}; the next run reads it.", flush=True)
        self.summary.unsettled(f"checkpoint {name}", UNSETTLED)
        self.log.append(unsettled_line(self.cfg, item.path, item.step, self.strategy.scope))


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
