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

**The strategy and the scheduler.** What is evaluated next and when a cell stops is the
look-by-look strategy's (:class:`simeval.strategies.LookStrategy`: it proposes each cell's
next look once the previous one is decided, holds a look's rounds until all are in, and
replays the lines on a resume); this module checks the plans and the lines, and runs the
strategy on the launcher's one dispatch loop (:class:`~simeval.launch.scheduler.Scheduler`)
over the :class:`~simeval.launch.session.Session`'s slots (``--workers K`` on Ray: K
slots), with the same record builder (:mod:`simeval.launch.lines`), results files and
attempts journal (:class:`~simeval.launch.results.ResultsLog`) as every run.
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
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import load_checkpoint
from simeval.conditions import LOOK_STRIDE
from simeval.envs.simulators import simulator_for
from simeval.envs.simulators.task_config import TaskConfigSimulator
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.results import ResultsLog, failures_line
from simeval.launch.scheduler import Scheduler
from simeval.launch.sources import checkpoint_name
from simeval.launch.suite_run import SuiteCell
from simeval.sequential import LookPlan
from simeval.strategies import CellLooks, LookStrategy

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.envs.simulators import Simulator
    from simeval.launch.session import Session
    from simeval.launch.suite import Suite, SuiteTask


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

        The looks of a cell differ only in their seed, which the scheduler gives each round
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
    runs = [
        CellLooks(c, c.name, c.key, plans[c.cell.task.env], c.cell.task.bounds, c.cell.task.seed,
                  deterministic=c.cell.task.deterministic)
        for c in cells
    ]  # fmt: skip
    strategy = LookStrategy(sides, runs, look_cell)
    files = " and ".join(s.log.path for s in sides)
    print(f"results: {files}", flush=True)
    first = next(iter(plans.values()))
    print(
        f"suite {suite.name}: {len(cells)} cell(s), --{cfg.adaptive}: looks of {first.look_every} episode(s), "
        f"at most {first.max_episodes} per cell and checkpoint, alpha {cfg.alpha} over the cells"
        + (", planned looks (group-sequential)" if cfg.design == "planned" else ""),
        flush=True,
    )
    replay(strategy, cfg.retry_failed)
    return Scheduler(session, {s.label: s.log for s in sides}, strategy).run()


def look_cell(run: CellLooks) -> LookCell:
    """The cell of ``run`` at its current look."""
    return LookCell(run.cell, run.look, run.plan.look_every, run.look_seed)


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
        check_look_budget(budget, every, given, f"{env}: ")
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


def check_look_budget(budget: int, every: int, given: str, where: str = "") -> None:
    """A one-line ConfigError (``where`` its prefix) unless the budget ``given`` holds whole looks of ``every``, no
    more of them than look seeds cover (:data:`~simeval.conditions.LOOK_STRIDE`)."""
    if budget < every:
        raise ConfigError(f"{where}{given} ({budget}) < --look-every {every}: the budget must hold one look.")
    if budget % every:
        low, high = budget // every * every, (budget // every + 1) * every
        raise ConfigError(
            f"{where}{given} ({budget}) is not a multiple of the look ({every} episodes): give "
            f"--max-episodes {low or high} or {high}."
        )
    if budget // every > LOOK_STRIDE:
        raise ConfigError(f"{where}{budget // every} looks are more than look seeds cover ({LOOK_STRIDE}).")


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


def replay(strategy: LookStrategy, retry_failed: bool) -> None:
    """Rebuild each cell's sequence from the looks already in every side's file, through the strategy; say what
    was found.

    Raises:
        ConfigError: a line that is not a look of this run (another checkpoint, suite, plan, bounds or seed).
    """
    sides: list[Side] = strategy.sides
    lines = {}
    for side in sides:
        lines[side.label] = records = list(side.log.records())
        for record in records:
            _check_ours(record, side, strategy.runs[0].cell.suite)
    found = strategy.replay(lines, retry_failed, check=_check_look)
    if found.looks:
        where = " and ".join(s.log.path for s in sides)
        print(
            f"resuming: {found.looks} look(s) already in {where}; {found.stopped} cell(s) stopped before.", flush=True
        )
    line = failures_line("cell evaluation(s)", found.retried, found.left, retry_failed)
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


def _check_look(record: dict, run: CellLooks, side: Side) -> None:
    """A ConfigError unless ``record`` was evaluated as this run evaluates the look: plan, bounds, seed, settings."""
    cell = look_cell(run)
    expected = {**cell.context(), "look": run.look, "sequential": run.plan.as_data()}
    recorded = dict(record)
    with contextlib.suppress(ValueError):  # a plan written before a field existed reads with its default
        recorded["sequential"] = LookPlan.from_data(record.get("sequential")).as_data()
    keys = ("sequential", "bounds", "deterministic", "seed", "num_envs", "max_steps", "condition_settings")
    differ = [_difference(k, recorded.get(k), _json(expected.get(k))) for k in keys]
    differ = [d for d in differ if d]
    if differ:
        raise ConfigError(
            f"{side.log.path}: {run.name} look {run.look} was evaluated with {'; '.join(differ)}: resume with "
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
