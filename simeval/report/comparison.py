"""Is B better than A, cell by cell and overall? The comparison computed once, for every rendering.

A run directory's results.jsonl holds one line per evaluated (checkpoint,
cell), a cell being a suite's (task, condition); a plain evaluation's line is
the cell (its env, ``nominal``). For every cell both runs evaluated, the two
runs' episodes are paired by their ``episode_seeds`` (the same episodes, so
the difference B - A is measured episode by episode) and compared by one
procedure whose verdict reads its interval:

* a fixed-n cell (lines without ``look``): :func:`simeval.stats.paired` (Student's
  t-interval on the differences, or the betting interval when both lines declare the
  same ``bounds``), at the cell's share of the family's alpha
  (:func:`simeval.stats.family_confidence`, Bonferroni over the cells); a cell whose
  episodes record success splits its share in half between its return and its success
  (:func:`simeval.stats.mcnemar`);
* an adaptive run's cell (one line per look, with ``look`` and ``sequential``): the
  run's :class:`simeval.sequential.LookPlan` replayed look by look through the
  look-by-look strategy's own cell (:class:`simeval.strategies.CellLooks`: its sequence,
  one update per look, its stop rule; ``plan.mcnemar(...)`` beside it), its stop reason
  recomputed.

The aggregate row is :func:`simeval.stats.mean_of_intervals` over the cells' return
intervals, each divided by its task's reference width (else its bounds' width, else
1): the mean over cells of normalised paired differences, cells weighted equally. It
holds whenever every cell's interval holds, so it adds no error to the family; and so
its verdict is withheld (``inconclusive``, with the reason) where a cell's data show
its own interval's assumption broken (:func:`simeval.stats.verdicts.withheld`: fewer
than ``MIN_N`` pairs, identical differences of a task not declared deterministic, a fall
under a method that assumes near-symmetry), whether or not that cell's interval decides.

This module reads nothing and draws nothing: :mod:`simeval.report.cli` reads the two
directories and hands their lines to :func:`compare`; :mod:`simeval.report.text` and
:mod:`simeval.report.html` render its result, :func:`json_rows` gives ``--json``'s rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simeval import stats
from simeval.records import plain
from simeval.report.runs import merge_looks
from simeval.sequential import LookPlan, verdict_of
from simeval.stats.methods import descriptions, method
from simeval.stats.verdicts import REASONS, withheld
from simeval.strategies.looks import CellLooks

NOMINAL = "nominal"  # the condition of a plain (non-suite) evaluation
FIXED = "fixed"  # the stop column of a fixed-n cell
UNFINISHED = "unfinished"  # an adaptive cell whose replay would look again, but the lines end
# Per-episode success lists, in the order one is chosen: the first that both lines carry.
SUCCESS_KEYS = ("episode_success_once", "episode_success_at_end")
JSON_KEYS = (
    "task",
    "condition",
    "mean_a",
    "mean_b",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
    "confidence",
    "verdict",
    "reason",
    "method",
    "episodes",
    "stop",
    "pairing_gain",
    "share_b_ahead",
    "success_a",
    "success_b",
    "success_verdict",
    "scale",
)
# The paired methods a cell's interval may come from, described by the registry the strategies share.
METHODS = descriptions(("t", "betting", "t-mixture CS", "betting CS", "group-sequential"))
Cell = tuple[str, str]  # (task, condition)


class CompareError(Exception):
    """Input that cannot be compared; its message is one line, printed as the command's error."""


@dataclass(frozen=True)
class Success:
    """Success of B against success of A on a cell's paired episodes (McNemar's test, or its sequential form).

    Attributes:
        key: the per-episode list compared (``episode_success_once`` or ``episode_success_at_end``).
        rate_a: A's success rate on the paired episodes.
        rate_b: B's.
        b_only: episodes B succeeded in and A failed.
        a_only: episodes A succeeded in and B failed.
        share: the share of the discordant episodes B won, with its interval (0.5: no difference).
        verdict: ``better``, ``worse`` or ``inconclusive``, read from ``share``'s interval.
    """

    key: str
    rate_a: float
    rate_b: float
    b_only: int
    a_only: int
    share: stats.Interval
    verdict: str


@dataclass
class CellResult:
    """One cell both runs evaluated: the lines, their paired episodes and the comparison.

    Attributes:
        task: the cell's task.
        condition: the cell's condition.
        record_a: A's line compared (an adaptive cell's last common look).
        record_b: B's.
        returns_a: A's per-episode returns on the paired episodes (every compared look's, in look order).
        returns_b: B's, in the same order.
        paired: the return's comparison; ``paired.diff`` is the interval, ``paired.verdict`` its verdict,
            ``paired.method`` the procedure (``t``, ``betting``, ``t-mixture CS``, ``betting CS``,
            ``group-sequential``).
        confidence: the level of the return's interval (the cell's share of the family).
        spend: the cell's share of the family-wise error (return and success together).
        family: who set the cell's share: ``("fixed", alpha, cells)`` or ``(rule, alpha, rows)`` of a look plan.
        stop: ``fixed``, or an adaptive cell's replayed stop reason (``decided``, ``equivalent``,
            ``precise``, ``budget``, ``unfinished``).
        looks: the looks compared (None for a fixed cell).
        success: success compared as success, when both runs' episodes record it.
        bounds: the declared bounds used, or None.
        reference: the task's reference (untrained, expert scores), or None.
        scale: what the aggregate row divides this cell's difference by (1 until :func:`compare` sets it).
        deterministic: whether both runs' lines declare the task deterministic (``deterministic: true``):
            identical differences are then a verdict.
    """

    task: str
    condition: str
    record_a: dict
    record_b: dict
    returns_a: np.ndarray
    returns_b: np.ndarray
    paired: stats.Paired
    confidence: float
    spend: float
    family: tuple[str, float, int]
    stop: str = FIXED
    looks: int | None = None
    success: Success | None = None
    bounds: tuple[float, float] | None = None
    reference: tuple[float, float] | None = None
    scale: float = 1.0
    deterministic: bool = False

    @property
    def verdict(self) -> str:
        """The return's verdict (read from ``paired.diff``)."""
        return self.paired.verdict

    @property
    def broken(self) -> str:
        """Why this cell's return interval cannot be leaned on (:data:`simeval.stats.verdicts.REASONS`), or ``""``:
        the cell's own ``reason``, else what :func:`simeval.stats.verdicts.withheld` finds in its differences
        (also where its interval holds 0 and so withheld nothing)."""
        if self.paired.reason:
            return self.paired.reason
        a, b = self.returns_a, self.returns_b
        magnitude = float(max(np.max(np.abs(a)), np.max(np.abs(b)))) if a.size else 0.0
        symmetric = method(self.paired.method).assumes_symmetry
        return withheld(b - a, symmetric, self.deterministic, magnitude)


@dataclass
class Aggregate:
    """The row over all cells: the mean over cells of normalised paired differences, cells weighted equally.

    Attributes:
        normalised_by: ``reference`` (each task's reference width), ``bounds`` (each cell's bounds'
            width) or ``raw`` (no scaling: not every task has either).
        mean_a: the mean over cells of A's normalised mean return.
        mean_b: the same for B (``diff.value == mean_b - mean_a``).
        diff: :func:`simeval.stats.mean_of_intervals` over the cells' return intervals and scales.
        verdict: ``better``/``worse`` when ``diff``'s interval lies above/below 0, else ``inconclusive``; also
            ``inconclusive`` where ``reason`` withholds what the interval says.
        confidence: the probability that every cell's return interval holds, so that this one does.
        episodes: the paired episodes over all cells.
        reason: why the verdict ``diff`` reads is withheld: the reasons of the cells in ``broken``
            (:data:`simeval.stats.verdicts.REASONS`, in that order, joined by ``"; "``), or ``""``.
        broken: ``(task, condition, reason)`` of every cell whose data show its interval's assumption broken
            (:attr:`CellResult.broken`), whether or not the aggregate's interval decides.
    """

    normalised_by: str
    mean_a: float
    mean_b: float
    diff: stats.Interval
    verdict: str
    confidence: float
    episodes: int
    reason: str = ""
    broken: tuple[tuple[str, str, str], ...] = ()


@dataclass
class Comparison:
    """Everything the three outputs show: both runs, the paired cells, the aggregate, the unpaired cells."""

    dir_a: str
    dir_b: str
    label_a: str
    label_b: str
    cells: list[CellResult]
    aggregate: Aggregate
    only_a: list[Cell]
    only_b: list[Cell]
    rows_a: list[dict]  # every successful line of each run, an adaptive run's looks merged: the training curves
    rows_b: list[dict]
    alpha: float = 0.05
    margin: float = 0.0
    steps_a: list[tuple[int, str]] = field(default_factory=list)  # (step, checkpoint name) of the compared lines
    steps_b: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # one line each: what the replay of adaptive runs found

    @property
    def family_error(self) -> float:
        """The family-wise error of every verdict of the table: the cells' shares summed (Bonferroni)."""
        return sum(c.spend for c in self.cells)


# -- reading lines --------------------------------------------------------------------------------


def cell_of(record: Mapping[str, Any]) -> Cell:
    """The (task, condition) of a results.jsonl line; a plain evaluation is (its env, ``nominal``)."""
    task = record.get("task") or record.get("env") or "env"
    return str(task), str(record.get("condition") or NOMINAL)


def _name(cell: Cell) -> str:
    return f"{cell[0]} / {cell[1]}"


def select(rows: Sequence[Mapping[str, Any]], step: int | None, where: str, flag: str) -> dict[Cell, list[dict]]:
    """Per cell, the lines compared: of the highest step (the last line written of it), or of ``step``.

    A fixed-n evaluation is one line; an adaptive run's (lines with ``look``) is every look of
    the same checkpoint (step and ``checkpoint_name``) on the cell, in file order.

    Args:
        rows: a run's successful lines, sorted by step (``report.read_results``).
        step: the training step to pick (``--step-a``/``--step-b``); None for each cell's highest.
        where: the run directory, for the error message.
        flag: the flag that gave ``step``, for the error message.

    Returns:
        ``{(task, condition): [line, ...]}``, in the order cells first appear in the file.

    Raises:
        CompareError: when no line has ``step``, or the run has no successful line at all.
    """
    if not rows:
        raise CompareError(f"{where} has no successful evaluation in its results.jsonl.")
    if step is not None:
        picked = [r for r in rows if int(r["step"]) == step]
        if not picked:
            have = ", ".join(f"{s:,}" for s in sorted({int(r["step"]) for r in rows}))
            raise CompareError(f"{flag} {step}: {where} has no evaluation at step {step:,} (it has steps {have}).")
        rows = picked
    last: dict[Cell, Mapping[str, Any]] = {}
    groups: dict[tuple[Cell, int, str], list[dict]] = {}
    for r in rows:  # sorted by step (a stable sort): the last line of a cell is its highest step, newest
        cell = cell_of(r)
        last[cell] = r
        if "look" in r:
            groups.setdefault((cell, int(r["step"]), str(r.get("checkpoint_name") or "")), []).append(dict(r))
    out: dict[Cell, list[dict]] = {}
    for cell, r in last.items():
        if "look" in r:
            out[cell] = groups[(cell, int(r["step"]), str(r.get("checkpoint_name") or ""))]
        else:
            out[cell] = [dict(r)]
    return out


def episode_order(a: Mapping[str, Any], b: Mapping[str, Any], cell: Cell, dir_a: str, dir_b: str) -> list[int]:
    """The positions in ``b``'s episode lists of ``a``'s episodes, one by one (matched by ``episode_seeds``).

    The same seed list pairs episode by episode; the same seeds in another order are put in
    ``a``'s order.

    Raises:
        CompareError: when a line has no ``episode_seeds`` (an unseeded run), as many seeds as returns,
            or the seeds differ.
    """
    name = _name(cell)
    seeds_a, seeds_b = a.get("episode_seeds"), b.get("episode_seeds")
    for seeds, line, where in ((seeds_a, a, dir_a), (seeds_b, b, dir_b)):
        if not seeds:
            raise CompareError(
                f"cell {name}: {where} has no episode_seeds, so its episodes cannot be paired with the other "
                "run's: evaluate both runs with a seed (--seed)."
            )
        returns = line.get("episode_returns") or []
        if len(seeds) != len(returns):
            raise CompareError(
                f"cell {name}: {where} has {len(returns)} episode returns for {len(seeds)} episode seeds."
            )
    if list(seeds_a) == list(seeds_b):
        return list(range(len(seeds_b)))
    if sorted(seeds_a) == sorted(seeds_b) and len(set(seeds_a)) == len(seeds_a):
        position = {s: k for k, s in enumerate(seeds_b)}
        return [position[s] for s in seeds_a]
    raise CompareError(
        f"cell {name} of {dir_a} and {dir_b}: not the same episodes: evaluate both with the same suite file."
    )


def paired_episodes(
    a: Mapping[str, Any], b: Mapping[str, Any], cell: Cell, dir_a: str, dir_b: str
) -> tuple[np.ndarray, np.ndarray]:
    """The per-episode returns of ``a`` and ``b`` on the same episodes, in ``a``'s episode order.

    Raises:
        CompareError: see :func:`episode_order`.
    """
    order = episode_order(a, b, cell, dir_a, dir_b)
    return _floats(a, "episode_returns"), _floats(b, "episode_returns")[order]


def _floats(line: Mapping[str, Any], key: str) -> np.ndarray:
    return np.asarray(line.get(key) or [], dtype=np.float64)


def success_key(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The per-episode success list both lines carry, ``episode_success_once`` first; None when they share none.

    A list counts when it has one value per episode return.
    """
    for key in SUCCESS_KEYS:
        if all(_has_list(line, key) for line in (a, b)):
            return key
    return None


def _has_list(line: Mapping[str, Any], key: str) -> bool:
    values = line.get(key)
    return isinstance(values, list) and len(values) > 0 and len(values) == len(line.get("episode_returns") or [])


def _pair_of(value: Any, what: str, where: str) -> tuple[float, float]:
    """``{"low": L, "high": H}`` as floats; CompareError naming ``where`` when it is not one."""
    try:
        low, high = float(value["low"]), float(value["high"])
    except (KeyError, TypeError, ValueError):
        raise CompareError(f"{where}: its {what} is not {{'low': L, 'high': H}} (got {value!r}).") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise CompareError(f"{where}: its {what} must be finite, got {low:g}..{high:g}.")
    return low, high


def _reference(a: Mapping[str, Any], b: Mapping[str, Any], cell: Cell) -> tuple[float, float] | None:
    """The task's (untrained, expert) scores when both lines carry the same ``reference``, else None."""
    ref_a, ref_b = a.get("reference"), b.get("reference")
    if not ref_a or not ref_b:
        return None
    pair_a = _pair_of(ref_a, "reference", f"task {cell[0]}")
    pair_b = _pair_of(ref_b, "reference", f"task {cell[0]}")
    if pair_a != pair_b:
        raise CompareError(
            f"task {cell[0]}: the runs normalise by different references ({pair_a[0]:g}..{pair_a[1]:g} "
            f"and {pair_b[0]:g}..{pair_b[1]:g}): evaluate both with the same suite file."
        )
    return pair_a


def _bounds(
    a: Mapping[str, Any], b: Mapping[str, Any], cell: Cell, dir_a: str, dir_b: str, warnings: list[str]
) -> tuple[float, float] | None:
    """The declared bounds on one episode's return when both lines carry the same ``bounds``, else None.

    Bounds declared by one run only are not used (a warning says so): the other run's episodes were
    never checked against them.
    """
    name = _name(cell)
    got_a, got_b = a.get("bounds"), b.get("bounds")
    if got_a is None and got_b is None:
        return None
    if got_a is None or got_b is None:
        where = dir_a if got_a is not None else dir_b
        warnings.append(f"cell {name}: only {where} declares bounds; the comparison uses none (a t-interval).")
        return None
    pair_a = _pair_of(got_a, "bounds", f"cell {name} of {dir_a}")
    pair_b = _pair_of(got_b, "bounds", f"cell {name} of {dir_b}")
    if pair_a != pair_b:
        raise CompareError(
            f"cell {name}: the runs declare different bounds ({pair_a[0]:g}..{pair_a[1]:g} in {dir_a}, "
            f"{pair_b[0]:g}..{pair_b[1]:g} in {dir_b}): evaluate both with the same suite file."
        )
    if not pair_a[0] < pair_a[1]:
        raise CompareError(f"cell {name}: its bounds {pair_a[0]:g}..{pair_a[1]:g} need low < high: fix the suite file.")
    return pair_a


def _deterministic(
    a: Mapping[str, Any], b: Mapping[str, Any], cell: Cell, dir_a: str, dir_b: str, warnings: list[str]
) -> bool:
    """Whether both lines declare the task deterministic (``deterministic: true``); declared by one run only, it
    is not used (a warning says so): identical differences then give no verdict."""
    got_a, got_b = a.get("deterministic") is True, b.get("deterministic") is True
    if got_a != got_b:
        where = dir_a if got_a else dir_b
        warnings.append(f"cell {_name(cell)}: only {where} declares the task deterministic; the comparison does not.")
    return got_a and got_b


def _success(key: str, sa: np.ndarray, sb: np.ndarray, share: stats.Interval, verdict: str) -> Success:
    a, b = sa != 0, sb != 0
    return Success(
        key=key,
        rate_a=float(a.mean()),
        rate_b=float(b.mean()),
        b_only=int((b & ~a).sum()),
        a_only=int((a & ~b).sum()),
        share=share,
        verdict=verdict,
    )


# -- one cell -------------------------------------------------------------------------------------


def _fixed_cell(
    a: dict, b: dict, cell: Cell, dirs: tuple[str, str], alpha: float, cells: int, margin: float, warnings: list[str]
) -> CellResult:
    """A fixed-n cell: :func:`stats.paired` (and :func:`stats.mcnemar`) at the cell's share of ``alpha``."""
    dir_a, dir_b = dirs
    order = episode_order(a, b, cell, dir_a, dir_b)
    returns_a, returns_b = _floats(a, "episode_returns"), _floats(b, "episode_returns")[order]
    key = success_key(a, b)
    confidence = stats.family_confidence(alpha, cells * (2 if key else 1))
    bounds = _bounds(a, b, cell, dir_a, dir_b, warnings)
    deterministic = _deterministic(a, b, cell, dir_a, dir_b, warnings)
    try:
        result = stats.paired(
            returns_a, returns_b, confidence=confidence, bounds=bounds, margin=margin, deterministic=deterministic
        )
        success = None
        if key:
            sa, sb = _floats(a, key), _floats(b, key)[order]
            m = stats.mcnemar(sa, sb, confidence=confidence)
            success = _success(key, sa, sb, m.share, m.verdict)
    except ValueError as exc:  # no episodes, a value that is not finite, or one outside the bounds
        raise CompareError(f"cell {_name(cell)} of {dir_a} and {dir_b}: {exc}") from None
    return CellResult(
        cell[0], cell[1], a, b, returns_a, returns_b, result, confidence, alpha / cells, ("fixed", alpha, cells),
        success=success, bounds=bounds, reference=_reference(a, b, cell), deterministic=deterministic,
    )  # fmt: skip


def _looks(lines: list[dict], cell: Cell, where: str) -> dict[int, dict]:
    """An adaptive cell's lines by look number; CompareError when a look is not a number >= 0."""
    out = {}
    for line in lines:
        look = line.get("look")
        if isinstance(look, bool) or not isinstance(look, int) or look < 0:
            raise CompareError(f"cell {_name(cell)} of {where}: a line's look is {look!r}, not an integer >= 0.")
        out[look] = line  # a look written twice (a resume): the newest line counts
    return out


def _prefix(looks: Mapping[int, dict]) -> int:
    """How many looks from 0 on are there without a gap."""
    k = 0
    while k in looks:
        k += 1
    return k


def _plan(line: Mapping[str, Any], cell: Cell, where: str) -> LookPlan:
    try:
        return LookPlan.from_data(line.get("sequential"), where=f"cell {_name(cell)} of {where}, look 0: sequential")
    except ValueError as exc:
        raise CompareError(str(exc)) from None


_PLAN_FIELDS = ("rule", "alpha", "rows", "look_every", "margin", "design")  # what the paired replay depends on


def _adaptive_cell(
    lines_a: list[dict],
    lines_b: list[dict],
    cell: Cell,
    dirs: tuple[str, str],
    margin: float | None,
    warnings: list[str],
) -> CellResult:
    """An adaptive run's cell: its look plan replayed over the looks both runs have, one update per look."""
    dir_a, dir_b = dirs
    name = _name(cell)
    looks_a, looks_b = _looks(lines_a, cell, dir_a), _looks(lines_b, cell, dir_b)
    have_a, have_b = _prefix(looks_a), _prefix(looks_b)
    common = min(have_a, have_b)
    if common == 0:
        missing = dir_a if have_a == 0 else dir_b
        raise CompareError(f"cell {name}: {missing} has no look 0 of it, so no look can be compared.")
    plan_a, plan_b = _plan(looks_a[0], cell, dir_a), _plan(looks_b[0], cell, dir_b)
    for key in _PLAN_FIELDS:
        if getattr(plan_a, key) != getattr(plan_b, key):
            raise CompareError(
                f"cell {name}: the runs' look plans differ in {key} ({getattr(plan_a, key)!r} in {dir_a}, "
                f"{getattr(plan_b, key)!r} in {dir_b}): compare runs launched with the same plan."
            )
    if plan_a.design == "planned" and plan_a.max_episodes != plan_b.max_episodes:
        raise CompareError(
            f"cell {name}: planned looks up to {plan_a.max_episodes} episodes in {dir_a} and {plan_b.max_episodes} "
            f"in {dir_b}: a group-sequential design's boundaries depend on its budget; compare runs of one plan."
        )
    plan = dataclasses.replace(plan_a, max_episodes=min(plan_a.max_episodes, plan_b.max_episodes))
    if len(looks_a) != have_a or len(looks_b) != have_b or have_a != have_b:
        warnings.append(
            f"cell {name}: compares looks 0..{common - 1}, those both runs have from look 0 on "
            f"({dir_a} has {len(looks_a)}, {dir_b} has {len(looks_b)})."
        )
    if margin is not None and margin != plan.margin:
        warnings.append(f"cell {name}: its look plan's margin {plan.margin:g} is used, not --margin {margin:g}.")
    bounds = _bounds(looks_a[0], looks_b[0], cell, dir_a, dir_b, warnings)
    pairs = [(looks_a[k], looks_b[k]) for k in range(common)]
    keys = [success_key(a, b) for a, b in pairs]
    key = keys[0] if len(set(keys)) == 1 else None
    deterministic = _deterministic(looks_a[0], looks_b[0], cell, dir_a, dir_b, warnings)
    looks = CellLooks(None, name, cell, plan, bounds, deterministic=deterministic)  # the strategy's own cell
    success_seq = plan.mcnemar(name) if key else None
    parts: list[tuple[np.ndarray, ...]] = []
    first_stop: tuple[int, str] | None = None
    try:
        for k, (a, b) in enumerate(pairs):
            if _bounds(a, b, cell, dir_a, dir_b, []) != bounds:
                raise CompareError(f"cell {name}: look {k} declares other bounds than look 0: fix the results files.")
            order = episode_order(a, b, cell, dir_a, dir_b)
            ra, rb = _floats(a, "episode_returns"), _floats(b, "episode_returns")[order]
            looks.take(ra, rb, with_success=key is not None)
            part = (ra, rb)
            if success_seq is not None:
                sa, sb = _floats(a, key), _floats(b, key)[order]
                success_seq.update(sa, sb)
                part += (sa, sb)
            parts.append(part)
            if first_stop is None and plan.rule == "until-decided":
                reason = looks.decide()
                first_stop = None if reason is None else (k, reason)
    except ValueError as exc:  # a value that is not finite, or one outside the bounds: the message names the episode
        raise CompareError(f"cell {exc} (A: {dir_a}, B: {dir_b})") from None
    returns_a = np.concatenate([p[0] for p in parts])
    returns_b = np.concatenate([p[1] for p in parts])
    last_a, last_b = pairs[-1]
    if plan.rule == "until-decided":
        stop = _decided_stop(looks, first_stop, last_a, last_b, common, cell, warnings)
    else:
        stop = _precise_stop(looks_a, looks_b, (plan_a, plan_b), bounds, cell, dirs, warnings)
    seq = looks.seq
    described = stats.paired(returns_a, returns_b)  # the means, B ahead and the pairing gain of these episodes
    result = dataclasses.replace(
        described,
        diff=stats.Interval(seq.diff, seq.low, seq.high),
        verdict=seq.verdict,
        method=seq.method,
        reason=seq.reason,
    )
    success = None
    if success_seq is not None:
        sa, sb = np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts])
        m = success_seq.discordant
        share = stats.Interval(float(np.mean(sb[sa != sb] != 0)) if m else math.nan, success_seq.low, success_seq.high)
        success = _success(key, sa, sb, share, success_seq.verdict)
    return CellResult(
        cell[0], cell[1], last_a, last_b, returns_a, returns_b, result, plan.confidence(key is not None),
        plan.alpha / plan.rows, (plan.rule, plan.alpha, plan.rows), stop=stop, looks=common, success=success,
        bounds=bounds, reference=_reference(last_a, last_b, cell), deterministic=deterministic,
    )  # fmt: skip


def _recorded(*lines: Mapping[str, Any]) -> set[str]:
    return {str(line["stop"]) for line in lines if line.get("stop") is not None}


def _decided_stop(
    looks: CellLooks,
    first_stop: tuple[int, str] | None,
    last_a: Mapping[str, Any],
    last_b: Mapping[str, Any],
    common: int,
    cell: Cell,
    warnings: list[str],
) -> str:
    """``--until-decided``: the replayed stop after the last common look; a warning where the lines disagree."""
    name = _name(cell)
    replayed = looks.decide() or UNFINISHED
    recorded = _recorded(last_a, last_b)
    if recorded and recorded != {replayed}:
        said = " and ".join(sorted(repr(r) for r in recorded))
        warnings.append(
            f"cell {name}: the run recorded stop {said} after look {common - 1}, the replay of its look plan "
            f"says {replayed!r}: the replay is reported."
        )
    if first_stop is not None and first_stop[0] < common - 1:
        warnings.append(
            f"cell {name}: the replay stops after look {first_stop[0]} ({first_stop[1]}), the lines go on to look "
            f"{common - 1}: every look is used (the confidence sequence holds at every look)."
        )
    return replayed


def _precise_stop(
    looks_a: Mapping[int, dict],
    looks_b: Mapping[int, dict],
    plans: tuple[LookPlan, LookPlan],
    bounds: tuple[float, float] | None,
    cell: Cell,
    dirs: tuple[str, str],
    warnings: list[str],
) -> str:
    """``--until-precise``: each run's own stop, from its mean's sequence replayed over all of its looks."""
    name = _name(cell)
    reasons = []
    for looks, plan, where in ((looks_a, plans[0], dirs[0]), (looks_b, plans[1], dirs[1])):
        run = CellLooks(None, f"{name} of {where}", cell, plan, bounds)  # the strategy's own cell
        count = _prefix(looks)
        try:
            for k in range(count):
                run.take(_floats(looks[k], "episode_returns"))
        except ValueError as exc:
            raise CompareError(str(exc)) from None
        replayed = run.decide() or UNFINISHED
        recorded = _recorded(looks[count - 1])
        if recorded and recorded != {replayed}:
            warnings.append(
                f"cell {name}: {where} recorded stop {next(iter(recorded))!r} after look {count - 1}, the replay "
                f"of its look plan says {replayed!r}: the replay is reported."
            )
        reasons.append(replayed)
    return reasons[0] if reasons[0] == reasons[1] else f"A {reasons[0]}, B {reasons[1]}"


# -- the table ------------------------------------------------------------------------------------


def _steps(picked: Mapping[Cell, list[dict]]) -> list[tuple[int, str]]:
    """The distinct (step, checkpoint name) of the compared lines, by step."""
    return sorted({(int(r["step"]), str(r.get("checkpoint_name") or "")) for rows in picked.values() for r in rows})


def _aggregate(cells: list[CellResult]) -> Aggregate:
    """The mean over cells of normalised paired differences (each cell's scale set here).

    Its interval holds when every cell's does; where a cell's data show its interval's assumption broken
    (:attr:`CellResult.broken`), the verdict the interval reads is withheld with that cell's reason.
    """
    references: dict[str, tuple[float, float] | None] = {}
    for c in cells:  # a task normalises only when every one of its cells has the same reference
        references[c.task] = c.reference if references.get(c.task, c.reference) == c.reference else None
    if all(ref is not None for ref in references.values()):
        normalised_by = "reference"
        frames = {id(c): references[c.task] for c in cells}
    elif all(c.bounds is not None for c in cells):
        normalised_by = "bounds"
        frames = {id(c): c.bounds for c in cells}
    else:
        normalised_by = "raw"
        frames = {id(c): (0.0, 1.0) for c in cells}
    offsets = []
    for c in cells:
        low, high = frames[id(c)]
        if not high > low:
            what = "reference" if normalised_by == "reference" else "bounds"
            raise CompareError(
                f"task {c.task}: its {what} {low:g}..{high:g} cannot normalise (high must exceed low): "
                "fix the suite file."
            )
        c.scale = high - low
        offsets.append(low)
    diff = stats.mean_of_intervals([c.paired.diff for c in cells], [c.scale for c in cells])
    k = len(cells)
    mean_a = sum((c.paired.mean_a - off) / c.scale for c, off in zip(cells, offsets, strict=True)) / k
    mean_b = sum((c.paired.mean_b - off) / c.scale for c, off in zip(cells, offsets, strict=True)) / k
    return_spend = sum(c.spend / 2 if c.success is not None else c.spend for c in cells)
    broken = tuple((c.task, c.condition, c.broken) for c in cells if c.broken)
    verdict, reason = verdict_of(diff.low, diff.high), ""
    if broken and verdict != "inconclusive":
        seen = {why for _, _, why in broken}
        verdict, reason = "inconclusive", "; ".join(r for r in REASONS if r in seen)
    return Aggregate(
        normalised_by=normalised_by,
        mean_a=mean_a,
        mean_b=mean_b,
        diff=diff,
        verdict=verdict,
        confidence=1.0 - return_spend,
        episodes=sum(c.paired.n for c in cells),
        reason=reason,
        broken=broken,
    )


def compare(
    rows_a: Sequence[Mapping[str, Any]],
    rows_b: Sequence[Mapping[str, Any]],
    dir_a: str,
    dir_b: str,
    label_a: str | None = None,
    label_b: str | None = None,
    step_a: int | None = None,
    step_b: int | None = None,
    alpha: float = 0.05,
    margin: float | None = None,
) -> Comparison:
    """Compare run B against run A on every cell both evaluated, and over all of them.

    Args:
        rows_a: run A's successful results.jsonl lines, by step (``report.read_results``).
        rows_b: run B's, the same way.
        dir_a: run A's directory (error messages name it).
        dir_b: run B's directory.
        label_a: run A's short name (``report.labels``); ``dir_a`` when None.
        label_b: run B's short name.
        step_a: the training step of A to compare (``--step-a``); None for each cell's highest.
        step_b: the same for B.
        alpha: the family-wise error of the fixed-n cells' verdicts (an adaptive cell's comes from its look plan).
        margin: the equivalence margin of the fixed-n cells, in the task's units (``--margin``; None or 0:
            no ``equivalent`` verdict). An adaptive cell uses its look plan's.

    Returns:
        The comparison the text table, ``--json`` and ``--html`` are made from.

    Raises:
        CompareError: a one-line reason the runs cannot be compared (no common cell, a step missing,
            episodes that differ, unseeded runs, different bounds or references, an adaptive run's
            lines that cannot be replayed).
    """
    if not 0.0 < alpha < 1.0:
        raise CompareError(f"--alpha {alpha:g}: must lie between 0 and 1 (0.05 is usual).")
    if margin is not None and not (math.isfinite(margin) and margin >= 0):
        raise CompareError(f"--margin {margin:g}: must be a finite number >= 0, in the task's units.")
    picked_a = select(rows_a, step_a, dir_a, "--step-a")
    picked_b = select(rows_b, step_b, dir_b, "--step-b")
    common = [c for c in picked_a if c in picked_b]
    only_a = [c for c in picked_a if c not in picked_b]
    only_b = [c for c in picked_b if c not in picked_a]
    if not common:
        raise CompareError(f"{dir_a} and {dir_b} have no (task, condition) cell in common.")
    warnings: list[str] = []
    cells = []
    for cell in common:
        lines_a, lines_b = picked_a[cell], picked_b[cell]
        adaptive_a, adaptive_b = "look" in lines_a[0], "look" in lines_b[0]
        if adaptive_a != adaptive_b:
            adaptive = dir_a if adaptive_a else dir_b
            raise CompareError(
                f"cell {_name(cell)}: {adaptive} evaluated it adaptively (lines with look) and the other run did "
                "not: compare two adaptive runs' looks, or two fixed-n runs (--step-a/--step-b pick others)."
            )
        if adaptive_a:
            cells.append(_adaptive_cell(lines_a, lines_b, cell, (dir_a, dir_b), margin, warnings))
        else:
            a, b = lines_a[0], lines_b[0]
            cells.append(_fixed_cell(a, b, cell, (dir_a, dir_b), alpha, len(common), margin or 0.0, warnings))
    return Comparison(
        dir_a=dir_a,
        dir_b=dir_b,
        label_a=label_a or dir_a,
        label_b=label_b or dir_b,
        cells=cells,
        aggregate=_aggregate(cells),
        only_a=only_a,
        only_b=only_b,
        rows_a=merge_looks(rows_a),
        rows_b=merge_looks(rows_b),
        alpha=alpha,
        margin=margin or 0.0,
        steps_a=_steps(picked_a),
        steps_b=_steps(picked_b),
        warnings=warnings,
    )


def json_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """The ``--json`` list: one object per cell, then the aggregate (task and condition ``"*"``).

    Each object has exactly the keys of :data:`JSON_KEYS`; a number that is not finite is
    ``null`` (strict JSON). ``reason`` says why a verdict the interval reads was withheld
    (:data:`simeval.stats.verdicts.REASONS`, e.g. ``skewed: declare bounds``; ``""``: none was).
    ``share_b_ahead`` is the share of episodes on which B scored higher than A, ties counted
    half (a description, not a test); ``pairing_gain`` how many times more episodes an unpaired
    comparison would need; ``scale`` what the aggregate row divides the cell's difference by.
    The aggregate's ``mean_a``/``mean_b`` are the means over cells of the normalised mean
    returns, its ``scale`` is ``reference``, ``bounds`` or ``raw``, its ``reason`` :attr:`Aggregate.reason`.
    """
    out = []
    for c in comparison.cells:
        p, s = c.paired, c.success
        values = (
            c.task,
            c.condition,
            _number(p.mean_a),
            _number(p.mean_b),
            _number(p.diff.value),
            _number(p.diff.low),
            _number(p.diff.high),
            _number(c.confidence),
            p.verdict,
            p.reason,
            p.method,
            p.n,
            c.stop,
            _number(p.pairing_gain),
            _number(p.b_wins),
            None if s is None else _number(s.rate_a),
            None if s is None else _number(s.rate_b),
            None if s is None else s.verdict,
            _number(c.scale),
        )
        out.append(dict(zip(JSON_KEYS, values, strict=True)))
    g = comparison.aggregate
    values = (
        "*",
        "*",
        _number(g.mean_a),
        _number(g.mean_b),
        _number(g.diff.value),
        _number(g.diff.low),
        _number(g.diff.high),
        _number(g.confidence),
        g.verdict,
        g.reason,
        "mean of intervals",
        g.episodes,
        None,
        None,
        None,
        None,
        None,
        None,
        g.normalised_by,
    )
    out.append(dict(zip(JSON_KEYS, values, strict=True)))
    return out


def _number(x: Any) -> float | None:
    """A float for JSON; None for NaN or inf."""
    return plain(float(x))
