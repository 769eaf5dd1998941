"""``--suite FILE``: every checkpoint x cell evaluated exactly once, restart-safe, over K evaluators.

Checkpoints come from the usual source (``--checkpoint`` or ``--watch``). Each
one brings a job per cell of the suite whose task is the checkpoint's env (a
checkpoint that records no env gets every cell). An evaluator is built for one
cell (its env carries the cell's condition) and one plan (the checkpoint's
policy); an idle one takes a job of its own cell first and is rebuilt for another
cell (or a checkpoint of another plan) only when none is left, so a backlog of
checkpoints costs one env build per cell. ``--workers K`` (Ray)
runs K cells at once. Every outcome is one results.jsonl line, appended and
fsync'd as it comes in; a restart skips every (checkpoint, task, condition)
already there, so nothing measured is run twice and nothing is lost. The newest
line of a cell decides: a failed one is evaluated again when it says
``retry: "resume"`` (a lost worker) or with ``--retry-failed`` (see
:mod:`simeval.launch.results`); so is a checkpoint recorded as unreadable.
``--until-step N`` ends the run once a checkpoint at or past N was taken, its
cells' outcomes (or its failure to load) recorded.

A cell's numbers depend only on the checkpoint and the cell (task, condition,
seed, num_envs, episodes, max_steps): not on the order, the worker or K.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.backends.ray_slots import check_capacity, ensure_ray
from simeval.checkpoints import load_checkpoint
from simeval.envs import check_env
from simeval.errors import EvalError
from simeval.launch.build import checkpoint_fields, make_evaluator, record_context
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError
from simeval.launch.plan import plan_for
from simeval.launch.results import failures_line, resume_from
from simeval.launch.session import error_kind
from simeval.launch.sources import One, Unreadable, Watcher, check_watch_dir, checkpoint_name
from simeval.launch.suite import Cell, Suite, check_conditions, load_suite
from simeval.launch.sweep import reached
from simeval.records import failed_record, make_record

if TYPE_CHECKING:
    import threading

    from simeval.launch.results import ResultsLog
    from simeval.launch.sources import CheckpointSource

# Flags a suite file sets per task: giving them as well is an error, not a silent override.
SUITE_SETTINGS = ("env", "episodes", "num_envs", "max_steps", "seed")
_TICK_S = 0.2


@dataclass
class _Job:
    ck: Any
    cell: Cell
    attempt: int = 0  # how many times this evaluation was started, in this launch and before


@dataclass
class _Slot:
    evaluator: Any = None
    cell: Cell | None = None
    job: _Job | None = None
    started: float = 0.0
    plan: Any = None
    env_backend: str | None = None


class SuiteRun:
    """The dispatch loop of a suite run: jobs (checkpoint, cell) onto K evaluator slots."""

    def __init__(self, parsed: Parsed, suite: Suite, out: str, log: ResultsLog, stop: threading.Event) -> None:
        self.parsed, self.cfg, self.suite = parsed, parsed.cfg, suite
        self.out, self.log, self.stop = out, log, stop
        self.slots = [_Slot() for _ in range(max(1, self.cfg.workers))]
        self.jobs: list[_Job] = []
        self.closed = False  # --until-step reached: take no more checkpoints
        self._resume()

    def _resume(self) -> None:
        """What results.jsonl holds of this suite, newest line first: done cells, unreadable files, --until-step."""
        retry = self.cfg.retry_failed
        lines = [r for r in self.log.records() if r.get("suite") == self.suite.name and "checkpoint_name" in r]
        cells = resume_from(
            lines, lambda r: (r["checkpoint_name"], r["task"], r["condition"]) if "task" in r else None, retry
        )
        files = resume_from(lines, lambda r: r["checkpoint_name"], retry)  # a name's newest line, of a cell or not
        unreadable = {name for name, r in files.newest.items() if "task" not in r}
        self.done: set[tuple[str, str, str]] = cells.done
        self._unreadable = unreadable & files.done
        self._failures = (len(cells.retried) + len(unreadable & files.retried), len(cells.left) + len(self._unreadable))
        self._nouns = (bool(cells.retried or cells.left), bool(unreadable))  # which kinds failed: cells, files
        steps = [files.newest[n]["step"] for n in self._unreadable if files.newest[n].get("step") is not None]
        self.closing = reached(self.cfg.until_step, steps)  # a resume whose unreadable file reached it

    def unreadable(self) -> set[str]:
        """Checkpoint names recorded as unreadable (a failed line without a cell) that this run leaves alone."""
        return set(self._unreadable)

    def _say_resume(self) -> None:
        """The resume's lines: the cells already done, and the failures it retries or leaves."""
        if self.done:
            print(f"resuming: {len(self.done)} cell evaluation(s) already in {self.log.path}", flush=True)
        cells, files = self._nouns
        noun = "evaluation(s)" if cells and files else "checkpoint(s)" if files else "cell evaluation(s)"
        line = failures_line(noun, *self._failures, self.cfg.retry_failed)
        if line:
            print(line, flush=True)

    # -- the loop -------------------------------------------------------------
    def run(self, source: CheckpointSource) -> int:
        """Evaluate every cell of every checkpoint ``source`` gives, until it is done or a signal; exit code 0."""
        self._say_resume()
        next_scan = 0.0
        try:
            while not self.stop.is_set():
                if not self.closed and not source.done and time.monotonic() >= next_scan and not self.jobs:
                    self._take(source)
                    next_scan = time.monotonic() + self.cfg.poll_interval
                self._start_idle()
                self._collect()
                busy = any(s.job is not None for s in self.slots)
                if (source.done or self.closed) and not self.jobs and not busy:
                    if self.closed:
                        print(f"reached --until-step {self.cfg.until_step}; done.", flush=True)
                    return 0
                self.stop.wait(_TICK_S if busy or self.jobs else max(0.01, next_scan - time.monotonic()))
            running = sum(s.job is not None for s in self.slots)
            where = f"{running} running cell evaluation(s) abandoned, " if running else ""
            print(f"stopped by signal; {where}nothing partial written; results so far are in {self.log.path}")
            return 0
        finally:
            for slot in self.slots:
                self._close(slot)

    def _take(self, source: CheckpointSource) -> None:
        """Queue the cells still to do of every checkpoint the source has now (up to --until-step's)."""
        until = self.cfg.until_step
        while True:
            ck = source.take()
            if ck is None:
                self.closed = self.closing  # a resume past --until-step: nothing is left below it now
                return
            past = until is not None and ck.step is not None and ck.step >= until
            if past and self.closing:
                self.closed = True  # the run already reached --until-step: nothing past it is evaluated
                return
            if isinstance(ck, Unreadable):
                self._record_failure(ck.path, ck.error, ck.step)
            else:
                self._queue(ck)
            if past:
                self.closed = True
                return

    def _queue(self, ck: Any) -> None:
        """Queue ``ck``'s cells not yet done (those of its env's task; every cell for a checkpoint without env)."""
        name = checkpoint_name(ck.path, self.cfg.watch)
        cells = [c for c in self.suite.cells() if not ck.env or c.task.env == ck.env]
        if not cells:
            tasks = ", ".join(t.env for t in self.suite.tasks)
            print(f"{name}: trained on {ck.env}, which is no task of suite {self.suite.name} ({tasks}).")
            return
        todo = [c for c in cells if (name, *c.key) not in self.done]
        self.jobs.extend(_Job(ck, c) for c in todo)

    def _start_idle(self) -> None:
        """Give each idle slot a job: one of the cell it is built for first, else the oldest job."""
        for slot in self.slots:
            if slot.job is not None or not self.jobs:
                continue
            job = next((j for j in self.jobs if slot.cell is not None and j.cell.key == slot.cell.key), self.jobs[0])
            self.jobs.remove(job)
            try:
                self._start(slot, job)
            except Exception as exc:  # noqa: BLE001 - recorded as this cell's failure
                self._close(slot)
                self._record_cell_failure(job, exc)

    def _start(self, slot: _Slot, job: _Job) -> None:
        cfg = self._cell_config(job.cell)
        plan = plan_for(cfg, self.parsed.explicit | {"env"}, job.ck)
        if slot.cell is None or slot.cell.key != job.cell.key or slot.plan != plan:  # another cell, or policy
            self._close(slot)
            try:
                backend = check_env(plan.env, cfg.env_backend)
            except ValueError as exc:
                raise ConfigError(f"{self.suite.path}: task {plan.env}: {exc}") from None
            slot.evaluator = make_evaluator(
                cfg, plan, self.parsed.extra, self.out, backend, condition=job.cell.condition
            )
            slot.cell, slot.env_backend = job.cell, backend
        weights = dict(job.ck.weights_dict) if plan.obs_norm else {"policy": job.ck.policy}
        slot.plan = plan
        name = checkpoint_name(job.ck.path, self.cfg.watch)
        job.attempt = self.log.attempt([name, *job.cell.key])
        slot.evaluator.trigger_eval(weights_dict=weights, step=job.ck.step)
        slot.job, slot.started = job, time.monotonic()
        print(f"evaluating {name} (step {job.ck.step}) on {job.cell.task.env} / {job.cell.condition_name} ...")

    def _cell_config(self, cell: Cell) -> Any:
        t = cell.task
        return dataclasses.replace(
            self.cfg, env=t.env, episodes=t.episodes, num_envs=t.num_envs, max_steps=t.max_steps, seed=t.seed
        )

    def _collect(self) -> None:
        for slot in self.slots:
            if slot.job is None:
                continue
            try:
                result = slot.evaluator.poll()
            except EvalError as exc:
                job, slot.job = slot.job, None
                self._record_cell_failure(job, exc)
                continue
            if result is None:
                continue
            job, slot.job = slot.job, None
            self._record(job, result, time.monotonic() - slot.started, slot)

    # -- records --------------------------------------------------------------
    def _record(self, job: _Job, result: dict, seconds: float, slot: _Slot) -> None:
        fields = checkpoint_fields(job.ck, self.cfg.watch)
        name = fields["checkpoint_name"]
        record = make_record(
            result,
            **fields,
            wall_time=round(seconds, 3),
            attempts=job.attempt,
            **record_context(self.cfg, slot.plan, slot.env_backend),
            **job.cell.context(self.suite.name),
        )
        self.log.append(record)
        self.done.add((name, *job.cell.key))
        m = record["metrics"]
        low, high = m.get("reward_ci_low"), m.get("reward_ci_high")
        band = f" [{low:.1f}, {high:.1f}]" if low is not None and high is not None else ""
        print(f"{name} {job.cell.task.env} / {job.cell.condition_name}: {m['reward']:.1f}{band}", flush=True)

    def _record_cell_failure(self, job: _Job, exc: BaseException) -> None:
        if isinstance(exc, ConfigError):
            raise exc  # the run's settings: no cell of this kind could be evaluated
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        name = checkpoint_name(job.ck.path, self.cfg.watch)
        print(f"{name} {job.cell.task.env} / {job.cell.condition_name} failed: {message}", flush=True)
        record = failed_record(job.ck.path, message, job.ck.step, name, error_kind(exc))
        record.update(job.cell.context(self.suite.name))
        self.log.append(record)
        self.done.add((name, *job.cell.key))

    def _record_failure(self, path: str, message: str, step: int | None) -> None:
        name = checkpoint_name(path, self.cfg.watch)
        print(f"checkpoint {name} failed: {message}", flush=True)
        record = failed_record(path, message, step, name, "checkpoint")
        record["suite"] = self.suite.name
        self.log.append(record)

    def _close(self, slot: _Slot) -> None:
        if slot.evaluator is not None:
            slot.evaluator.shutdown(timeout=10.0)
        slot.evaluator, slot.cell, slot.job, slot.plan = None, None, None, None


def run_suite(parsed: Parsed, out: str, log: ResultsLog, stop: threading.Event) -> int:
    """``--suite FILE`` with ``--checkpoint`` or ``--watch``: load the suite, then :class:`SuiteRun`."""
    cfg = parsed.cfg
    clash = [f"--{k.replace('_', '-')}" for k in SUITE_SETTINGS if k in parsed.explicit]
    if clash:
        raise ConfigError(f"--suite {cfg.suite} sets {', '.join(clash)} per task: leave them out (or edit the file).")
    suite = load_suite(cfg.suite)

    for i, task in enumerate(suite.tasks):
        try:
            check_env(task.env, cfg.env_backend)
            check_conditions(task, cfg.env_backend, f"tasks[{i}]")
        except ValueError as exc:
            raise ConfigError(f"{cfg.suite}: task {task.env}: {exc}") from None
    if cfg.backend == "ray":
        check_capacity(ensure_ray(), cfg.workers, cfg.num_gpus, {"num_cpus": cfg.num_cpus})
    run = SuiteRun(parsed, suite, out, log, stop)
    cells = len(suite.cells())
    print(f"suite {suite.name}: {len(suite.tasks)} task(s), {cells} cell(s)", flush=True)
    if cfg.source == "checkpoint":
        source = One(load_checkpoint(cfg.checkpoint, cfg.format, max_bytes=cfg.max_checkpoint_bytes))
    else:
        check_watch_dir(cfg.watch)
        source = Watcher(
            cfg.watch, run.unreadable(), stop, cfg.poll_interval, cfg.format, max_bytes=cfg.max_checkpoint_bytes
        )
    return run.run(source)
