"""The look-by-look runs: ``--until-decided`` (B against a baseline A) and ``--until-precise`` (one checkpoint).

Each cell is evaluated **look by look** (:class:`CellLooks`): look ``L`` is one round of
``K`` episodes per checkpoint on the look's seed (:func:`simeval.conditions.look_seed`).
Once a look's rounds are all in (A's and B's), the cell's confidence sequence
(:class:`simeval.sequential.LookPlan`: ``paired`` or ``mean``) takes the look's episodes
in one update, in A's episode order (B's paired by episode seed), and
``LookPlan.stop`` says whether the cell stops (``decided``, ``equivalent``, ``precise``,
``budget``) or gets another look. A cell whose episodes record success builds its return
sequence at the confidence ``report compare`` gives it beside its success sequence
(``with_success``), known from its first look.

A look's lines are written together once its rounds are in, A's first; the cell's last
look's lines carry ``stop``. A return outside the bounds, or rounds whose seeds differ, fail
the cell (a failed line per side). :meth:`LookStrategy.replay` feeds a run's lines back
through :meth:`LookStrategy.observe`, in look order: the resume and the report rebuild each
cell's sequence by the code that built it live.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from simeval.conditions import look_seed
from simeval.records import retried_on_resume
from simeval.stats.sequential import LookPlan, SequentialMean, SequentialPaired
from simeval.strategies.base import (
    EpisodeError,
    Failure,
    Job,
    Replayed,
    Step,
    Strategy,
    StrategyKind,
    Write,
    values_of,
)


@dataclass
class CellLooks:
    """One cell's looks: its plan, its sequence so far, the look it is at, and why it stopped."""

    cell: Any
    """The launcher's cell (opaque here), or None where only the sequence is replayed (the report)."""
    name: str
    """``TASK / CONDITION``: how messages and the sequence name the cell."""
    key: tuple
    """(task, condition)."""
    plan: LookPlan
    bounds: tuple[float, float] | None = None
    """The task's declared bounds on one episode's return."""
    seed: int = 0
    """The task's seed: look ``L``'s is ``look_seed(seed, L)``."""
    look: int = 0
    """The look being evaluated, or the next one."""
    seq: SequentialPaired | SequentialMean | None = None
    """Built at the first look (``with_success`` is known then)."""
    stop: str | None = None
    error: str | None = None
    arrived: dict[str, tuple] = field(default_factory=dict)
    """This look's rounds in so far: side -> (job, result, seconds, slot as it was)."""
    deterministic: bool = False
    """Whether the task is declared deterministic (the suite's ``deterministic: true``): identical differences
    are then a verdict (:meth:`LookPlan.paired`)."""

    @property
    def over(self) -> bool:
        """Stopped, or failed: no more looks."""
        return self.stop is not None or self.error is not None

    @property
    def look_seed(self) -> int:
        """The seed of the current look."""
        return look_seed(self.seed, self.look)

    def take(
        self, returns_a: Sequence[float], returns_b: Sequence[float] | None = None, with_success: bool = False
    ) -> None:
        """One look's returns in one update: A's and B's (B's in A's episode order) into the paired sequence, or
        one checkpoint's (``returns_b`` None) into the mean's; the first look builds the sequence.

        Raises:
            ValueError: a return that is not finite or lies outside the bounds (the message names the cell).
        """
        if returns_b is not None:
            if self.seq is None:
                self.seq = self.plan.paired(
                    self.bounds, self.name, with_success=with_success, deterministic=self.deterministic
                )
            self.seq.update(returns_a, returns_b)
        else:
            if self.seq is None:
                self.seq = self.plan.mean(self.bounds, self.name)
            self.seq.update(returns_a)

    def decide(self) -> str | None:
        """Why the cell stops after the looks taken so far (the plan's rule), None: another look."""
        return self.plan.stop(self.seq)

    def advance(self, episodes: Mapping[str, tuple[list[float], list[int] | None, bool]]) -> str | None:
        """Take one look's episodes (side -> returns, seeds, records success) in one update; why it stops.

        Raises:
            ValueError: a return outside the bounds, or A and B ran other episodes (names the cell).
        """
        if self.plan.rule == "until-decided":
            returns_a, seeds_a, success_a = episodes["A"]
            returns_b, seeds_b, success_b = episodes["B"]
            self.take(returns_a, in_order_of(seeds_a, seeds_b, returns_b, self.name), success_a or success_b)
        else:
            ((returns, _, _),) = episodes.values()
            self.take(returns)
        return self.decide()


def in_order_of(seeds_a: list[int] | None, seeds_b: list[int] | None, returns_b: list[float], name: str) -> list:
    """B's returns in A's episode order, paired by episode seed; ValueError when the two ran other episodes."""
    if seeds_a is None or seeds_b is None:
        raise ValueError(f"{name}: a round recorded no episode seeds, so A's and B's episodes cannot be paired.")
    if seeds_a == seeds_b:
        return list(returns_b)
    where = {s: i for i, s in enumerate(seeds_b)}
    if sorted(seeds_a) != sorted(seeds_b) or len(where) != len(seeds_b):
        raise ValueError(f"{name}: A and B ran other episodes (their episode seeds differ): they cannot be paired.")
    return [returns_b[where[s]] for s in seeds_a]


class LookStrategy(Strategy):
    """Each cell's current look, every side's round of it, then the cell's next look or its stop.

    ``sides``: the run's checkpoints, each with ``label`` (``"A"``, ``"B"``, or ``""``), ``ck`` and ``name``
    (A first); ``cell_at(run)``: the launcher's cell for ``run``'s current look (its ``key`` ends with the look).
    """

    name: ClassVar[str] = "looks"

    def __init__(self, sides: Sequence[Any], runs: list[CellLooks], cell_at: Callable[[CellLooks], Any]) -> None:
        self.sides, self.runs, self.cell_at = list(sides), runs, cell_at
        self._next: list[CellLooks] = [r for r in runs if not r.over]  # cells whose next look is not queued yet

    def propose(self) -> list[Job]:
        """Every side's round of the next look of each cell that got one since the last call (A's first)."""
        jobs = []
        for run in self._next:
            cell = self.cell_at(run)
            jobs += [Job(s.ck, cell, s.name, s.label, run.look, run.look_seed, run) for s in self.sides]
        self._next = []
        return jobs

    def observe(self, job: Job, result: Mapping[str, Any], seconds: float = 0.0, slot: Any = None) -> Step:
        """Hold the round until every side's round of its look is in; then close the look."""
        run = job.owner
        if run.over:
            return Step()  # the look's other round failed: nothing of it is written
        run.arrived[job.side] = (job, result, seconds, slot)
        if len(run.arrived) < len(self.sides):
            return Step()
        return self._close(run)

    def _close(self, run: CellLooks) -> Step:
        """Update the cell's sequence with the look; its lines (A's first); its next look, or its stop."""
        arrived, run.arrived = run.arrived, {}
        fields = {"look": run.look, "sequential": run.plan.as_data()}
        try:
            stop = run.advance({side: values_of(entry[1]) for side, entry in arrived.items()})
        except ValueError as exc:
            run.error = str(exc)
            failures = [Failure(arrived[s.label][0], EpisodeError(str(exc)), fields) for s in self.sides]
            return Step(failures=failures, message=f"{run.name} look {run.look} failed: {exc}")
        look = (run.look, fields["sequential"], stop)
        writes = [Write(*arrived[s.label], look=look) for s in self.sides]
        message = self.progress(run, stop)
        if stop is not None:
            run.stop = stop
        else:
            run.look += 1
            self._next.append(run)
        return Step(writes=writes, message=message)

    def failed(self, job: Job, error: BaseException) -> Step:
        """A round that could not run: its failed line; the cell stops (a resume may retry the look)."""
        run = job.owner
        if run.over:
            return Step()
        run.error, run.arrived = _first_line(error), {}
        fields = {"look": job.look, "sequential": run.plan.as_data()}
        who = f"{job.side} " if job.side else ""
        return Step(
            failures=[Failure(job, error, fields)], message=f"{who}{job.cell.label(job.name)} failed: {run.error}"
        )

    def wants(self, job: Job) -> bool:
        """A queued round of a cell that failed is dropped."""
        return not job.owner.over

    @property
    def finished(self) -> bool:
        """No cell has a next look to propose."""
        return not self._next

    def replay(
        self,
        lines: Mapping[str, list[dict]],
        retry_failed: bool = False,
        check: Callable[[dict, CellLooks, Any], None] | None = None,
    ) -> Replayed:
        """Rebuild each cell's sequence from the looks in every side's lines, in look order, through :meth:`observe`.

        The newest line of each (cell, look) counts. A failed look is retried when a resume retries its line
        (``retry: "resume"``, or ``retry_failed``), else the cell stays failed; a look found for some sides
        only is evaluated again for all. ``check(line, run, side)`` may refuse a line (it raises).
        """
        newest = {
            s.label: {(r["task"], r["condition"], r["look"]): r for r in lines.get(s.label, [])} for s in self.sides
        }
        found = Replayed()
        for run in self.runs:
            while not run.over:
                records = [newest[s.label].get((*run.key, run.look)) for s in self.sides]
                failed = [r for r in records if r is not None and r.get("status") != "ok"]
                if failed:  # a side's round failed (the other side's line was never written): retried, or left
                    if any(retried_on_resume(r, retry_failed) for r in failed):
                        found.retried += 1  # this look is evaluated again
                    else:
                        run.error, found.left = str(failed[0].get("error", "failed")), found.left + 1
                    break
                if any(r is None for r in records):
                    break  # in one file only, or in none: evaluated (again) for both
                if check is not None:
                    for side, record in zip(self.sides, records, strict=True):
                        check(record, run, side)
                cell = self.cell_at(run)
                for side, record in zip(self.sides, records, strict=True):
                    self.observe(Job(side.ck, cell, side.name, side.label, run.look, run.look_seed, run), record)
                if run.error is None:
                    found.looks += 1
        found.stopped = sum(r.stop is not None for r in self.runs)
        self._next = [r for r in self.runs if not r.over]
        return found

    def progress(self, run: CellLooks, stop: str | None) -> str:
        """One look of one cell in a line: episodes so far, the interval, and whether the cell stops."""
        seq = run.seq
        then = f"stop ({stop})" if stop else "next look"
        if isinstance(seq, SequentialPaired):
            return (
                f"look {run.look} {run.name}: {seq.n} episodes each, B - A {seq.diff:+.2f} "
                f"[{_num(seq.low)}, {_num(seq.high)}] {seq.verdict}: {then}"
            )
        target = run.plan.precision * (abs(seq.mean) if run.plan.relative else 1.0)
        return (
            f"look {run.look} {run.name}: {seq.n} episodes, mean {seq.mean:.2f} "
            f"[{_num(seq.low)}, {_num(seq.high)}] +/-{_num(seq.half_width, sign=False)} "
            f"(target +/-{target:.2f}): {then}"
        )

    def table(self) -> str:
        """Every cell's outcome, and the episodes used against a fixed run's."""
        decided = len(self.sides) == 2
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
            cells.append((run.name, shown, n, why))
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


class UntilDecided(StrategyKind):
    """The built-in ``--until-decided``: B against a baseline A, look by look, until each cell is decided."""

    name: ClassVar[str] = "until-decided"
    summary: ClassVar[str] = "is B better than A on each cell: looks until decided, equivalent or the budget"
    modes: ClassVar[tuple[str, ...]] = ("until-decided",)

    @property
    def strategy(self) -> type[Strategy]:
        """:class:`LookStrategy` with two sides."""
        return LookStrategy


class UntilPrecise(StrategyKind):
    """The built-in ``--until-precise``: one checkpoint, look by look, until each cell's mean is precise."""

    name: ClassVar[str] = "until-precise"
    summary: ClassVar[str] = "each cell's mean to a half-width: looks until precise or the budget"
    modes: ClassVar[tuple[str, ...]] = ("until-precise",)

    @property
    def strategy(self) -> type[Strategy]:
        """:class:`LookStrategy` with one side."""
        return LookStrategy
