"""The selection run: choose the best of several checkpoints look by look on common seeds (``--select-best``).

Every checkpoint (an *arm*) plays look ``L`` as one round of ``look_every`` episodes on the
look's seed (:func:`simeval.conditions.look_seed` of the run's seed, as the look-by-look
runs do), so every arm plays the same episodes. Once look ``L``'s rounds of every arm still
in the selection are in, one :meth:`simeval.stats.SequentialSelection.update` takes them
(rows: episodes in the first arm's seed order); arms shown worse than the leader are
eliminated and play no further look. The run stops on ``one left``, ``within margin`` (the
best mean is chosen, equivalent within the margin to the others left) or ``budget``
(``max_episodes`` per arm played: :meth:`~simeval.stats.SequentialSelection.finish`, the
result is the alive set and its leader).

The strategy is *source-fed*: the launcher's scheduler hands it each checkpoint its source
gives (:meth:`SelectionStrategy.jobs_for`: the repeated ``--checkpoint``s, or ``--watch``'s
files). The checkpoints in before look 0 is decided form the first block; one that lands
later plays every look already played (the same seeds) and joins at the next decision
(:meth:`~simeval.stats.SequentialSelection.add_arm`); none joins once the selection stopped
(:attr:`SelectionStrategy.accepting`).

Each round is one line, written when it is in: the ordinary line with ``look`` and
``selection`` (:meth:`SelectionPlan.as_data` and the arm's index). :meth:`replay` feeds the
lines back through :meth:`observe`, so a resume and the report rebuild the selection by the
code that made it live; the launcher then writes one final line (:meth:`result_line`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from simeval.conditions import look_seed
from simeval.strategies.base import EpisodeError, Failure, Job, Replayed, Step, Strategy, StrategyKind, Write, values_of
from simeval.strategies.looks import in_order_of


@dataclass(frozen=True)
class SelectionPlan:
    """What a selection run is asked: its looks, budget, margin, error and (a list of checkpoints) its arms."""

    look_every: int
    max_episodes: int
    margin: float = 0.0
    alpha: float = 0.05
    max_arms: int | None = None
    """The number of ``--checkpoint``s (the whole alpha over them); None: open-ended (``--watch``)."""
    seed: int = 0
    bounds: tuple[float, float] | None = None

    def as_data(self) -> dict[str, Any]:
        """The plan as a line records it."""
        data = asdict(self)
        data["bounds"] = None if self.bounds is None else list(self.bounds)
        return {"rule": "select-best", **data}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SelectionPlan:
        """The plan a line recorded (:meth:`as_data`)."""
        bounds = data.get("bounds")
        return cls(
            int(data["look_every"]), int(data["max_episodes"]), float(data.get("margin", 0.0)),
            float(data.get("alpha", 0.05)), data.get("max_arms"), int(data.get("seed", 0)),
            None if bounds is None else (float(bounds[0]), float(bounds[1])),
        )  # fmt: skip

    @property
    def looks(self) -> int:
        """The most looks an arm plays."""
        return self.max_episodes // self.look_every


@dataclass
class Arm:
    """One checkpoint of the selection: its rounds so far, and where it stands."""

    name: str
    index: int
    """Its arm in the selection (the order checkpoints came in)."""
    ck: Any = None
    """The checkpoint (None until the source gives it, on a replay)."""
    step: int | None = None
    values: dict[int, list[float]] = field(default_factory=dict)
    seeds: dict[int, list[int] | None] = field(default_factory=dict)
    queued: set[int] = field(default_factory=set)
    arrived: int = 0
    """The look being played when it came in: it joins the selection when that look is decided."""
    joined: bool = False
    """Taken into the selection's sequences (the first block at look 0, a later one by ``add_arm``)."""


@dataclass(frozen=True)
class LookRecord:
    """The selection after one look: each arm's mean and interval for its gap to the leader (those alive, and those
    this look eliminated), and the leader."""

    look: int
    episodes: int
    leader: int
    means: dict[int, float]
    gaps: dict[int, tuple[float, float]]


class SelectionStrategy(Strategy):
    """Successive elimination over the checkpoints a source gives, look by look (see the module docstring).

    ``cell_at(look, seed)``: the launcher's cell for a look's round (its ``key`` ends with the look).
    """

    name: ClassVar[str] = "select-best"
    noun: ClassVar[str] = "round(s)"
    backlog: bool = True
    keep_going: bool = False

    def __init__(self, plan: SelectionPlan, cell_at: Callable[[int, int], Any], deterministic: bool = False) -> None:
        self.plan, self.cell_at, self.deterministic = plan, cell_at, deterministic
        self.arms: list[Arm] = []
        self.sel: Any = None  # the SequentialSelection, built when look 0 is decided
        self.look = 0
        """The look being played (the looks decided so far)."""
        self.history: list[LookRecord] = []
        self.closing = False
        self.scope: dict = {}

    # ------------------------------------------------------------------------------------------ reading

    @property
    def stop(self) -> str | None:
        """Why the selection stopped (``one left``, ``within margin``, ``budget``), None while it runs."""
        return None if self.sel is None else self.sel.reason

    @property
    def accepting(self) -> bool:
        """Whether a checkpoint the source gives may still join (not once the selection stopped)."""
        return self.stop is None

    def alive(self, arm: Arm) -> bool:
        """Whether ``arm`` still plays: not eliminated, and the selection not stopped."""
        if self.stop is not None or arm.arrived > self.look:
            return False
        return not arm.joined or arm.index in self.sel.alive

    def _needs(self, arm: Arm) -> list[int]:
        if not self.alive(arm):
            return []
        looks = [self.look] if arm.joined else range(self.look + 1)
        return [look for look in looks if look not in arm.values and look not in arm.queued]

    # ------------------------------------------------------------------------------------------ the seam

    def jobs_for(self, ck: Any, name: str) -> list[Job]:
        """Take checkpoint ``ck`` (named ``name``) from the source: a new arm, or the checkpoint of an arm a replay
        found; the rounds it is to play now."""
        arm = next((a for a in self.arms if a.name == name), None)
        if arm is None:
            if not self.accepting:
                return []
            arm = Arm(name, len(self.arms), step=getattr(ck, "step", None), arrived=self.look)
            self.arms.append(arm)
        arm.ck = ck
        return self.propose()

    def propose(self) -> list[Job]:
        """Every round an arm whose checkpoint is in is to play now and is not queued for."""
        jobs = []
        for arm in self.arms:
            if arm.ck is None:
                continue
            for look in self._needs(arm):
                seed = look_seed(self.plan.seed, look)
                jobs.append(Job(arm.ck, self.cell_at(look, seed), arm.name, "", look, seed, arm))
                arm.queued.add(look)
        return jobs

    def observe(self, job: Job, result: Mapping[str, Any], seconds: float = 0.0, slot: Any = None) -> Step:
        """The round's line now; the look is decided once every arm in the selection has played it."""
        arm: Arm = job.owner
        returns, seeds, _ = values_of(result)
        if len(returns) != self.plan.look_every or not all(map(math.isfinite, returns)):
            return self.failed(job, EpisodeError(
                f"{arm.name} look {job.look}: {len(returns)} finite episode return(s) of {self.plan.look_every}."
            ))  # fmt: skip
        arm.values[job.look], arm.seeds[job.look] = returns, seeds
        arm.queued.discard(job.look)
        fields = {"look": job.look, "selection": {**self.plan.as_data(), "arm": arm.index, "arrived": arm.arrived}}
        writes = [Write(job, dict(result), seconds, slot, fields=fields)]
        try:
            message = self._decide()
        except EpisodeError as exc:
            return Step(failures=[Failure(job, exc, fields)])
        return Step(writes=writes, message=message)

    def failed(self, job: Job, error: BaseException) -> Step:
        """A round that could not be evaluated: its failed line, and the run's error (:attr:`keep_going` False: a
        resume evaluates it again)."""
        job.owner.queued.discard(job.look)
        return Step(failures=[Failure(job, error, {"look": job.look})])

    @property
    def finished(self) -> bool:
        """Nothing is left to propose, or the selection stopped."""
        return self.stop is not None or not any(self._needs(a) for a in self.arms)

    # ------------------------------------------------------------------------------------------ deciding

    def _decide(self) -> str | None:
        """Decide the current look if every arm in the selection has played it; the progress lines."""
        messages = []
        while self.stop is None:
            look = self.look
            members = [a for a in self.arms if self.alive(a)]
            ready = members and all(
                look in a.values and (a.joined or all(k in a.values for k in range(look))) for a in members
            )
            if not ready:
                break
            messages.append(self._take(look, members))
        return "\n".join(messages) or None

    def _take(self, look: int, members: list[Arm]) -> str:
        import numpy as np

        from simeval.stats import SequentialSelection

        first = members[0]
        name = f"look {look}"

        def ordered(arm: Arm, k: int) -> list[float]:
            return in_order_of(first.seeds.get(k), arm.seeds.get(k), arm.values[k], f"{arm.name} {name}")

        try:
            if self.sel is None:  # its t-mixture tuned for the budget, where the close calls are decided
                self.sel = SequentialSelection(
                    len(members), 1 - self.plan.alpha, self.plan.bounds, self.plan.margin,
                    max_arms=self.plan.max_arms, plan_n=self.plan.max_episodes, deterministic=self.deterministic,
                )  # fmt: skip
                for arm in members:
                    arm.joined = True
            for arm in members:
                if not arm.joined:
                    past = [v for k in range(look) for v in ordered(arm, k)]
                    arm.joined = True
                    self.sel.add_arm(past)
            rows = np.full((self.plan.look_every, self.sel.arms), np.nan)
            for arm in members:
                rows[:, arm.index] = ordered(arm, look)
            self.sel.update(rows)
        except ValueError as exc:
            raise EpisodeError(f"{name}: {exc}") from None
        if self.stop is None and (look + 1) >= self.plan.looks:
            self.sel.finish()
        gaps = self.sel.gaps()
        for index, e in self.sel.eliminated.items():
            if e.look == look + 1:  # eliminated at this look: its last interval is the one that did it
                gaps[index] = (-e.high, -e.low)
        means = {a.index: float(np.mean([v for k in range(look + 1) for v in a.values[k]])) for a in members}
        self.history.append(LookRecord(look, self.sel.n, self.sel.best, means, gaps))
        if self.stop is None:
            self.look += 1
        return self.progress(self.history[-1])

    # ------------------------------------------------------------------------------------------ replay

    def replay(self, lines: Mapping[str, list[dict]], retry_failed: bool = False) -> Replayed:
        """Rebuild the selection from a run's lines: each arm in its recorded order, its rounds through
        :meth:`observe` (the newest line of each (checkpoint, look) counts), look by look."""
        records = [r for r in lines.get("", []) if r.get("status") == "ok" and isinstance(r.get("selection"), dict)]
        newest = {(r["checkpoint_name"], int(r["look"])): r for r in records}
        names = {
            int(r["selection"]["arm"]): (r["checkpoint_name"], r.get("step"), int(r["selection"].get("arrived", 0)))
            for r in newest.values()
        }
        found = Replayed()
        for index in sorted(names):
            if index != len(self.arms):
                break  # an arm whose predecessor left no line: the rest is evaluated again
            name, step, arrived = names[index]
            self.arms.append(Arm(name, index, step=step, arrived=arrived))
        by_look = sorted(newest.items(), key=lambda kv: (kv[0][1], kv[1]["selection"]["arm"]))
        for (name, look), record in by_look:
            arm = next((a for a in self.arms if a.name == name), None)
            if arm is None or self.stop is not None:
                continue
            seed = look_seed(self.plan.seed, look)
            self.observe(Job(None, self.cell_at(look, seed), name, "", look, seed, arm), record)
            found.looks += 1
        found.stopped = int(self.stop is not None)
        return found

    # ------------------------------------------------------------------------------------------ saying it

    def progress(self, rec: LookRecord) -> str:
        """One look in a line: episodes each, the leader, who is left, and whether it stops."""
        leader = self.arms[rec.leader].name
        left = len(self.sel.alive) if rec is self.history[-1] else len(rec.gaps)
        then = f"stop ({self.stop})" if self.stop else "next look"
        return (
            f"look {rec.look}: {rec.episodes} episodes each, leader {leader} ({rec.means[rec.leader]:.2f}), "
            f"{left} of {len(self.arms)} checkpoint(s) left: {then}"
        )

    def rows(self) -> list[dict[str, Any]]:
        """Each arm's row of the selection table: name, step, episodes, mean, gap to the leader, outcome."""
        import numpy as np

        sel, out = self.sel, []
        for arm in self.arms:
            n = sum(len(v) for v in arm.values.values())
            mean = float(np.mean([x for v in arm.values.values() for x in v])) if n else math.nan
            row: dict[str, Any] = {"checkpoint": arm.name, "step": arm.step, "episodes": n, "mean": mean}
            if sel is None or not arm.joined:
                row.update(gap=None, outcome="not decided")
            elif arm.index in sel.eliminated:
                e = sel.eliminated[arm.index]
                row.update(gap=(-e.high, -e.low), outcome=f"eliminated at look {e.look - 1}")
            else:
                row["gap"] = sel.gap(arm.index)
                chosen = self.stop in ("one left", "within margin") and arm.index == sel.best
                if chosen:
                    row["outcome"] = "chosen"
                elif self.stop == "within margin":
                    row["outcome"] = f"equivalent within {self.plan.margin:g}"
                else:
                    row["outcome"] = "leader" if arm.index == sel.best else "alive"
            out.append(row)
        return out

    def describe(self) -> str:
        """The result in one line, said as what it is (a choice, equivalence within the margin, or the budget's
        alive set and its leader)."""
        if self.sel is None:
            return "no look decided yet."
        sel, name = self.sel, lambda i: self.arms[i].name
        others = ", ".join(name(a) for a in sel.alive if a != sel.best)
        if self.stop == "one left":
            return f"chosen: {name(sel.best)} (every other checkpoint was shown worse)."
        if self.stop == "within margin":
            return f"chosen: {name(sel.best)}, equivalent within {self.plan.margin:g} to {others}."
        state = "budget spent" if self.stop == "budget" else "still running"
        alive = ", ".join(name(a) for a in sel.alive)
        return f"{state}: not separated: {alive} (the best is among them); {name(sel.best)} leads."

    def table(self) -> str:
        """The selection table, the result line, and the episodes used against a fixed sweep's."""
        rows = self.rows()
        width = max([len("checkpoint")] + [len(r["checkpoint"]) for r in rows])
        gap_head = "gap to leader [low, high]"
        lines = [f"{'checkpoint':<{width}}  {'step':>10}  {'episodes':>8}  {'mean':>9}  {gap_head:<27}  outcome"]
        for r in rows:
            gap = "-" if r["gap"] is None else f"[{_num(r['gap'][0])}, {_num(r['gap'][1])}]"
            step = "-" if r["step"] is None else str(r["step"])
            lines.append(
                f"{r['checkpoint']:<{width}}  {step:>10}  {r['episodes']:>8}  {r['mean']:>9.2f}  {gap:<27}  "
                f"{r['outcome']}"
            )
        used = sum(r["episodes"] for r in rows)
        sweep = self.plan.max_episodes * len(rows)
        lines.append(self.describe())
        if sweep:
            lines.append(
                f"episodes: {used} of the {sweep} a fixed sweep evaluates ({len(rows)} checkpoint(s) x "
                f"{self.plan.max_episodes}): {100 * used / sweep:.0f}%"
            )
        return "\n".join(lines)

    def result_line(self) -> dict[str, Any]:
        """The run's final line: the chosen checkpoint, those it could not be separated from, each eliminated one's
        look and interval, why it stopped."""
        sel, name = self.sel, lambda i: self.arms[i].name
        eliminated = {
            name(i): {"look": e.look - 1, "episodes": e.episodes, "by": name(e.by), "gap": [-e.high, -e.low]}
            for i, e in (sel.eliminated.items() if sel is not None else ())
        }
        best = name(sel.best) if sel is not None else None
        chosen = best if self.stop in ("one left", "within margin") else None
        alive = [name(a) for a in sel.alive] if sel is not None else []
        return {
            "status": "selection",
            "selection": {**self.plan.as_data(), "stop": self.stop, "chosen": chosen, "leader": best,
                          "not_separated": [a for a in alive if a != chosen], "eliminated": eliminated,
                          "episodes": sel.n if sel is not None else 0, "result": self.describe()},
        }  # fmt: skip


def _num(value: float) -> str:
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return f"{value:+.2f}"


class SelectBest(StrategyKind):
    """The built-in ``--select-best``: the best of several checkpoints, look by look on common seeds."""

    name: ClassVar[str] = "select-best"
    summary: ClassVar[str] = (
        "which checkpoint is best: looks until one is left, all left are within a margin, or the budget"
    )
    modes: ClassVar[tuple[str, ...]] = ("select-best",)

    @property
    def strategy(self) -> type[Strategy]:
        """:class:`SelectionStrategy`."""
        return SelectionStrategy
