"""Is B better than A, cell by cell and overall? The comparison computed once, for every rendering.

A run directory's results.jsonl holds one line per evaluated (checkpoint,
cell), a cell being a suite's (task, condition); a plain evaluation's line is
the cell (its env, ``nominal``). For every cell both runs evaluated, the two
runs' episodes are paired by their ``episode_seeds`` (the same episodes, so
the difference B - A is measured episode by episode) and compared with
:func:`simeval.stats.paired`; the verdicts are Holm-corrected over the cells
(:func:`simeval.stats.verdicts`). An aggregate row gives the IQM of each run
over all cells (of normalised scores when every task has a reference), their
difference with a paired stratified bootstrap interval, and rliable's
probability of improvement.

This module reads nothing and draws nothing: :mod:`simeval.report.cli` reads the two
directories and hands their lines to :func:`compare`; :mod:`simeval.report.text` and
:mod:`simeval.report.html` render its result, :func:`json_rows` gives ``--json``'s rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simeval import stats
from simeval.metrics import bootstrap_ci
from simeval.records import plain

NOMINAL = "nominal"  # the condition of a plain (non-suite) evaluation
JSON_KEYS = ("task", "condition", "mean_a", "mean_b", "diff", "diff_ci_low", "diff_ci_high", "p_improvement", "verdict")
Cell = tuple[str, str]  # (task, condition)


class CompareError(Exception):
    """Input that cannot be compared; its message is one line, printed as the command's error."""


@dataclass
class CellResult:
    """One cell both runs evaluated: the two lines, their paired episodes and the comparison."""

    task: str
    condition: str
    record_a: dict
    record_b: dict
    returns_a: np.ndarray
    returns_b: np.ndarray
    ci_a: tuple[float, float]
    ci_b: tuple[float, float]
    paired: stats.Paired
    verdict: str = "inconclusive"


@dataclass
class Aggregate:
    """The row over all cells: IQMs of A and B, their paired difference and P(B > A) across tasks."""

    normalised: bool
    iqm_a: stats.Interval
    iqm_b: stats.Interval
    diff: stats.Interval
    p_improvement: float
    verdict: str
    scores_a: dict[str, np.ndarray]  # per cell ("task / condition"): the per-episode scores aggregated
    scores_b: dict[str, np.ndarray]


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
    rows_a: list[dict]  # every successful line of each run: the training curves
    rows_b: list[dict]
    alpha: float = 0.05
    confidence: float = 0.95
    steps_a: list[tuple[int, str]] = field(default_factory=list)  # (step, checkpoint name) of the compared lines
    steps_b: list[tuple[int, str]] = field(default_factory=list)


# -- reading lines --------------------------------------------------------------------------------


def cell_of(record: Mapping[str, Any]) -> Cell:
    """The (task, condition) of a results.jsonl line; a plain evaluation is (its env, ``nominal``)."""
    task = record.get("task") or record.get("env") or "env"
    return str(task), str(record.get("condition") or NOMINAL)


def select(rows: Sequence[Mapping[str, Any]], step: int | None, where: str, flag: str) -> dict[Cell, dict]:
    """Per cell, the line compared: the highest step (the last line written of it), or the line at ``step``.

    Args:
        rows: a run's successful lines, sorted by step (``report.read_results``).
        step: the training step to pick (``--step-a``/``--step-b``); None for each cell's highest.
        where: the run directory, for the error message.
        flag: the flag that gave ``step``, for the error message.

    Returns:
        ``{(task, condition): line}``, in the order cells first appear in the file.

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
    order: dict[Cell, None] = dict.fromkeys(cell_of(r) for r in rows)
    out: dict[Cell, dict] = {}
    for r in rows:  # sorted by step (a stable sort): the last line of a cell is its highest step, newest
        out[cell_of(r)] = dict(r)
    return {c: out[c] for c in order}


def paired_episodes(
    a: Mapping[str, Any], b: Mapping[str, Any], cell: Cell, dir_a: str, dir_b: str
) -> tuple[np.ndarray, np.ndarray]:
    """The per-episode returns of ``a`` and ``b`` on the same episodes, in ``a``'s episode order.

    Episodes are matched by ``episode_seeds``: the same list pairs episode by
    episode; the same seeds in another order are put in ``a``'s order.

    Raises:
        CompareError: when a line has no ``episode_seeds`` (an unseeded run), or the seeds differ.
    """
    name = f"{cell[0]} / {cell[1]}"
    seeds_a, seeds_b = a.get("episode_seeds"), b.get("episode_seeds")
    for seeds, where in ((seeds_a, dir_a), (seeds_b, dir_b)):
        if not seeds:
            raise CompareError(
                f"cell {name}: {where} has no episode_seeds, so its episodes cannot be paired with the other "
                "run's: evaluate both runs with a seed (--seed)."
            )
    returns_a = np.asarray(a.get("episode_returns") or [], dtype=np.float64)
    returns_b = np.asarray(b.get("episode_returns") or [], dtype=np.float64)
    for seeds, returns, where in ((seeds_a, returns_a, dir_a), (seeds_b, returns_b, dir_b)):
        if len(seeds) != len(returns):
            raise CompareError(
                f"cell {name}: {where} has {len(returns)} episode returns for {len(seeds)} episode seeds."
            )
    if list(seeds_a) == list(seeds_b):
        return returns_a, returns_b
    if sorted(seeds_a) == sorted(seeds_b) and len(set(seeds_a)) == len(seeds_a):
        position = {s: k for k, s in enumerate(seeds_b)}
        return returns_a, returns_b[[position[s] for s in seeds_a]]
    raise CompareError(
        f"cell {name} of {dir_a} and {dir_b}: not the same episodes: evaluate both with the same suite file."
    )


def _interval(record: Mapping[str, Any], returns: np.ndarray, confidence: float) -> tuple[float, float]:
    """The line's own CI of the mean return (what ``report`` shows); a bootstrap of ``returns`` without one."""
    m = record.get("metrics") or {}
    low, high = m.get("reward_ci_low"), m.get("reward_ci_high")
    if low is None or high is None:
        return bootstrap_ci(returns, confidence=confidence)
    return float(low), float(high)


def _reference(a: Mapping[str, Any], b: Mapping[str, Any], cell: Cell) -> tuple[float, float] | None:
    """The task's (untrained, expert) scores when both lines carry the same ``reference``, else None."""
    ref_a, ref_b = a.get("reference"), b.get("reference")
    if not ref_a or not ref_b:
        return None
    pair_a = (float(ref_a["low"]), float(ref_a["high"]))
    pair_b = (float(ref_b["low"]), float(ref_b["high"]))
    if pair_a != pair_b:
        raise CompareError(
            f"task {cell[0]}: the runs normalise by different references ({pair_a[0]:g}..{pair_a[1]:g} "
            f"and {pair_b[0]:g}..{pair_b[1]:g}): evaluate both with the same suite file."
        )
    return pair_a


def _verdict(diff: stats.Interval) -> str:
    """The aggregate's verdict: better when the difference's interval lies above 0, worse below."""
    if diff.low > 0:
        return "better"
    if diff.high < 0:
        return "worse"
    return "inconclusive"


def _steps(rows: Mapping[Cell, Mapping[str, Any]]) -> list[tuple[int, str]]:
    """The distinct (step, checkpoint name) of the compared lines, by step."""
    return sorted({(int(r["step"]), str(r.get("checkpoint_name") or "")) for r in rows.values()})


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
    confidence: float = 0.95,
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
        alpha: the family-wise error rate of the Holm-corrected verdicts.
        confidence: the level of every interval.

    Returns:
        The comparison the text table, ``--json`` and ``--html`` are made from.

    Raises:
        CompareError: a one-line reason the runs cannot be compared (no common cell, a step missing,
            episodes that differ, unseeded runs).
    """
    picked_a = select(rows_a, step_a, dir_a, "--step-a")
    picked_b = select(rows_b, step_b, dir_b, "--step-b")
    common = [c for c in picked_a if c in picked_b]
    only_a = [c for c in picked_a if c not in picked_b]
    only_b = [c for c in picked_b if c not in picked_a]
    if not common:
        raise CompareError(f"{dir_a} and {dir_b} have no (task, condition) cell in common.")
    cells = []
    references: dict[str, tuple[float, float] | None] = {}
    for cell in common:
        a, b = picked_a[cell], picked_b[cell]
        returns_a, returns_b = paired_episodes(a, b, cell, dir_a, dir_b)
        try:
            result = stats.paired(returns_a, returns_b, confidence=confidence)
        except ValueError as exc:  # no episodes, or a return that is not finite
            raise CompareError(f"cell {cell[0]} / {cell[1]} of {dir_a} and {dir_b}: {exc}") from None
        ci_a, ci_b = _interval(a, returns_a, confidence), _interval(b, returns_b, confidence)
        cells.append(CellResult(cell[0], cell[1], a, b, returns_a, returns_b, ci_a, ci_b, result))
        ref = _reference(a, b, cell)
        references[cell[0]] = ref if references.get(cell[0], ref) == ref else None
    for cell, verdict in zip(cells, stats.verdicts([c.paired for c in cells], alpha=alpha), strict=True):
        cell.verdict = verdict
    normalised = all(ref is not None for ref in references.values())
    scores_a, scores_b = {}, {}
    for c in cells:
        key = f"{c.task} / {c.condition}"  # each cell is a stratum of the bootstrap
        ref = references[c.task]
        try:
            scores_a[key] = stats.normalized(c.returns_a, *ref) if normalised else c.returns_a
            scores_b[key] = stats.normalized(c.returns_b, *ref) if normalised else c.returns_b
        except ValueError as exc:  # a reference whose low and high are the same
            raise CompareError(f"task {c.task}: its reference cannot normalise: {exc}") from None
    iqm_a = stats.aggregate(scores_a, confidence=confidence)["iqm"]
    iqm_b = stats.aggregate(scores_b, confidence=confidence)["iqm"]
    diff = stats.aggregate_difference(scores_a, scores_b, confidence=confidence, statistic="iqm")
    p_improvement = float(stats.probability_of_improvement(scores_a, scores_b))
    aggregate = Aggregate(normalised, iqm_a, iqm_b, diff, p_improvement, _verdict(diff), scores_a, scores_b)
    return Comparison(
        dir_a=dir_a,
        dir_b=dir_b,
        label_a=label_a or dir_a,
        label_b=label_b or dir_b,
        cells=cells,
        aggregate=aggregate,
        only_a=only_a,
        only_b=only_b,
        rows_a=[dict(r) for r in rows_a],
        rows_b=[dict(r) for r in rows_b],
        alpha=alpha,
        confidence=confidence,
        steps_a=_steps(picked_a),
        steps_b=_steps(picked_b),
    )


def json_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """The ``--json`` list: one object per cell, then the aggregate (task and condition ``"*"``).

    Each object has exactly the keys of :data:`JSON_KEYS`; a number that is not
    finite is ``null`` (strict JSON).
    """
    out = []
    for c in comparison.cells:
        p = c.paired
        values = (p.mean_a, p.mean_b, p.diff.value, p.diff.low, p.diff.high, p.p_improvement.value)
        out.append(dict(zip(JSON_KEYS, (c.task, c.condition, *map(_number, values), c.verdict), strict=True)))
    g = comparison.aggregate
    values = (g.iqm_a.value, g.iqm_b.value, g.diff.value, g.diff.low, g.diff.high, g.p_improvement)
    out.append(dict(zip(JSON_KEYS, ("*", "*", *map(_number, values), g.verdict), strict=True)))
    return out


def _number(x: Any) -> float | None:
    """A float for JSON; None for NaN or inf."""
    return plain(float(x))
