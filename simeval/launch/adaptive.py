"""Adaptive evaluation: ``--until-decided`` (B against a baseline A) and ``--until-precise`` (one checkpoint).

A suite's cells are evaluated **look by look**. Look ``L`` of a cell is one ordinary
round of ``K`` episodes (``--look-every``) per checkpoint, seeded with
:func:`simeval.conditions.look_seed` ``(task seed, L)``: its episodes are
``episode_seed(look_seed, i, k)`` for sub-env ``i``'s ``k``-th episode, the same for A
and B, for any backend and any number of workers, and never the same as another
look's. When a look's rounds are in (both A's and B's), the cell's confidence
sequence (:class:`simeval.sequential.LookPlan`: ``paired`` for ``--until-decided``,
``mean`` for ``--until-precise``) takes the look's episodes in one update, and
``LookPlan.stop`` says whether the cell stops (``decided``, ``equivalent``, ``precise``,
``budget``) or gets another look. A cell whose episodes record success builds its
return sequence at the confidence ``report compare`` gives it beside its success
sequence (``with_success``), known from its first look's results; the launcher
decides on the return only.

**Episode order.** A round's episodes come back in (sub-env, ordinal) order, sub-env
first (``simeval.worker.rollout.EpisodeTally._ordered``, the direct engine's
``_episodes``, ``shards.merge`` in range order), fixed by the per-sub-env quotas
before the round and not by the order in which episodes end. That is the order in
which they enter the sequence (the betting sequence takes them one by one); B's are
paired with A's by ``episode_seeds`` and taken in A's order.

**Lines.** Each look of each cell is one line in ``OUT/a/results.jsonl`` (A's) and one
in ``OUT/b/results.jsonl`` (B's) (``--until-precise``: ``OUT/results.jsonl``): the
ordinary suite cell line (its ``seed`` the look's) with ``look``, ``sequential`` (the
plan, :meth:`LookPlan.as_data`), ``bounds`` when the task declares them, and, on the
cell's last look, ``stop``. A look's lines are written together once both rounds are
in, A's first. A return outside the bounds, or rounds whose seeds differ, fail the
cell: a failed line in each file naming the cell and the episode.

**Resume.** The same command again replays the looks found in both files, in look
order (the newest line of each (cell, look) counts), rebuilding every sequence, and
evaluates the rest: a cell that stopped is not evaluated again, a look found in one
file only is evaluated again for both, a failed look is retried when a resume retries
its line (``retry: "resume"``, or ``--retry-failed``). Lines of another checkpoint,
suite, look plan or bounds refuse the resume in one line: one results directory
holds one adaptive run.

**Why not the Pipeline.** :class:`~simeval.launch.pipeline.Pipeline` runs
independent jobs from a source of checkpoints and records each alone. A look
depends on the cell's previous look (its verdict decides whether there is one), and
its two halves go to two files together (the last look's ``stop`` is known only once
both are in). So this module keeps its own small dispatch loop, over the same
:class:`~simeval.launch.session.Session` slots (``--workers K`` on Ray: K slots),
the same record builder (:mod:`simeval.launch.lines`),
the same results files and attempts journal (:class:`~simeval.launch.results.ResultsLog`).
A slot's evaluator is built for a cell (:attr:`LookCell.slot_key`: its looks differ only
in their seed) and plan, and kept across the cell's looks, and across A and B when they
share a plan: each round is given its look's seed (``Evaluator.trigger_eval(seed=...)``),
which gives the episodes an evaluator built with that seed gives. An idle slot takes a job
of the cell it is built for first (of the checkpoint it ran last first, so A and B of
other plans rebuild it once a look, not twice), so a worker starts once per cell and slot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import load_checkpoint
from simeval.conditions import LOOK_STRIDE, look_seed
from simeval.envs.simulators import simulator_for
from simeval.envs.simulators.task_config import TaskConfigSimulator
from simeval.launch.cells import BoundsError
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.lines import Look, failed_line, ok_line
from simeval.launch.progress import ProgressBoard
from simeval.launch.results import ResultsLog, failures_line
from simeval.launch.session import PlanBusy, error_kind
from simeval.launch.sources import checkpoint_name
from simeval.launch.suite_run import SuiteCell
from simeval.records import plain, retried_on_resume
from simeval.sequential import LookPlan, SequentialMean, SequentialPaired

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.envs.simulators import Simulator
    from simeval.launch.session import Session
    from simeval.launch.suite import Suite, SuiteTask

_TICK_S = 0.2
_SUCCESS = ("episode_success_once", "episode_success_at_end")


@dataclass(frozen=True)
class LookCell:
    """Look ``look`` of a suite cell, as the session asks of a cell: the cell with the look's episodes and seed."""

    base: SuiteCell
    look: int
    episodes: int
    seed: int

    @property
    def key(self) -> tuple:
        """(task, condition, look): what the attempts journal and a resume know the look by."""
        return (*self.base.key, self.look)

    @property
    def slot_key(self) -> tuple:
        """(task, condition): what a slot's evaluator is built for, whatever the look.

        The looks of a cell differ only in their seed, which :meth:`Looks._start_idle` gives each round
        (see :func:`simeval.launch.session.slot_key`).
        """
        return self.base.key

    @property
    def condition(self) -> Any:
        """The cell's condition."""
        return self.base.condition

    def config(self, cfg: LaunchConfig) -> LaunchConfig:
        """The cell's settings with the look's episode count and seed."""
        return dataclasses.replace(self.base.config(cfg), episodes=self.episodes, seed=self.seed)

    def explicit(self, explicit: set[str]) -> set[str]:
        """The cell's explicit settings."""
        return self.base.explicit(explicit)

    def context(self) -> dict[str, Any]:
        """The cell's fields, its ``seed`` the look's."""
        return {**self.base.context(), "seed": self.seed}

    def check(self, result: dict) -> None:
        """Nothing here: the cell's sequence checks the bounds, numbering the episodes across looks."""

    def label(self, name: str) -> str:
        """``NAME TASK / CONDITION look L``."""
        return f"{self.base.label(name)} look {self.look}"

    def started(self, ck: Checkpoint, name: str, where: str) -> str:
        """``evaluating NAME on TASK / CONDITION, look L ...``."""
        return f"evaluating {name} on {self.base.name}, look {self.look}{where} ..."

    def finished(self, ck: Checkpoint, name: str, result: dict, record: dict) -> str:
        """``NAME TASK / CONDITION look L: RETURN``."""
        return f"{self.label(name)}: {record['metrics']['reward']:.2f}"


@dataclass
class Side:
    """One checkpoint of the run and its results file: A or B (``--until-decided``), or the one (``""``)."""

    label: str
    ck: Checkpoint
    name: str
    log: ResultsLog


@dataclass
class CellRun:
    """One cell's looks: its plan, its sequence so far, the look it is at, and why it stopped."""

    cell: SuiteCell
    plan: LookPlan
    look: int = 0
    """The look being evaluated, or the next one."""
    seq: SequentialPaired | SequentialMean | None = None
    """Built at the first look's results (``with_success`` is known then)."""
    stop: str | None = None
    error: str | None = None
    arrived: dict[str, tuple] = field(default_factory=dict)
    """This look's rounds in so far: side label -> (job, result, seconds, slot as it was)."""

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The task's declared bounds on one episode's return."""
        return self.cell.cell.task.bounds

    @property
    def over(self) -> bool:
        """Stopped, or failed: no more looks."""
        return self.stop is not None or self.error is not None

    def look_cell(self) -> LookCell:
        """The cell at its current look."""
        return LookCell(self.cell, self.look, self.plan.look_every, look_seed(self.cell.cell.task.seed, self.look))

    def advance(self, episodes: Mapping[str, tuple[list[float], list[int] | None, bool]]) -> str | None:
        """Take one look's episodes (side label -> returns, seeds, records success) in one update; why it stops.

        Raises:
            ValueError: a return outside the bounds, or A and B ran other episodes (names the cell).
        """
        name = self.cell.name
        if self.plan.rule == "until-decided":
            returns_a, seeds_a, success_a = episodes["A"]
            returns_b, seeds_b, success_b = episodes["B"]
            returns_b = _in_order_of(seeds_a, seeds_b, returns_b, name)
            if self.seq is None:
                self.seq = self.plan.paired(self.bounds, name, with_success=success_a or success_b)
            self.seq.update(returns_a, returns_b)
        else:
            ((returns, _, _),) = episodes.values()
            if self.seq is None:
                self.seq = self.plan.mean(self.bounds, name)
            self.seq.update(returns)
        return self.plan.stop(self.seq)


@dataclass
class Job:
    """One round: a side's checkpoint on a cell's look."""

    side: Side
    run: CellRun
    cell: LookCell
    started: float = 0.0
    attempt: int = 1

    @property
    def key(self) -> list[Any]:
        """(checkpoint name, task, condition, look): what the attempts journal counts."""
        return [self.side.name, *self.cell.key]


def run_adaptive(session: Session, suite: Suite, out: str) -> int:
    """``--until-decided`` / ``--until-precise`` on ``suite``'s cells into ``out``, resuming what is there; exit 0."""
    cfg = session.cfg
    load = lambda path: load_checkpoint(path, cfg.format, max_bytes=cfg.max_checkpoint_bytes)  # noqa: E731
    b = load(cfg.checkpoint)
    if cfg.until_decided:
        a = load(cfg.baseline)
        sides = [_side("A", a, os.path.join(out, "a")), _side("B", b, os.path.join(out, "b"))]
    else:
        sides = [_side("", b, out)]
    cells = cells_of(suite, [s.ck for s in sides])
    plans = look_plans(cfg, cells)
    runs = [CellRun(c, plans[c.cell.task.env]) for c in cells]
    files = " and ".join(s.log.path for s in sides)
    print(f"results: {files}", flush=True)
    first = next(iter(plans.values()))
    print(
        f"suite {suite.name}: {len(cells)} cell(s), --{cfg.adaptive}: looks of {first.look_every} episode(s), "
        f"at most {first.max_episodes} per cell and checkpoint, alpha {cfg.alpha} over the cells"
        + (", planned looks (group-sequential)" if cfg.design == "planned" else ""),
        flush=True,
    )
    replay(runs, sides, cfg.retry_failed)
    return Looks(session, sides, runs).run()


def _side(label: str, ck: Checkpoint, directory: str) -> Side:
    return Side(label, ck, checkpoint_name(ck.path, None), ResultsLog(directory, None))


def cells_of(suite: Suite, cks: list[Checkpoint]) -> list[SuiteCell]:
    """The suite's cells of the checkpoints' task (every cell when none records its env); ConfigError otherwise."""
    envs = sorted({ck.env for ck in cks if ck.env})
    if len(envs) > 1:
        raise ConfigError(
            f"{cks[0].path} was trained on {cks[0].env} and {cks[1].path} on {cks[1].env}: "
            "--until-decided compares two checkpoints of one task."
        )
    cells = [SuiteCell(c, suite.name) for c in suite.cells() if not envs or c.task.env == envs[0]]
    if not cells:
        tasks = ", ".join(t.env for t in suite.tasks)
        raise ConfigError(
            f"the checkpoints were trained on {envs[0]}, which is no task of suite {suite.name} ({tasks})."
        )
    return cells


def look_plans(cfg: LaunchConfig, cells: list[SuiteCell]) -> dict[str, LookPlan]:
    """Each task's look plan: ``--look-every`` (default its num_envs), ``--max-episodes`` (default its episodes).

    A look is any number of episodes, spread over the task's sub-envs by quota (every sub-env
    steps until the round's last quota is met, so a partial wave costs a whole one: a note
    says so), and exactly one wave where the simulator draws resets from one generator shared
    by its sub-envs (:func:`shared_resets`).
    One-line ConfigErrors naming the task.
    """
    tasks: dict[str, SuiteTask] = {c.cell.task.env: c.cell.task for c in cells}
    precision, relative = cfg.precision if cfg.until_precise is not None else (0.0, False)
    plans = {}
    for env, task in tasks.items():
        n = task.num_envs
        every = cfg.look_every or n
        budget = cfg.max_episodes or task.episodes
        given = "--max-episodes" if cfg.max_episodes else "the suite's episodes"
        if n > LOOK_STRIDE:
            raise ConfigError(f"{env}: num_envs {n} is more than a look's seeds cover ({LOOK_STRIDE}).")
        sim = simulator_for(env, cfg.env_backend)
        if shared_resets(sim) and every != n:
            raise ConfigError(
                f"{env}: --look-every {every} must equal the task's num_envs {n}: {sim.title} draws reset states "
                "from one generator shared by its sub-envs, in the order episodes end, so only each sub-env's first "
                "episode after a look's seeded reset is common to both checkpoints."
            )
        if every % n:
            print(
                f"note: {env}: a look of {every} episodes on {n} sub-envs steps all {n} until the last one ends "
                f"(a partial wave costs a whole one); --look-every {n * max(1, every // n)} uses them all.",
                flush=True,
            )
        if budget < every:
            raise ConfigError(f"{env}: {given} ({budget}) < --look-every {every}: the budget must hold one look.")
        if budget % every:
            low, high = budget // every * every, (budget // every + 1) * every
            raise ConfigError(
                f"{env}: {given} ({budget}) is not a multiple of the look ({every} episodes): give "
                f"--max-episodes {low or high} or {high}."
            )
        if budget // every > LOOK_STRIDE:
            raise ConfigError(f"{env}: {budget // every} looks are more than look seeds cover ({LOOK_STRIDE}).")
        plans[env] = LookPlan(
            cfg.adaptive,
            cfg.alpha,
            len(cells),
            every,
            budget,
            cfg.margin,
            precision=precision,
            relative=relative,
            design=cfg.design,
        )
    return plans


def shared_resets(sim: Simulator) -> bool:
    """Whether ``sim``'s sub-envs draw their reset states from one generator, in the order episodes end.

    simeval's task-config simulators (:class:`~simeval.envs.simulators.task_config.TaskConfigSimulator`)
    reset their sub-envs inside the step, through the task's event terms, from the one torch
    generator the env is seeded with: there only the first episode of each sub-env after a
    seeded reset has the same initial state for every checkpoint. The others keep one
    generator per sub-env (``seed + i``), whose ``k``-th reset draws the same numbers
    whatever came before.
    """
    return isinstance(sim, TaskConfigSimulator)


def _in_order_of(seeds_a: list[int] | None, seeds_b: list[int] | None, returns_b: list[float], name: str) -> list:
    """B's returns in A's episode order, paired by episode seed; ValueError when the two ran other episodes."""
    if seeds_a is None or seeds_b is None:
        raise ValueError(f"{name}: a round recorded no episode seeds, so A's and B's episodes cannot be paired.")
    if seeds_a == seeds_b:
        return list(returns_b)
    where = {s: i for i, s in enumerate(seeds_b)}
    if sorted(seeds_a) != sorted(seeds_b) or len(where) != len(seeds_b):
        raise ValueError(f"{name}: A and B ran other episodes (their episode seeds differ): they cannot be paired.")
    return [returns_b[where[s]] for s in seeds_a]


def _episodes(data: Mapping[str, Any], prefix: str = "") -> tuple[list[float], list[int] | None, bool]:
    """(returns, episode seeds, whether success is recorded) of a round's result (``prefix="eval/"``) or line."""
    returns = [float(v) for v in plain(data.get(f"{prefix}episode_returns")) or []]
    seeds = data.get(f"{prefix}episode_seeds")
    seeds = None if seeds is None else [int(v) for v in plain(seeds)]
    success = any(data.get(f"{prefix}{key}") is not None for key in _SUCCESS)
    return returns, seeds, success


def replay(runs: list[CellRun], sides: list[Side], retry_failed: bool) -> None:
    """Rebuild each cell's sequence from the looks already in every side's file, in look order; say what was found.

    Raises:
        ConfigError: a line that is not a look of this run (another checkpoint, suite, plan, bounds or seed).
    """
    newest: dict[str, dict[tuple, dict]] = {}
    for side in sides:
        newest[side.label] = found = {}
        for record in side.log.records():
            _check_ours(record, side, runs[0].cell.suite)
            found[(record["task"], record["condition"], record["look"])] = record  # file order: the later wins
    looks = retried = left = 0
    for run in runs:
        while True:
            records = [newest[s.label].get((*run.cell.key, run.look)) for s in sides]
            failed = [r for r in records if r is not None and r.get("status") != "ok"]
            if failed:  # a side's round failed (the other side's line was never written): retried, or left
                if any(retried_on_resume(r, retry_failed) for r in failed):
                    retried += 1  # this look is evaluated again
                else:
                    run.error, left = str(failed[0].get("error", "failed")), left + 1
                break
            if any(r is None for r in records):
                break  # in one file only, or in none: evaluated (again) for both
            for side, record in zip(sides, records, strict=True):
                _check_look(record, run, side)
            try:
                stop = run.advance({s.label: _episodes(r) for s, r in zip(sides, records, strict=True)})
            except ValueError as exc:
                run.error = str(exc)
                break
            looks += 1
            if stop is not None:
                run.stop = stop
                break
            run.look += 1
    if looks:
        stopped = sum(r.stop is not None for r in runs)
        where = " and ".join(s.log.path for s in sides)
        print(f"resuming: {looks} look(s) already in {where}; {stopped} cell(s) stopped before.", flush=True)
    line = failures_line("cell evaluation(s)", retried, left, retry_failed)
    if line:
        print(line, flush=True)


def _check_ours(record: dict, side: Side, suite: str) -> None:
    """A ConfigError unless ``record`` is a look of this run's ``side`` (its checkpoint, this suite)."""
    same = "look" in record and "task" in record and record.get("suite") == suite
    if record.get("status") == "ok":
        same = same and record.get("checkpoint_sha256") == side.ck.sha256
    else:
        same = same and record.get("checkpoint_name") == side.name
    if not same:
        raise ConfigError(
            f"{side.log.path} holds a line that is not a look of suite {suite} on {side.name} "
            f"({record.get('checkpoint_name')}, {record.get('suite')}, look {record.get('look')}): "
            "one results directory holds one adaptive run; give another --out."
        )


def _check_look(record: dict, run: CellRun, side: Side) -> None:
    """A ConfigError unless ``record`` was evaluated as this run evaluates the look: plan, bounds, seed, settings."""
    cell = run.look_cell()
    expected = {**cell.context(), "look": run.look, "sequential": run.plan.as_data()}
    recorded = dict(record)
    with contextlib.suppress(ValueError):  # a plan written before a field existed reads with its default
        recorded["sequential"] = LookPlan.from_data(record.get("sequential")).as_data()
    keys = ("sequential", "bounds", "seed", "num_envs", "max_steps", "condition_settings")
    differ = [_difference(k, recorded.get(k), _json(expected.get(k))) for k in keys]
    differ = [d for d in differ if d]
    if differ:
        raise ConfigError(
            f"{side.log.path}: {run.cell.name} look {run.look} was evaluated with {'; '.join(differ)}: resume with "
            "the same suite and flags, or give another --out."
        )


def _difference(key: str, then: Any, now: Any) -> str | None:
    """``key X (now Y)`` for a setting a line recorded otherwise than this run asks (a plan: the fields that differ)."""
    if then == now:
        return None
    if isinstance(then, dict) and isinstance(now, dict) and key == "sequential":
        return ", ".join(f"{k} {then.get(k)!r} (now {now.get(k)!r})" for k in now if then.get(k) != now.get(k))
    return f"{key} {then!r} (now {now!r})"


def _json(value: Any) -> Any:
    """``value`` as it reads back from a results line (tuples as lists)."""
    return json.loads(json.dumps(value))


class Looks:
    """The dispatch loop: each cell's current look, A's and B's rounds on idle slots, then the cell's next look."""

    def __init__(self, session: Session, sides: list[Side], runs: list[CellRun]) -> None:
        self.session, self.cfg, self.sides, self.runs = session, session.cfg, sides, runs
        self.jobs: list[Job] = []
        self.running: dict[int, Job] = {}
        self.last: dict[int, str] = {}  # slot -> the label of the side it evaluated last
        self.board = ProgressBoard()  # each running round's progress; the run's total is not known ahead

    def run(self) -> int:
        """Evaluate until every cell stopped (or failed), or a signal; print the table. The exit code: 0."""
        for run in self.runs:
            if not run.over:
                self._queue(run)
        stop = self.session.stop
        try:
            while not stop.is_set():
                self._start_idle()
                self._collect()
                if not self.running and not self.jobs:
                    self.board.close()
                    print(self.table(), flush=True)
                    return 0
                stop.wait(_TICK_S)
        finally:
            self.board.close()
        where = f"{len(self.running)} running round(s) abandoned, " if self.running else ""
        print(f"stopped by signal; {where}nothing partial written; the same command resumes.", flush=True)
        return 0

    def _queue(self, run: CellRun) -> None:
        cell = run.look_cell()
        self.jobs.extend(Job(side, run, cell) for side in self.sides)

    def _start_idle(self) -> None:
        """Give each idle slot a job: one of the cell it is built for first (of the side it ran last first), else
        the oldest; the round gets its look's seed, so the slot's evaluator serves every look of the cell."""
        for index in range(len(self.session.slots)):
            if index in self.running or not self.jobs:
                continue
            built, last = self.session.slots[index].cell_key, self.last.get(index)
            mine = [j for j in self.jobs if j.cell.slot_key == built]
            job = next((j for j in mine if j.side.label == last), mine[0] if mine else self.jobs[0])
            self.jobs.remove(job)
            self.last[index] = job.side.label
            try:
                job.attempt = self.session.start(
                    job.side.ck,
                    index,
                    job.cell,
                    journal=lambda job=job: job.side.log.attempt(job.key),
                    seed=job.cell.seed,
                )
            except ConfigError:
                raise  # the run's settings: no round could run
            except PlanBusy:  # a suite's cells hold no run-wide plan; kept for the session's contract
                self.jobs.insert(0, job)
                return
            except Exception as exc:  # noqa: BLE001 - CheckpointError, PlanError, ValueError, EvalError: recorded
                self._failed(job, exc)
                continue
            job.started = time.monotonic()
            self.running[index] = job
            evaluator = self.session.slots[index].evaluator
            if evaluator is not None:
                evaluator.set_on_progress(self.board.callback(index, job.cell.label(job.side.name)))

    def _collect(self) -> None:
        """Take every finished round; close a look once all its rounds are in."""
        for index, job, result in self.session.finished(self.running, self.board):
            if isinstance(result, Exception):
                self._failed(job, result)
                continue
            run = job.run
            if run.over:
                continue  # the look's other round failed: nothing of it is written
            slot = dataclasses.replace(self.session.slots[index], evaluator=None)  # what built it, as it was
            run.arrived[job.side.label] = (job, result, time.monotonic() - job.started, slot)
            if len(run.arrived) == len(self.sides):
                self._close_look(run)

    def _close_look(self, run: CellRun) -> None:
        """Update the cell's sequence with the look, write the look's lines, and queue its next look or stop it."""
        arrived, run.arrived = run.arrived, {}
        try:
            stop = run.advance({label: _episodes(entry[1], "eval/") for label, entry in arrived.items()})
        except ValueError as exc:
            for side in self.sides:
                self._record_failure(arrived[side.label][0], BoundsError(str(exc)))
            run.error = str(exc)
            print(f"{run.cell.name} look {run.look} failed: {exc}", flush=True)
            return
        look = Look(run.look, run.plan.as_data(), stop)
        for side in self.sides:  # A's line first
            job, result, seconds, slot = arrived[side.label]
            record = ok_line(
                self.cfg, side.ck, job.cell, result, seconds=seconds, attempts=job.attempt, slot=slot,
                with_plan=False, look=look,
            )  # fmt: skip
            side.log.append(record, publish=False)
        print(self.progress(run, stop), flush=True)
        if stop is not None:
            run.stop = stop
        else:
            run.look += 1
            self._queue(run)

    def _failed(self, job: Job, exc: BaseException) -> None:
        """A round that could not run: its failed line; the cell stops (a resume may retry the look)."""
        run = job.run
        if run.over:
            return
        self._record_failure(job, exc)
        run.error, run.arrived = _first_line(exc), {}
        self.jobs = [j for j in self.jobs if j.run is not run]
        who = f"{job.side.label} " if job.side.label else ""
        print(f"{who}{job.cell.label(job.side.name)} failed: {run.error}", flush=True)

    def _record_failure(self, job: Job, exc: BaseException) -> None:
        context = {**job.cell.context(), "look": job.cell.look, "sequential": job.run.plan.as_data()}
        ck = job.side.ck
        job.side.log.append(failed_line(self.cfg, ck.path, _first_line(exc), ck.step, error_kind(exc), context))

    def progress(self, run: CellRun, stop: str | None) -> str:
        """One look of one cell in a line: episodes so far, the interval, and whether the cell stops."""
        seq = run.seq
        then = f"stop ({stop})" if stop else "next look"
        if isinstance(seq, SequentialPaired):
            return (
                f"look {run.look} {run.cell.name}: {seq.n} episodes each, B - A {seq.diff:+.2f} "
                f"[{_num(seq.low)}, {_num(seq.high)}] {seq.verdict}: {then}"
            )
        target = run.plan.precision * (abs(seq.mean) if run.plan.relative else 1.0)
        return (
            f"look {run.look} {run.cell.name}: {seq.n} episodes, mean {seq.mean:.2f} "
            f"[{_num(seq.low)}, {_num(seq.high)}] +/-{_num(seq.half_width, sign=False)} "
            f"(target +/-{target:.2f}): {then}"
        )

    def table(self) -> str:
        """Every cell's outcome, and the episodes used against a fixed run's."""
        decided = self.cfg.until_decided
        head = "verdict        B - A [low, high]" if decided else "mean [low, high]"
        cells, used, fixed = [], 0, 0
        for run in self.runs:
            seq, n = run.seq, run.seq.n if run.seq is not None else 0
            used += n * len(self.sides)
            fixed += run.plan.max_episodes * len(self.sides)
            if seq is None or not n:
                shown = "-"
            elif isinstance(seq, SequentialPaired):
                shown = f"{seq.verdict:<14} {seq.diff:+.2f} [{_num(seq.low)}, {_num(seq.high)}]"
            else:
                shown = f"{seq.mean:.2f} [{_num(seq.low)}, {_num(seq.high)}]"
            why = run.stop or (f"failed: {run.error}" if run.error else "not finished")
            cells.append((run.cell.name, shown, n, why))
        width = max(len(c[0]) for c in cells)
        shown_width = max(len(head), *(len(c[1]) for c in cells))
        rows = [f"{'cell':<{width}}  {head:<{shown_width}}  {'episodes':>8}  stop"]
        rows += [f"{name:<{width}}  {shown:<{shown_width}}  {n:>8}  {why}" for name, shown, n, why in cells]
        each = " x 2 checkpoints" if decided else ""
        sides = len(self.sides)
        rows.append(
            f"episodes used: {used} of the {fixed} a fixed run evaluates ({len(self.runs)} cell(s) x max episodes"
            f"{each}): {100 * used / fixed:.0f}%; per checkpoint: {used // sides} of {fixed // sides}"
        )
        return "\n".join(rows)


def _num(value: float, sign: bool = True) -> str:
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return f"{value:+.2f}" if sign else f"{value:.2f}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
