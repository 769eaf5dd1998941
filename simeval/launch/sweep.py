"""Evaluate a source of checkpoints on up to K evaluators at once, each checkpoint exactly once.

The source (a :class:`~simeval.launch.sources.Watcher`, or one ``--checkpoint``)
hands out checkpoints in step order; each idle evaluator takes the next. A
result is appended to ``results.jsonl`` (whole, fsync'd) the moment it is in,
so with K > 1 lines arrive in completion order: readers sort by step (the
report does). Nothing measured waits in memory for a slower checkpoint, and a
restart skips every name already in the file (but the failed ones it retries,
see :mod:`simeval.launch.results`): after SIGTERM or a crash, the checkpoints
that were still running are evaluated again, the others never.
The metrics logger (whose dashboards, wandb's in particular, want steps in
order) gets each result once no lower step is still running.

``--until-step N`` ends the run once a checkpoint at or past N was taken and
its outcome is in, whatever it is (ok, failed, unreadable, refused); on a resume
that already reached it (``closing``), the run evaluates what is left below N
and ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import CheckpointError
from simeval.errors import EvalError
from simeval.launch.config import ConfigError
from simeval.launch.session import PlanBusy, error_kind
from simeval.launch.sources import Unreadable, checkpoint_name
from simeval.records import failed_record

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session
    from simeval.launch.sources import CheckpointSource

_TICK_S = 0.2


@dataclass
class _Running:
    ck: Any
    started: float
    attempt: int = 1  # how many times this checkpoint's evaluation was started, in this launch and before


class Sweep:
    """The dispatch loop: take checkpoints while evaluators are idle, record results as they finish."""

    def __init__(self, session: Session, log: ResultsLog, *, keep_going: bool) -> None:
        self.session = session
        self.log = log
        self.keep_going = keep_going
        self.cfg = session.cfg
        self.running: dict[int, _Running] = {}
        self.idle = list(range(session.slots))
        self.held: list[dict] = []  # recorded, not yet given to the logger
        self.waiting: Checkpoint | None = None  # taken, but needs another plan than the running evaluations'
        self.closing = False  # results.jsonl already reached --until-step (a resume)

    def run(self, source: CheckpointSource, closing: bool = False) -> int:
        """Evaluate every checkpoint ``source`` gives until it is done, ``--until-step`` or a signal; exit code 0.

        ``closing``: results.jsonl already has ``--until-step``'s checkpoint (a resume): evaluate what the
        source has below it now, then end.
        """
        stop = self.session.stop
        self.closing = closing
        closed = False  # --until-step reached: take nothing more
        next_scan = 0.0
        try:
            while not stop.is_set():
                more = not source.done or self.waiting is not None
                if self.idle and not closed and more and time.monotonic() >= next_scan:
                    closed = self._dispatch(source)
                    next_scan = time.monotonic() + self.cfg.poll_interval
                if self._collect():
                    next_scan = 0.0  # a worker is free: look for the next checkpoint at once
                self._publish()
                if not self.running and (closed or (source.done and self.waiting is None)):
                    if closed:
                        print(f"reached --until-step {self.cfg.until_step}; done.", flush=True)
                    return 0
                wait = _TICK_S if self.running or not next_scan else next_scan - time.monotonic()
                stop.wait(max(0.01, wait))
            where = f"{len(self.running)} running evaluation(s) abandoned, " if self.running else ""
            print(f"stopped by signal; {where}nothing partial written; results so far are in {self.log.path}")
            return 0
        finally:
            self._publish(everything=True)

    def _dispatch(self, source: CheckpointSource) -> bool:
        """Start checkpoints on idle evaluators; True once the run is closed by --until-step."""
        while self.idle:
            ck, self.waiting = self.waiting or source.take(), None
            if ck is None:
                return self.closing  # a resume past --until-step: nothing is left below it now
            step = ck.step
            if self.closing and reached(self.cfg.until_step, [step] if step is not None else []):
                return True  # the run already reached --until-step: nothing past it is evaluated
            if isinstance(ck, Unreadable):
                self._fail(ck.path, ck.error, step, "checkpoint")
            elif not self._start(ck):
                return False  # it waits for the running evaluations of another plan
            if reached(self.cfg.until_step, [step] if step is not None else []):
                return True
        return False

    def _start(self, ck: Checkpoint) -> bool:
        """Start ``ck`` on the first idle evaluator, or record why it cannot be; False when it must wait."""
        index = self.idle[0]
        name = checkpoint_name(ck.path, self.cfg.watch)
        try:
            attempt = self.session.start(ck, index, journal=lambda: self.log.attempt([name]))
        except PlanBusy:
            self.waiting = ck
            return False
        except ConfigError:
            raise  # the run's settings: no checkpoint could be evaluated
        except Exception as exc:  # noqa: BLE001 - CheckpointError, PlanError, ValueError, EvalError: recorded or raised
            self._failed(ck, exc)
            return True
        self.idle.pop(0)
        self.running[index] = _Running(ck, time.monotonic(), attempt)
        on = f" on worker {index}" if self.session.slots > 1 else ""
        print(f"evaluating {ck.path} (step {ck.step}){on} ...", flush=True)
        return True

    def _collect(self) -> bool:
        """Record every finished evaluation; True if an evaluator became idle."""
        freed = False
        for index, run in list(self.running.items()):
            try:
                result = self.session.poll(index)
            except EvalError as exc:
                result = exc
            if result is None:
                continue
            del self.running[index]
            self.idle.append(index)
            self.idle.sort()
            freed = True
            if isinstance(result, Exception):
                self._failed(run.ck, result)
                continue
            record = self.session.record_of(run.ck, result, time.monotonic() - run.started)
            record["attempts"] = run.attempt
            self.log.append(record, publish=False)
            self.held.append(record)
            print(summary(result, run.ck), flush=True)
        return freed

    def _publish(self, everything: bool = False) -> None:
        """Give the logger each recorded result once no lower step is still running."""
        lowest = min((r.ck.step for r in self.running.values()), default=None)
        self.held.sort(key=lambda r: r["step"])
        while self.held and (everything or lowest is None or self.held[0]["step"] <= lowest):
            self.log.publish(self.held.pop(0))

    def _failed(self, ck: Checkpoint, exc: BaseException) -> None:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not self.keep_going:
            if ck.path in message:
                raise exc
            raise CheckpointError(f"{ck.path}: {message}") from exc  # the one line names the file
        self._fail(ck.path, message, ck.step, error_kind(exc))

    def _fail(self, path: str, message: str, step: int | None, kind: str) -> None:
        name = checkpoint_name(path, self.cfg.watch)
        print(f"checkpoint {name} failed: {message}", flush=True)
        self.log.append(failed_record(path, message, step, name, kind))


def reached(until: int | None, steps: list[int]) -> bool:
    """Whether any of ``steps`` is at or past ``--until-step`` ``until`` (None: never)."""
    return until is not None and any(step >= until for step in steps)


def summary(result: dict, ck: Checkpoint) -> str:
    """The terminal table of one evaluation."""
    import os

    keys = ("reward", "reward_ci_low", "reward_ci_high", "reward_std", "episode_length", "num_episodes", "fps")
    keys += ("success_rate",)  # only when info_keys or the env's log entries give one
    rows = [f"{'checkpoint':<16}{os.path.basename(ck.path)} (step {ck.step})"]
    rows += [f"{k:<16}{float(result[f'eval/{k}']):.2f}" for k in keys if result.get(f"eval/{k}") is not None]
    return "\n".join(rows)
