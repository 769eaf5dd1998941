"""``--select-best``: the launcher side of the selection run (:mod:`simeval.strategies.selection`).

The checkpoints come from the run's source: the repeated ``--checkpoint``s (the whole alpha
over them: ``max_arms``) or ``--watch DIR`` (open-ended: a checkpoint that lands later plays
the looks already played and joins; ``--until-step`` ends the joining). Each look is one
round of ``--look-every`` episodes (default ``--num-envs``) per checkpoint on the look's seed
(:func:`simeval.conditions.look_seed` of ``--seed``), up to ``--max-episodes`` per checkpoint
(default ``--episodes``). Lines go to ``OUT/results.jsonl``: one per look per checkpoint
(``look``, ``selection``), and a final ``status: "selection"`` line with the result. The same
command resumes: the lines are replayed through the strategy (a results directory holds one
selection run; lines of another plan refuse the resume in one line).

With ``--suite F`` a checkpoint's score is the suite's aggregate (``report compare``'s ``*`` row):
at look ``L`` each checkpoint plays one round per cell, on the cell's look seed (``look_seed(task
seed, L)``, the same for every checkpoint), and episode ``i``'s score is the mean over the cells of
its return normalised by the cell's task ``reference`` (``(x - low) / (high - low)``). Every task
must declare ``reference``; ``--margin`` is then a fraction of the reference width. Each round is
one line, the suite cell line's fields (``task``, ``condition``, ...) with ``look`` and
``selection``. When every task declares ``bounds``, the aggregate's (normalised) bounds give the
betting sequences; otherwise the t-mixture ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import load_checkpoint
from simeval.envs.simulators import simulator_for
from simeval.launch.adaptive import LookCell, check_look_budget, shared_resets
from simeval.launch.cells import Nominal
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.scheduler import Scheduler, reached
from simeval.launch.sources import CheckpointSource, Watcher, check_watch_dir
from simeval.launch.suite_run import SuiteCell
from simeval.strategies import SelectionPlan, SelectionStrategy
from simeval.strategies.selection import SuiteScore, aggregate_bounds

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session
    from simeval.launch.suite import Suite


@dataclass(frozen=True)
class SelectCell(Nominal):
    """Look ``look`` of a selection run: the run's settings with the look's episodes and seed."""

    look: int = 0
    episodes: int = 1
    seed: int = 0

    @property
    def key(self) -> tuple:  # type: ignore[override]
        """(look,): what the attempts journal knows the round by (with the checkpoint's name)."""
        return (self.look,)

    @property
    def slot_key(self) -> tuple:
        """(): one evaluator serves every look (each round is given its look's seed)."""
        return ()

    def config(self, cfg: LaunchConfig) -> LaunchConfig:
        """The run's settings with the look's episode count and seed."""
        return dataclasses.replace(cfg, episodes=self.episodes, seed=self.seed)

    def label(self, name: str) -> str:
        """``checkpoint NAME look L``."""
        return f"checkpoint {name} look {self.look}"


@dataclass(frozen=True)
class SuiteSelectCell(LookCell):
    """Look ``look`` of a ``--suite`` selection run on one cell: the suite cell with the look's episodes and seed."""

    def check(self, result: dict) -> None:
        """A :class:`~simeval.launch.cells.BoundsError` naming the cell and the episode for a return outside the
        task's declared bounds."""
        self.base.check(result)


class Several:
    """A source of the repeated ``--checkpoint``s, in the order given."""

    def __init__(self, cks: list[Checkpoint]) -> None:
        self.items, self.done = list(cks), False

    def take(self) -> Checkpoint | None:
        """The next checkpoint; None, and ``done``, once all are taken."""
        if not self.items:
            self.done = True
            return None
        return self.items.pop(0)

    def left(self, until: int | None, judge: bool = True) -> list[Any]:
        """Nothing: every checkpoint is handed out at once."""
        return []


def plan_of(cfg: LaunchConfig, suite: Suite | None = None) -> SelectionPlan:
    """The run's selection plan from its flags (and ``--suite``'s file); a one-line ConfigError for a look or budget
    that cannot be played, or a suite task without ``reference``."""
    if suite is not None:
        return _suite_plan(cfg, suite)
    every = cfg.look_every or cfg.num_envs
    budget = cfg.max_episodes or cfg.episodes
    given = "--max-episodes" if cfg.max_episodes else "--episodes"
    if cfg.seed is None:
        raise ConfigError("--select-best plays every checkpoint on the same seeded episodes: give --seed.")
    check_look_budget(budget, every, given)
    many = len(cfg.checkpoints) if not cfg.watch else None
    return SelectionPlan(every, budget, float(cfg.margin), float(cfg.alpha), many, int(cfg.seed), design=cfg.design)


def _suite_plan(cfg: LaunchConfig, suite: Suite) -> SelectionPlan:
    """The plan of a ``--suite`` selection: every cell of the suite, scored on the tasks' references."""
    where = f"--select-best --suite {cfg.suite}"
    for task in suite.tasks:
        if task.reference is None:
            raise ConfigError(
                f"{where}: task {task.env} declares no reference: a checkpoint's score is the suite's aggregate, "
                "each task normalised by its reference; add reference: {low: <an untrained score>, high: <an "
                "expert score>} to every task."
            )
        low, high = task.reference
        if not high > low:
            raise ConfigError(
                f"{where}: task {task.env}: its reference {low:g}..{high:g} cannot normalise (high must exceed "
                "low): fix the suite file."
            )
    every = cfg.look_every
    if every is None:
        every = _shared(
            [t.num_envs for t in suite.tasks],
            f"{where}: the tasks' num_envs differ ({{}}) and every round of a look plays the look's episodes: "
            "give --look-every.",
        )
    budget, given = cfg.max_episodes, "--max-episodes"
    if budget is None:
        budget = _shared(
            [t.episodes for t in suite.tasks],
            f"{where}: the tasks' episodes differ ({{}}): give --max-episodes (the most episodes per cell and "
            "checkpoint).",
        )
        given = "the suite's episodes"
    check_look_budget(budget, every, given, f"{where}: ")
    for task in suite.tasks:
        sim = simulator_for(task.env, cfg.env_backend)
        if shared_resets(sim) and every != task.num_envs:
            raise ConfigError(
                f"{where}: {task.env}: --look-every {every} must equal the task's num_envs {task.num_envs}: "
                f"{sim.title} draws reset states from one generator shared by its sub-envs."
            )
    cells = tuple(
        SuiteScore(c.task.env, c.condition_name, c.task.seed, c.task.reference, c.task.bounds)  # type: ignore[arg-type]
        for c in suite.cells()
    )
    many = len(cfg.checkpoints) if not cfg.watch else None
    return SelectionPlan(
        every, budget, float(cfg.margin), float(cfg.alpha), many, 0, aggregate_bounds(cells), suite.name, cells,
        cfg.design,
    )  # fmt: skip


def run_select_best(session: Session, log: ResultsLog, suite: Suite | None = None) -> int:
    """``--select-best`` (on ``suite``'s aggregate, when given) into ``log``'s directory, resuming what is there;
    exit 0."""
    cfg = session.cfg
    plan = plan_of(cfg, suite)
    if suite is None:
        cell_at: Any = lambda look, seed, c: SelectCell(look=look, episodes=plan.look_every, seed=seed)  # noqa: E731
    else:
        cells = [SuiteCell(c, suite.name) for c in suite.cells()]
        cell_at = lambda look, seed, c: SuiteSelectCell(cells[c], look, plan.look_every, seed)  # noqa: E731
    strategy = SelectionStrategy(plan, cell_at)
    records = list(log.records())
    _check_ours(records, plan, log.path)
    found = strategy.replay({"": records})
    steps = [a.step for a in strategy.arms if a.step is not None]
    strategy.closing = reached(cfg.until_step, steps)
    if found.looks:
        print(f"resuming: {found.looks} round(s) already in {log.path}.", flush=True)
    who = f"the checkpoints in {cfg.watch}" if cfg.watch else f"{len(cfg.checkpoints)} checkpoints"
    on = "" if suite is None else f" on suite {suite.name}'s aggregate ({len(plan.cells)} cell(s))"
    per = "" if suite is None else " and cell"
    print(
        f"select-best among {who}{on}: looks of {plan.look_every} episode(s), at most {plan.max_episodes} per "
        f"checkpoint{per}, margin {plan.margin:g}{plan.units_note}, alpha {plan.alpha:g}"
        + (", planned looks (group-sequential)" if plan.planned_looks else ""),
        flush=True,
    )
    unreadable = {  # files a resume does not read again (unless --retry-failed); an unsettled one it does
        r.get("checkpoint_name") for r in records if r.get("status") == "failed" and r.get("error_kind") == "checkpoint"
    }
    code = Scheduler(session, {"": log}, strategy).run(_source(session, set() if cfg.retry_failed else unreadable))
    final = strategy.result_line()
    if strategy.stop is not None and not any(r.get("status") == "selection" for r in records):
        log.append(final, publish=False)
    return code


def _source(session: Session, seen: set[str]) -> CheckpointSource:
    """The run's checkpoints: ``--watch``'s (skipping the files named in ``seen``), or the ``--checkpoint`` list."""
    cfg = session.cfg
    if cfg.watch:
        check_watch_dir(cfg.watch)
        return Watcher(cfg.watch, seen, session.stop, cfg.poll_interval, cfg.format, max_bytes=cfg.max_checkpoint_bytes)
    load = lambda path: load_checkpoint(path, cfg.format, max_bytes=cfg.max_checkpoint_bytes)  # noqa: E731
    return Several([load(p) for p in cfg.checkpoints])


def _check_ours(records: list[dict], plan: SelectionPlan, path: str) -> None:
    """A ConfigError unless every line of ``records`` is a round (or the result) of a selection run with ``plan``, or a
    watched file's failed line (unreadable, or still being written)."""
    now = plan.as_data()
    for record in records:
        data = record.get("selection")
        if record.get("status") == "failed" and record.get("error_kind") in ("checkpoint", "unsettled"):
            continue  # a watched file that could not be read, or was still being written: no round of the run
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path} holds lines of another run (no 'selection' field): one results directory holds one "
                "selection run; give another --out."
            )
        differ = [f"{k} {data.get(k)!r} (now {v!r})" for k, v in now.items() if data.get(k) != v]
        design = data.get("design", "anytime")  # recorded only when planned
        if design != plan.design:
            differ.append(f"design {design!r} (now {plan.design!r})")
        if differ:
            raise ConfigError(
                f"{path} holds a selection run with {'; '.join(differ)}: resume with the same flags, or give "
                "another --out."
            )


def _shared(values: list[int], refusal: str) -> int:
    """The one value every task has; a ConfigError ``refusal`` (``{}``: the values) when they differ."""
    sizes = sorted(set(values))
    if len(sizes) > 1:
        raise ConfigError(refusal.format(", ".join(map(str, sizes))))
    return sizes[0]
