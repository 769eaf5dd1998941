"""``python -m simeval.launch.report compare RUN_A RUN_B``: is B better than A, cell by cell and overall?

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

This module reads nothing itself: :func:`simeval.launch.report.main` reads
the two directories and hands their lines to :func:`compare`; the text table,
the ``--json`` rows and the ``--html`` page are made from its result.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import html
import io
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TextIO, TypeVar

import numpy as np

from simeval import stats
from simeval.atomic import write_atomically
from simeval.metrics import bootstrap_ci
from simeval.records import plain

PROG = "python -m simeval.launch.report compare"
NOMINAL = "nominal"  # the condition of a plain (non-suite) evaluation
JSON_KEYS = ("task", "condition", "mean_a", "mean_b", "diff", "diff_ci_low", "diff_ci_high", "p_improvement", "verdict")
VERDICT_COLOURS = {"better": "#1a7f37", "worse": "#cf222e", "inconclusive": "#6e7781"}

Cell = tuple[str, str]  # (task, condition)
_T = TypeVar("_T")


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


# -- the three outputs ----------------------------------------------------------------------------


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


def _digits(*values: float) -> int:
    """Decimals that suit a row of numbers: 1 from 100 up, 2 from 1 up, else 3."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    return 1 if top >= 100 else 2 if top >= 1 else 3


def _with_ci(value: float, low: float, high: float, digits: int | None = None) -> str:
    """``812.3 [790.1, 830.0]``."""
    d = _digits(value, low, high) if digits is None else digits
    return f"{value:.{d}f} [{low:.{d}f}, {high:.{d}f}]"


def _run_steps(steps: Sequence[tuple[int, str]]) -> str:
    """``step 200,000 (ck_200000.pt)``, or the range when the compared cells come from several steps."""
    if len(steps) == 1:
        step, name = steps[0]
        return f"step {step:,}" + (f" ({name})" if name else "")
    return f"steps {steps[0][0]:,} to {steps[-1][0]:,} (each cell's highest)"


def header_lines(comparison: Comparison) -> list[str]:
    """The lines above the table: both runs with their steps, and the family correction."""
    c = comparison
    n = len(c.cells)
    return [
        f"A: {c.label_a}  {_run_steps(c.steps_a)}",
        f"B: {c.label_b}  {_run_steps(c.steps_b)}",
        f"verdicts: Holm-corrected over {n} cell{'s' * (n != 1)}, alpha {c.alpha:g} (said of B against A)",
    ]


def footer_lines(comparison: Comparison) -> list[str]:
    """The lines below the table: what the aggregate is over, and the cells only one run has."""
    c = comparison
    what = (
        "normalised scores ((return - low) / (high - low), each task's reference)"
        if c.aggregate.normalised
        else "raw returns (not every task has a reference)"
    )
    lines = [
        f"*: all {len(c.cells)} cells, IQM over {what};",
        f"   B - A with a paired stratified bootstrap {c.confidence:.0%} CI, P(B > A) across cells (rliable), "
        "verdict better/worse when the CI lies above/below 0",
    ]
    for name, cells in (("A", c.only_a), ("B", c.only_b)):
        for task, condition in cells:
            lines.append(f"only in {name}: {task} / {condition} (left out of the statistics)")
    return lines


def table_rows(comparison: Comparison) -> list[tuple[str, ...]]:
    """The table as text cells, one tuple per cell and the aggregate last (the text and HTML tables)."""
    rows = []
    for c in comparison.cells:
        p = c.paired
        d = _digits(p.mean_a, p.mean_b, *c.ci_a, *c.ci_b)
        rows.append(
            (
                c.task,
                c.condition,
                _with_ci(p.mean_a, *c.ci_a, digits=d),
                _with_ci(p.mean_b, *c.ci_b, digits=d),
                _with_ci(p.diff.value, p.diff.low, p.diff.high, digits=d),
                f"{p.p_improvement.value:.2f}",
                c.verdict,
            )
        )
    g = comparison.aggregate
    d = _digits(g.iqm_a.value, g.iqm_b.value, g.iqm_a.low, g.iqm_a.high, g.iqm_b.low, g.iqm_b.high)
    rows.append(
        (
            "*",
            "*",
            _with_ci(g.iqm_a.value, g.iqm_a.low, g.iqm_a.high, digits=d),
            _with_ci(g.iqm_b.value, g.iqm_b.low, g.iqm_b.high, digits=d),
            _with_ci(g.diff.value, g.diff.low, g.diff.high, digits=d),
            f"{g.p_improvement:.2f}",
            g.verdict,
        )
    )
    return rows


def columns(comparison: Comparison) -> tuple[str, ...]:
    """The table's column titles."""
    level = f"{comparison.confidence:.0%}"
    return ("task", "condition", f"A [{level} CI]", f"B [{level} CI]", f"B - A [{level} CI]", "P(B > A)", "verdict")


def text_table(comparison: Comparison) -> str:
    """The comparison as plain aligned text: header lines, the table (aggregate last), footnotes.

    Columns are separated by at least two spaces (a cell may hold single spaces),
    and the aggregate row is set off by a rule.
    """
    head, rows = columns(comparison), table_rows(comparison)
    widths = [max(len(str(r[k])) for r in (head, *rows)) for k in range(len(head))]
    right = {2, 3, 4, 5}  # numbers: right-aligned

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            s.rjust(w) if k in right else s.ljust(w) for k, (s, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "-" * len(line(head))
    out = [*header_lines(comparison), "", line(head), rule]
    out += [line(r) for r in rows[:-1]]
    out += [rule, line(rows[-1]), "", *footer_lines(comparison)]
    return "\n".join(out)


def print_text(comparison: Comparison, file: TextIO | None = None, use_rich: bool | None = None) -> None:
    """Print the comparison: with ``rich`` (coloured verdicts) on a terminal when it is installed, else plain text.

    Args:
        comparison: what :func:`compare` returned.
        file: where to print (stdout by default).
        use_rich: force rich on (True) or off (False); None: rich on a terminal only, so pipes and files get
            the plain table (:func:`text_table`) that ``grep`` and ``awk`` read.
    """
    file = sys.stdout if file is None else file
    if use_rich is None:
        use_rich = bool(getattr(file, "isatty", lambda: False)())
    console_cls = None
    if use_rich:
        try:
            from rich.console import Console as console_cls
        except ImportError:  # rich is no dependency of simeval
            console_cls = None
    if console_cls is None:
        print(text_table(comparison), file=file)
        return
    from rich.table import Table
    from rich.text import Text

    console = console_cls(file=file, highlight=False, width=None if file.isatty() else 200)
    for line in header_lines(comparison):
        console.print(line, markup=False)
    table = Table(show_edge=False, header_style="bold")
    for k, title in enumerate(columns(comparison)):
        table.add_column(title, justify="right" if 2 <= k <= 5 else "left", no_wrap=True)
    styles = {"better": "bold green", "worse": "bold red", "inconclusive": "dim"}
    rows = table_rows(comparison)
    for k, row in enumerate(rows):
        cells = [Text(s) for s in row[:-1]] + [Text(row[-1], style=styles.get(row[-1], ""))]
        table.add_row(*cells, end_section=k == len(rows) - 2)
    console.print(table)
    for line in footer_lines(comparison):
        console.print(line, markup=False)


# -- the HTML page --------------------------------------------------------------------------------


@contextlib.contextmanager
def plain_text() -> Iterator[None]:
    """Within it matplotlib draws every text as written, never parsed as mathtext or LaTeX.

    Task, condition and run names may hold ``$``, ``\\``, ``_`` or ``^``: parsed, a name
    such as ``$\\x$`` would fail the whole figure.
    """
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield


def _plain(draw: Callable[[Comparison], _T]) -> Callable[[Comparison], _T]:
    """``draw`` (a figure of the comparison, to PNG) run within :func:`plain_text`."""

    @functools.wraps(draw)
    def wrapped(comparison: Comparison) -> _T:
        with plain_text():
            return draw(comparison)

    return wrapped


def _png(fig: Any) -> str:
    """A matplotlib figure as a ``data:image/png;base64,...`` URI (no metadata: nothing names a website)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(n: int, width: float = 5.0, height: float = 3.4) -> tuple[Any, list[Any]]:
    """A figure of ``n`` panels, up to 3 a row; the unused panels hidden."""
    plt = _pyplot()
    ncols = min(3, max(n, 1))
    nrows = math.ceil(max(n, 1) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _step_format(x: float, _pos: int = 0) -> str:
    """Training steps as 250k, 1M, 1.5M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    return f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


@_plain
def curves_png(comparison: Comparison) -> str:
    """Mean return against step with its CI band, both runs, one panel per task (its first condition)."""
    c = comparison
    first: dict[str, str] = {}
    for row in (*c.rows_a, *c.rows_b):
        task, condition = cell_of(row)
        first.setdefault(task, condition)
    fig, axes = _grid(len(first))
    for ax, (task, condition) in zip(axes, first.items(), strict=True):
        for k, (label, rows) in enumerate(((c.label_a, c.rows_a), (c.label_b, c.rows_b))):
            mine = sorted((r for r in rows if cell_of(r) == (task, condition)), key=lambda r: r["step"])
            if not mine:
                continue
            steps = [int(r["step"]) for r in mine]
            means, lows, highs = (list(v) for v in zip(*(_band(r) for r in mine), strict=True))
            ax.plot(steps, means, marker="o", color=f"C{k}", label=f"{'AB'[k]}: {label}")
            ax.fill_between(steps, lows, highs, color=f"C{k}", alpha=0.2)
            if len(steps) == 1:  # a band needs two points: an error bar instead
                ax.errorbar(steps, means, yerr=[[means[0] - lows[0]], [highs[0] - means[0]]], color=f"C{k}")
        ax.set_title(f"{task} / {condition}", fontsize=10)
        ax.xaxis.set_major_formatter(_step_format)
        ax.set_xlabel("training step")
        ax.set_ylabel(f"return (mean, {c.confidence:.0%} CI)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def _band(record: Mapping[str, Any]) -> tuple[float, float, float]:
    """(mean return, CI low, CI high) of a line; a missing bound is the mean (no band), a missing mean NaN."""
    m = record.get("metrics") or {}
    mean = math.nan if m.get("reward") is None else float(m["reward"])
    low, high = m.get("reward_ci_low"), m.get("reward_ci_high")
    return mean, mean if low is None else float(low), mean if high is None else float(high)


@_plain
def sensitivity_png(comparison: Comparison) -> str:
    """Per task, the difference B - A with its CI for each condition, coloured by verdict."""
    tasks: dict[str, list[CellResult]] = {}
    for cell in comparison.cells:
        tasks.setdefault(cell.task, []).append(cell)
    fig, axes = _grid(len(tasks), width=4.6, height=3.2)
    for ax, (task, cells) in zip(axes, tasks.items(), strict=True):
        for x, cell in enumerate(cells):
            d = cell.paired.diff
            ax.errorbar(
                [x],
                [d.value],
                yerr=[[d.value - d.low], [d.high - d.value]],
                fmt="o",
                capsize=5,
                color=VERDICT_COLOURS.get(cell.verdict, "black"),
            )
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(cells)), [cell.condition for cell in cells], rotation=20, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(cells) - 0.4)
        ax.set_title(task, fontsize=10)
        ax.set_ylabel(f"B - A return ({comparison.confidence:.0%} CI)")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _png(fig)


@_plain
def profile_png(comparison: Comparison) -> str | None:
    """The performance profiles of A and B (fraction of episodes scoring above tau), over normalised scores."""
    if not comparison.aggregate.normalised:
        return None
    scores_a, scores_b = comparison.aggregate.scores_a, comparison.aggregate.scores_b
    values = np.concatenate([*scores_a.values(), *scores_b.values()])
    low, high = float(np.min(values)), float(np.max(values))
    taus = np.linspace(min(low, 0.0), max(high, 1.0), 201)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for k, (label, s) in enumerate(((comparison.label_a, scores_a), (comparison.label_b, scores_b))):
        profile = stats.performance_profile_ci(s, taus, confidence=comparison.confidence)
        ax.plot(taus, profile.value, color=f"C{k}", label=f"{'AB'[k]}: {label}")
        ax.fill_between(taus, profile.low, profile.high, color=f"C{k}", alpha=0.2)
    ax.set_xlabel("normalised score tau")
    ax.set_ylabel(f"fraction of episodes > tau ({comparison.confidence:.0%} CI)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       color: #1f2328; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #d0d7de; text-align: left; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.aggregate td { border-top: 2px solid #1f2328; font-weight: 600; }
td.verdict { font-weight: 600; color: #fff; text-align: center; }
td.better { background: #1a7f37; } td.worse { background: #cf222e; } td.inconclusive { background: #8c959f; }
p.note, ul.note { color: #57606a; font-size: 0.9em; }
img { max-width: 100%; height: auto; }
code { background: #f6f8fa; padding: 0.1em 0.3em; }
"""


def html_page(comparison: Comparison) -> str:
    """The ``--html`` page: one self-contained document (inline CSS, plots as data URIs, no URL at all)."""
    c = comparison
    esc = html.escape
    head = "".join(f"<th>{esc(t)}</th>" for t in columns(c))
    body = []
    rows = table_rows(c)
    for k, row in enumerate(rows):
        aggregate = k == len(rows) - 1
        tds = [f"<td>{esc(s)}</td>" for s in row[:2]]
        tds += [f'<td class="num">{esc(s)}</td>' for s in row[2:6]]
        tds.append(f'<td class="verdict {esc(row[6])}">{esc(row[6])}</td>')
        body.append(f'<tr class="{"aggregate" if aggregate else "cell"}">{"".join(tds)}</tr>')
    header = "".join(f"<li>{esc(line)}</li>" for line in header_lines(c))
    notes = "".join(f"<li>{esc(line)}</li>" for line in footer_lines(c))
    g = c.aggregate
    d = _digits(g.iqm_a.value, g.iqm_b.value)
    what = "normalised scores" if g.normalised else "raw returns"
    summary = (
        f"Over all {len(c.cells)} cells, the IQM of {what} is {_with_ci(g.iqm_a.value, g.iqm_a.low, g.iqm_a.high, d)} "
        f"for A and {_with_ci(g.iqm_b.value, g.iqm_b.low, g.iqm_b.high, d)} for B: B - A = "
        f"{_with_ci(g.diff.value, g.diff.low, g.diff.high, d)}, P(B &gt; A) = {g.p_improvement:.2f}, "
    )
    summary = esc(summary).replace("&amp;gt;", "&gt;")
    summary += f'<strong class="aggregate-verdict">{esc(g.verdict)}</strong>.'
    profile = profile_png(c)
    sections = [
        "<h2>Training curves</h2>",
        '<p class="note">Mean return against training step, with its CI band; each task\'s first condition.</p>',
        f'<img id="curves" alt="training curves" src="{curves_png(c)}">',
        "<h2>Per cell</h2>",
        f'<table id="cells"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>',
        f'<ul class="note">{notes}</ul>',
        "<h2>Aggregate</h2>",
        f'<p id="aggregate">{summary}</p>',
        "<h2>Sensitivity to the condition</h2>",
        '<p class="note">B - A per condition, with its CI: green better, red worse, grey inconclusive.</p>',
        f'<img id="sensitivity" alt="difference per condition" src="{sensitivity_png(c)}">',
    ]
    if profile is not None:
        sections += [
            "<h2>Performance profile</h2>",
            '<p class="note">Fraction of episodes whose normalised score exceeds tau.</p>',
            f'<img id="profile" alt="performance profiles" src="{profile}">',
        ]
    title = f"simeval compare: {c.label_a} vs {c.label_b}"
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style></head>\n<body>\n"
        f"<h1>{esc(title)}</h1>\n<ul>{header}</ul>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


def write_html(comparison: Comparison, path: str | os.PathLike) -> str:
    """Write :func:`html_page` to ``path`` atomically (a temporary file, then a rename); returns the path."""
    page = html_page(comparison).encode("utf-8")
    return write_atomically(path, lambda f: f.write(page))


# -- the command line -----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: message`` on stderr and exit 2."""
        self.exit(2, f"simeval-report compare: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``python -m simeval.launch.report compare``."""
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline: a results directory (simeval.launch --out)")
    parser.add_argument("run_b", metavar="RUN_B", help="the candidate, said better or worse than A")
    parser.add_argument("--step-a", type=int, help="compare A's evaluation at this step (default: each cell's highest)")
    parser.add_argument("--step-b", type=int, help="compare B's evaluation at this step (default: each cell's highest)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report to FILE")
    return parser
