"""The selection run: choose the best of several checkpoints look by look on common seeds (``--select-best``).

Every checkpoint (an *arm*) plays look ``L`` as one round of ``look_every`` episodes on the
look's seed (:func:`simeval.conditions.look_seed` of the run's seed, as the look-by-look
runs do), so every arm plays the same episodes. Once look ``L``'s rounds of every arm that
plays it are in, one :meth:`simeval.stats.SequentialSelection.update` takes them (rows:
episodes in seed order); arms shown worse than the leader are eliminated and play no further
look; an arm shown within the margin of the leader rests (plays no look) until the leader
changes, and then first plays the looks it missed, on their seeds
(:meth:`~simeval.stats.SequentialSelection.catch_up`). The run stops on ``one left``, ``within margin`` (the
best mean is chosen, equivalent within the margin to the others left) or ``budget``
(``max_episodes`` per arm played: :meth:`~simeval.stats.SequentialSelection.finish`, the
result is the alive set and its leader).

The strategy is *source-fed*: the launcher's scheduler hands it each checkpoint its source
gives (:meth:`SelectionStrategy.jobs_for`: the repeated ``--checkpoint``s, or ``--watch``'s
files). The checkpoints in before look 0 is decided form the first block; one that lands
later plays every look already played (the same seeds) and joins at the next decision
(:meth:`~simeval.stats.SequentialSelection.add_arm`); none joins once the selection stopped
(:attr:`SelectionStrategy.accepting`).

With a suite (:attr:`SelectionPlan.suite`, its :attr:`~SelectionPlan.cells`) an arm plays look
``L`` as one round per cell, each on the cell's look seed (``look_seed`` of its task's seed), and
its per-episode score is the suite's aggregate (:func:`aggregate`): for episode ``i``, the mean
over the cells of the ``i``-th return (in seed order) normalised by the cell's
task ``reference``; the margin and the bounds (:func:`aggregate_bounds`) are in those units.

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
class SuiteScore:
    """One cell of a ``--suite`` selection: its task and condition, the task's seed (look ``L`` plays
    ``look_seed(seed, L)``) and ``reference`` (the untrained and the expert score the cell's returns are normalised
    by), and its declared bounds on one episode's return (or None)."""

    task: str
    condition: str
    seed: int
    reference: tuple[float, float]
    bounds: tuple[float, float] | None = None

    def as_data(self) -> dict[str, Any]:
        """The cell as a line records it."""
        out: dict[str, Any] = {"task": self.task, "condition": self.condition, "seed": self.seed,
                               "reference": list(self.reference)}  # fmt: skip
        if self.bounds is not None:
            out["bounds"] = list(self.bounds)
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SuiteScore:
        """The cell a line recorded (:meth:`as_data`)."""
        ref, bounds = data["reference"], data.get("bounds")
        return cls(
            str(data["task"]), str(data["condition"]), int(data["seed"]), (float(ref[0]), float(ref[1])),
            None if bounds is None else (float(bounds[0]), float(bounds[1])),
        )  # fmt: skip


def normalised(values: list[float], reference: tuple[float, float]) -> list[float]:
    """``values`` in the cell's reference units: ``(x - low) / (high - low)`` (:func:`simeval.stats.normalized`)."""
    from simeval.stats import normalized

    return [float(v) for v in normalized(values, *reference)]


def aggregate(columns: list[list[float]], cells: tuple[SuiteScore, ...]) -> list[float]:
    """The suite's aggregate per episode index: for episode ``i``, the mean over cells of the cell's ``i``-th
    return normalised by its reference (the ``*`` row's units). Each mean is an exact sum (``math.fsum``), so that
    values within the cells' bounds stay within :func:`aggregate_bounds`."""
    scaled = [normalised(col, cell.reference) for col, cell in zip(columns, cells, strict=True)]
    return [math.fsum(row) / len(cells) for row in zip(*scaled, strict=True)]


def aggregate_bounds(cells: tuple[SuiteScore, ...]) -> tuple[float, float] | None:
    """The bounds of :func:`aggregate` when every cell declares bounds (each normalised, then averaged); else None."""
    if not cells or any(c.bounds is None for c in cells):
        return None
    ends = [sorted(normalised(list(c.bounds), c.reference)) for c in cells]  # type: ignore[arg-type]
    return (math.fsum(e[0] for e in ends) / len(cells), math.fsum(e[1] for e in ends) / len(cells))


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
    """On one episode's score (with a suite: the aggregate's, when every task declares bounds)."""
    suite: str | None = None
    """The suite's name (``--suite``): a checkpoint's score is then the suite's aggregate over :attr:`cells`."""
    cells: tuple[SuiteScore, ...] = ()
    design: str = "anytime"
    """``anytime`` (confidence sequences) or ``planned`` (a group-sequential design over exactly the looks
    ``look_every, 2 look_every, ...`` up to the budget; without bounds: with them the betting sequences either way)."""

    def as_data(self) -> dict[str, Any]:
        """The plan as a line records it (a suite's name and cells only with a suite)."""
        data = asdict(self)
        data["bounds"] = None if self.bounds is None else list(self.bounds)
        del data["suite"], data["cells"]
        if self.design == "anytime":
            del data["design"]  # as the lines of runs before planned selections were recorded
        if self.suite is not None:
            data.update(suite=self.suite, cells=[c.as_data() for c in self.cells])
        return {"rule": "select-best", **data}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SelectionPlan:
        """The plan a line recorded (:meth:`as_data`)."""
        bounds = data.get("bounds")
        return cls(
            int(data["look_every"]), int(data["max_episodes"]), float(data.get("margin", 0.0)),
            float(data.get("alpha", 0.05)), data.get("max_arms"), int(data.get("seed", 0)),
            None if bounds is None else (float(bounds[0]), float(bounds[1])),
            data.get("suite"), tuple(SuiteScore.from_data(c) for c in data.get("cells") or ()),
            str(data.get("design", "anytime")),
        )  # fmt: skip

    @property
    def units(self) -> list[tuple[tuple, int]]:
        """Each round of a look an arm plays: (its cell's key, the seed its look seeds derive from). One round of
        the run's seed (key ``()``) without a suite; one per cell with one (key ``(task, condition)``)."""
        if self.suite is None:
            return [((), self.seed)]
        return [((c.task, c.condition), c.seed) for c in self.cells]

    @property
    def units_note(self) -> str:
        """How the scores are measured, for messages: ``""``, or the suite's normalised units."""
        return "" if self.suite is None else " (normalised: a fraction of the reference width)"

    @property
    def looks(self) -> int:
        """The most looks an arm plays."""
        return self.max_episodes // self.look_every

    @property
    def planned_looks(self) -> tuple[int, ...] | None:
        """The episodes per arm after each look, for a planned design without bounds; else None (anytime)."""
        if self.design != "planned" or self.bounds is not None:
            return None
        return tuple(self.look_every * (k + 1) for k in range(self.looks))


@dataclass
class Arm:
    """One checkpoint of the selection: its rounds so far, and where it stands."""

    name: str
    index: int
    """Its arm in the selection (the order checkpoints came in)."""
    ck: Any = None
    """The checkpoint (None until the source gives it, on a replay)."""
    step: int | None = None
    values: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    """Its rounds' returns by (look, cell): cell 0 alone without a suite."""
    seeds: dict[tuple[int, int], list[int] | None] = field(default_factory=dict)
    queued: set[tuple[int, int]] = field(default_factory=set)
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

    ``cell_at(look, seed, cell)``: the launcher's cell for a look's round on the plan's ``cell``-th unit
    (:attr:`SelectionPlan.units`; its ``key`` ends with the look).
    """

    name: ClassVar[str] = "select-best"
    noun: ClassVar[str] = "round(s)"
    backlog: bool = True
    keep_going: bool = False

    def __init__(
        self, plan: SelectionPlan, cell_at: Callable[[int, int, int], Any], deterministic: bool = False
    ) -> None:
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
        """Whether ``arm`` plays the current look: not eliminated, not resting, and the selection not stopped."""
        if self.stop is not None or arm.arrived > self.look:
            return False
        return not arm.joined or arm.index in self.sel.active

    def _first(self, arm: Arm) -> int:
        """The first look ``arm`` is to play: 0 before it joined, else the first the selection lacks (the current
        look, or an earlier one it missed while resting)."""
        return self.sel.looks_played(arm.index) if arm.joined else 0

    def _needs(self, arm: Arm) -> list[tuple[int, int]]:
        if not self.alive(arm):
            return []
        looks = range(self._first(arm), self.look + 1)
        rounds = [(look, c) for look in looks for c in range(len(self.plan.units))]
        return [r for r in rounds if r not in arm.values and r not in arm.queued]

    def _played(self, arm: Arm, look: int) -> bool:
        """Whether every round of ``look`` of ``arm`` (one per cell) is in."""
        return all((look, c) in arm.values for c in range(len(self.plan.units)))

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
            for look, c in self._needs(arm):
                seed = look_seed(self.plan.units[c][1], look)
                jobs.append(Job(arm.ck, self.cell_at(look, seed, c), arm.name, "", look, seed, (arm, c)))
                arm.queued.add((look, c))
        return jobs

    def observe(self, job: Job, result: Mapping[str, Any], seconds: float = 0.0, slot: Any = None) -> Step:
        """The round's line now; the look is decided once every arm in the selection has played it (every cell)."""
        arm, c = job.owner
        check = getattr(job.cell, "check", None)  # a suite task's declared bounds (a replayed line was checked)
        try:
            if check is not None:
                check(result)
        except ValueError as exc:
            return self.failed(job, exc)
        returns, seeds, _ = values_of(result)
        if len(returns) != self.plan.look_every or not all(map(math.isfinite, returns)):
            where = "" if self.plan.suite is None else " {} / {}".format(*self.plan.units[c][0])
            return self.failed(job, EpisodeError(
                f"{arm.name}{where} look {job.look}: {len(returns)} finite episode return(s) of "
                f"{self.plan.look_every} (every round of a look plays the look's episodes)."
            ))  # fmt: skip
        arm.values[job.look, c], arm.seeds[job.look, c] = returns, seeds
        arm.queued.discard((job.look, c))
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
        job.owner[0].queued.discard((job.look, job.owner[1]))
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
            ready = members and all(all(self._played(a, k) for k in range(self._first(a), look + 1)) for a in members)
            if not ready:
                break
            messages.append(self._take(look, members))
        return "\n".join(messages) or None

    def _take(self, look: int, members: list[Arm]) -> str:
        import numpy as np

        from simeval.stats import SequentialSelection

        name = f"look {look}"
        try:
            if self.sel is None:  # its t-mixture tuned for the budget, where the close calls are decided
                self.sel = SequentialSelection(
                    len(members), 1 - self.plan.alpha, self.plan.bounds, self.plan.margin,
                    max_arms=self.plan.max_arms, plan_n=self.plan.max_episodes, deterministic=self.deterministic,
                    looks=self.plan.planned_looks,
                )  # fmt: skip
                for arm in members:
                    arm.joined = True
            for arm in members:  # an arm that rested and plays again: the looks it missed first
                if arm.joined and self._first(arm) < look:
                    missed = [v for k in range(self._first(arm), look) for v in self.scores(arm, k)]
                    self.sel.catch_up(arm.index, missed)
            for arm in members:
                if not arm.joined:
                    past = [v for k in range(look) for v in self.scores(arm, k)]
                    arm.joined = True
                    self.sel.add_arm(past)
            rows = np.full((self.plan.look_every, self.sel.arms), np.nan)
            for arm in members:
                rows[:, arm.index] = self.scores(arm, look)
            self.sel.update(rows)
        except ValueError as exc:
            raise EpisodeError(f"{name}: {exc}") from None
        if self.stop is None and (look + 1) >= self.plan.looks:
            self.sel.finish()
        gaps = self.sel.gaps()
        for index, e in self.sel.eliminated.items():
            if e.look == look + 1:  # eliminated at this look: its last interval is the one that did it
                gaps[index] = (-e.high, -e.low)
        means = {
            i: float(np.mean([v for k in range(self.sel.looks_played(i)) for v in self.scores(self.arms[i], k)]))
            for i in gaps
        }
        self.history.append(LookRecord(look, self.sel.n, self.sel.best, means, gaps))
        if self.stop is None:
            self.look += 1
        return self.progress(self.history[-1])

    def scores(self, arm: Arm, look: int) -> list[float]:
        """``arm``'s per-episode scores at ``look``, its episodes in seed order (so that every arm's ``i``-th score
        is the same episode, whenever it played it): its returns, or with a suite the aggregate
        (:func:`aggregate`) of its cells' rounds.

        Raises:
            ValueError: a round recorded no episode seeds (the message names the checkpoint, look and cell).
        """
        columns = []
        for c, (key, _) in enumerate(self.plan.units):
            where = "" if not key else " {} / {}".format(*key)
            seeds, name = arm.seeds.get((look, c)), f"{arm.name}{where} look {look}"
            if seeds is None:
                raise ValueError(f"{name}: the round recorded no episode seeds, so its episodes cannot be paired.")
            columns.append(in_order_of(sorted(seeds), seeds, arm.values[look, c], name))
        return columns[0] if self.plan.suite is None else aggregate(columns, self.plan.cells)

    # ------------------------------------------------------------------------------------------ replay

    def replay(self, lines: Mapping[str, list[dict]], retry_failed: bool = False) -> Replayed:
        """Rebuild the selection from a run's lines: each arm in its recorded order, its rounds through
        :meth:`observe` (the newest line of each (checkpoint, look, cell) counts), look by look."""
        records = [r for r in lines.get("", []) if r.get("status") == "ok" and isinstance(r.get("selection"), dict)]
        cells = {key: c for c, (key, _) in enumerate(self.plan.units)}
        newest = {}
        for r in records:
            key = (r.get("task"), r.get("condition")) if self.plan.suite is not None else ()
            if key in cells:
                newest[r["checkpoint_name"], int(r["look"]), cells[key]] = r
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
        by_look = sorted(newest.items(), key=lambda kv: (kv[0][1], kv[1]["selection"]["arm"], kv[0][2]))
        for (name, look, c), record in by_look:
            arm = next((a for a in self.arms if a.name == name), None)
            if arm is None or self.stop is not None:
                continue
            seed = look_seed(self.plan.units[c][1], look)
            self.observe(Job(None, self.cell_at(look, seed, c), name, "", look, seed, (arm, c)), record)
            found.looks += 1
        found.stopped = int(self.stop is not None)
        return found

    # ------------------------------------------------------------------------------------------ saying it

    def progress(self, rec: LookRecord) -> str:
        """One look in a line: episodes each, the leader, who is left, and whether it stops."""
        leader = self.arms[rec.leader].name
        left = len(self.sel.alive) if rec is self.history[-1] else len(rec.gaps)
        resting = len(self.sel.resting) if rec is self.history[-1] and self.stop is None else 0
        then = f"stop ({self.stop})" if self.stop else "next look"
        if resting:
            then = f"{resting} resting (within the margin of the leader), next look"
        each, digits = ("each", 2) if self.plan.suite is None else (f"each on {len(self.plan.cells)} cell(s)", 3)
        score = "" if self.plan.suite is None else " normalised"
        return (
            f"look {rec.look}: {rec.episodes} episodes {each}, leader {leader} ({rec.means[rec.leader]:.{digits}f}"
            f"{score}), {left} of {len(self.arms)} checkpoint(s) left: {then}"
        )

    def rows(self) -> list[dict[str, Any]]:
        """Each arm's row of the selection table: name, step, episodes, mean, gap to the leader, outcome.

        With a suite, ``episodes`` counts each cell's (the aggregate's) and ``mean`` is the aggregate's over the
        looks whose every cell is in, in normalised units."""
        import numpy as np

        sel, out = self.sel, []
        for arm in self.arms:
            looks = sorted({k for k, _ in arm.values if self._played(arm, k)})
            played = [x for k in looks for x in self.scores(arm, k)]
            n = len(played)
            mean = float(np.mean(played)) if n else math.nan
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
                    if self.plan.suite is not None:
                        row["outcome"] += " (normalised)"
                else:
                    row["outcome"] = "leader" if arm.index == sel.best else "alive"
                if sel.looks_played(arm.index) < sel.looks:  # it rested: its last looks were not played
                    row["outcome"] += f" (rested after look {sel.looks_played(arm.index) - 1})"
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
            within = f"{self.plan.margin:g}{self.plan.units_note}"
            return f"chosen: {name(sel.best)}, equivalent within {within} to {others}."
        state = "budget spent" if self.stop == "budget" else "still running"
        alive = ", ".join(name(a) for a in sel.alive)
        return f"{state}: not separated: {alive} (the best is among them); {name(sel.best)} leads."

    def table(self) -> str:
        """The selection table, the result line, and the episodes used against a fixed sweep's."""
        rows = self.rows()
        suite = self.plan.suite is not None
        digits, mean_head, mw = (3, "norm. mean", 10) if suite else (2, "mean", 9)
        width = max([len("checkpoint")] + [len(r["checkpoint"]) for r in rows])
        gap_head = "gap to leader [low, high]"
        lines = []
        if suite:
            lines.append(
                f"suite {self.plan.suite}: each checkpoint's score is the aggregate of {len(self.plan.cells)} cell(s), "
                "normalised by each task's reference (0: low, 1: high); means, gaps and the margin in those units"
            )
        lines.append(
            f"{'checkpoint':<{width}}  {'step':>10}  {'episodes':>8}  {mean_head:>{mw}}  {gap_head:<27}  outcome"
        )
        for r in rows:
            gap = "-" if r["gap"] is None else f"[{_num(r['gap'][0], digits)}, {_num(r['gap'][1], digits)}]"
            step = "-" if r["step"] is None else str(r["step"])
            lines.append(
                f"{r['checkpoint']:<{width}}  {step:>10}  {r['episodes']:>8}  {r['mean']:>{mw}.{digits}f}  {gap:<27}  "
                f"{r['outcome']}"
            )
        used = sum(r["episodes"] for r in rows)
        sweep = self.plan.max_episodes * len(rows)
        lines.append(self.describe())
        if sweep:
            per = " per cell" if suite else ""
            lines.append(
                f"episodes{per}: {used} of the {sweep} a fixed sweep evaluates ({len(rows)} checkpoint(s) x "
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


def _num(value: float, digits: int = 2) -> str:
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return f"{value:+.{digits}f}"


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
