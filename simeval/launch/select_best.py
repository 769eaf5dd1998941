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
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import load_checkpoint
from simeval.launch.adaptive import check_look_budget
from simeval.launch.cells import Nominal
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.scheduler import Scheduler, reached
from simeval.launch.sources import CheckpointSource, Watcher, check_watch_dir
from simeval.strategies import SelectionPlan, SelectionStrategy

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session


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


def plan_of(cfg: LaunchConfig) -> SelectionPlan:
    """The run's selection plan from its flags; a one-line ConfigError for a look or budget that cannot be played."""
    if cfg.suite:
        raise ConfigError(
            "--select-best chooses on one task for now: leave --suite out (a suite's aggregate score is not wired yet)."
        )
    every = cfg.look_every or cfg.num_envs
    budget = cfg.max_episodes or cfg.episodes
    given = "--max-episodes" if cfg.max_episodes else "--episodes"
    if cfg.seed is None:
        raise ConfigError("--select-best plays every checkpoint on the same seeded episodes: give --seed.")
    check_look_budget(budget, every, given)
    many = len(cfg.checkpoints) if not cfg.watch else None
    return SelectionPlan(every, budget, float(cfg.margin), float(cfg.alpha), many, int(cfg.seed))


def run_select_best(session: Session, log: ResultsLog) -> int:
    """``--select-best`` into ``log``'s directory, resuming what is there; exit 0."""
    cfg = session.cfg
    plan = plan_of(cfg)
    strategy = SelectionStrategy(plan, lambda look, seed: SelectCell(look=look, episodes=plan.look_every, seed=seed))
    records = list(log.records())
    _check_ours(records, plan, log.path)
    found = strategy.replay({"": records})
    steps = [a.step for a in strategy.arms if a.step is not None]
    strategy.closing = reached(cfg.until_step, steps)
    if found.looks:
        print(f"resuming: {found.looks} round(s) already in {log.path}.", flush=True)
    who = f"the checkpoints in {cfg.watch}" if cfg.watch else f"{len(cfg.checkpoints)} checkpoints"
    print(
        f"select-best among {who}: looks of {plan.look_every} episode(s), at most {plan.max_episodes} per "
        f"checkpoint, margin {plan.margin:g}, alpha {plan.alpha:g}",
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
        if differ:
            raise ConfigError(
                f"{path} holds a selection run with {'; '.join(differ)}: resume with the same flags, or give "
                "another --out."
            )
