"""The comparison as text: a plain table for pipes and files, a coloured one (rich) on a terminal."""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from collections.abc import Sequence
from typing import TextIO

from simeval.report.comparison import METHODS, UNFINISHED, CellResult, Comparison
from simeval.stats.verdicts import FEW_PAIRS, MIN_N, SKEWED, ZERO_VARIANCE

VERDICT = "verdict"
NOTE = "note"
SUCCESS_VERDICT = "success verdict (McNemar)"
# Columns whose cells are numbers (right-aligned); the others are words.
NUMERIC = ("mean A", "mean B", "B - A [CI]", "episodes", "pairing gain", "share B ahead", "success A", "success B")
STYLES = {"better": "bold green", "worse": "bold red", "equivalent": "bold blue", "inconclusive": "dim"}
# What a terminal would act on rather than show: C0 and C1 controls (ANSI escapes, newlines, bells), DEL,
# line and paragraph separators, bidirectional overrides and isolates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def shown(value: object) -> str:
    """``value`` as text to print: every control character written as its escape (``\\x1b``, ``\\n``), so a name
    read from a results file can neither drive the terminal nor break a line or a table."""
    return _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), str(value))


def digits(*values: float) -> int:
    """Decimals that suit a row of numbers: 1 from 100 up, 2 from 1 up, else 3."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    return 1 if top >= 100 else 2 if top >= 1 else 3


def interval_digits(value: float, low: float, high: float, *others: float) -> int:
    """Decimals for an interval: :func:`digits`, or more (up to 6) where the interval is narrower than them or
    an end nearer 0, so that ``0.0004 [0.0001, 0.0007]`` does not read ``0.000 [0.000, 0.001]``."""
    d = digits(value, low, high, *others)
    width = high - low
    if math.isfinite(width) and width > 0:
        d = max(d, 1 - math.floor(math.log10(width)))
    for end in (low, high):
        if math.isfinite(end) and end != 0:
            d = max(d, -math.floor(math.log10(abs(end))))
    return min(d, 6)


def with_ci(value: float, low: float, high: float, digits: int | None = None) -> str:
    """``812.3 [790.1, 830.0]`` (an end that is not finite reads ``-inf`` or ``inf``)."""
    d = interval_digits(value, low, high) if digits is None else digits
    return f"{value:.{d}f} [{low:.{d}f}, {high:.{d}f}]"


def gain(value: float) -> str:
    """A pairing gain as ``x3.6``; ``x1000+`` from a thousand on (differences the same but for rounding),
    ``x inf`` where every difference is exactly the same, empty for fewer than two episodes."""
    if math.isnan(value):
        return ""
    if math.isinf(value):
        return "x inf"
    return "x1000+" if value >= 1000 else f"x{value:.1f}"


def _run_steps(steps: Sequence[tuple[int, str]]) -> str:
    """``step 200,000 (ck_200000.pt)``, or the range when the compared cells come from several steps."""
    if len(steps) == 1:
        step, name = steps[0]
        return f"step {step:,}" + (f" ({name})" if name else "")
    return f"steps {steps[0][0]:,} to {steps[-1][0]:,} (each cell's highest)"


def _level(confidence: float) -> str:
    """A confidence as a percentage, four significant digits or more where needed to tell it from 100%:
    ``95%``, ``98.33%``, ``99.96%``, ``99.995%``."""
    for places in range(4, 10):
        text = f"{100 * confidence:.{places}g}"
        if float(text) < 100:
            return text + "%"
    return f"{100 * confidence!r}%"


def family_line(comparison: Comparison) -> str:
    """The family of the verdicts: its alpha, its rows and how each cell's share is spent (Bonferroni)."""
    c = comparison
    families = {cell.family for cell in c.cells}
    if len(families) == 1:
        kind, alpha, rows = next(iter(families))
        with_success = any(cell.success is not None for cell in c.cells)
        split = f"; a cell with success splits it, return and success at {_level(1 - alpha / (2 * rows))}"
        share = (
            f"each cell's B - A interval at {_level(1 - alpha / rows)}" + (split if with_success else "")
        )  # fmt: skip
        if kind == "fixed":
            return f"family: alpha {alpha:g} over {rows} cell{'s' * (rows != 1)} (Bonferroni): {share}"
        return f"family: alpha {alpha:g} over {rows} rows of the adaptive run's look plan ({kind}, Bonferroni): {share}"
    return (
        f"family: {len(c.cells)} cells of different look plans or kinds (Bonferroni): family-wise error at most "
        f"{c.family_error:.3g}, the sum of each cell's share"
    )


def header_lines(comparison: Comparison) -> list[str]:
    """The lines above the table: both runs with their steps, and the family of the verdicts."""
    c = comparison
    lines = [
        f"A: {c.label_a}  {_run_steps(c.steps_a)}",
        f"B: {c.label_b}  {_run_steps(c.steps_b)}",
        f"B against A, {_level(1 - c.family_error)} sure of every verdict in the table at once",
    ]
    return [shown(line) for line in lines]


def aggregate_line(comparison: Comparison) -> str:
    """What the aggregate row is: its estimand, its normalisation, why it adds no error."""
    g = comparison.aggregate
    by = {
        "reference": "each divided by its task's reference width, high - low",
        "bounds": "each divided by its bounds' width, high - low, as not every task has a reference",
        "raw": "raw, in the tasks' own units, as not every task has a reference or bounds",
    }[g.normalised_by]
    return (
        f"*: mean over cells of normalised paired differences, cells weighted equally ({by}); its interval is the "
        f"mean of the cells' intervals, so it holds whenever they all do ({_level(g.confidence)} at least) and adds "
        "no error to the family; better/worse when it lies above/below 0"
    )


LEGEND = "legend (the columns in plain words):"
DETAILS = "details (the statistics behind the table: docs/statistics.md):"
UNITS = {
    "reference": "normalised: fraction of reference width",
    "bounds": "normalised: fraction of bounds' width",
    "raw": "raw: the tasks' own units",
}


def _interval_words(comparison: Comparison) -> str:
    """How the table's intervals hold: at any look (adaptive cells), or after the planned number of episodes."""
    kinds = {cell.looks is not None for cell in comparison.cells}
    if kinds == {True}:
        return "valid at any look"
    if kinds == {False}:
        return "for the episodes played"
    return "valid at any look for an adaptive cell"


def _equivalent(margin: float) -> str:
    return f"; equivalent: it lies inside (-{margin:g}, {margin:g}) (--margin)" if margin > 0 else ""


def legend_lines(comparison: Comparison) -> list[str]:
    """What each column means, in words a robotics engineer reads at a glance (the technical terms: details)."""
    c = comparison
    level = _level(1 - c.family_error)
    lines = [
        LEGEND,
        "  mean A, mean B: each checkpoint's mean return on the cell's episodes (the same episodes for both)",
        f"  B - A [CI]: B's mean minus A's, then the range the true difference B - A lies in, {level} for the whole "
        f"table at once, {_interval_words(c)}",
        "  verdict: better/worse: the whole range lies above/below 0; inconclusive: it still holds 0 (more episodes "
        "may tell)" + _equivalent(c.margin),
        "  method: how the range was computed (details below)",
        "  episodes: per checkpoint: how many episodes each of A and B played on the cell; the * row: their sum over "
        "cells (the launcher's 'episodes used' line gives it as 'per checkpoint')",
        "  stop: fixed: a set number of episodes; decided: the verdict was clear; budget: --max-episodes was reached "
        "first; equivalent, precise; unfinished: the run ended before a stop",
        "  pairing gain: x2.0: an unpaired test (other episodes for A and B) would need twice the episodes for the "
        "same range; below x1, playing the same episodes did not help",
        "  share B ahead: the share of episodes on which B scored higher than A, ties half (a description, not a test)",
        f"  *: all cells together, {UNITS[c.aggregate.normalised_by]} (each cell's difference divided by it, then "
        "averaged, cells weighted equally)",
    ]
    if _has_success(c):
        lines.append("  success A, success B: success rates; success verdict: B's success against A's, as above")
    if any(_note(cell) for cell in c.cells):
        lines.append("  note: for an inconclusive cell, what to do next (its next: line below)")
    reasons = {cell.paired.reason for cell in c.cells}
    if c.aggregate.reason:
        reasons |= {why for _, _, why in c.aggregate.broken}
        cells = ", ".join(f"{task} / {condition} ({why})" for task, condition, why in c.aggregate.broken)
        lines.append(
            f"  * {c.aggregate.reason}: the * range holds only when every cell's does, and these cells' episodes "
            f"break their method's assumption: {cells}; its verdict is withheld until they are fixed as below"
        )
    if SKEWED in reasons:
        lines.append(
            f"  {SKEWED}: the range would decide, but one episode's difference lies far beyond the others' spread "
            "(a fall), and this method's range assumes near-symmetric differences: it would give false verdicts. "
            "The verdict is withheld: declare the task's bounds on one episode's return (the suite's bounds: "
            "{low, high}) so the bounded (betting) range decides, valid whatever the falls"
        )
    if ZERO_VARIANCE in reasons:
        lines.append(
            f"  {ZERO_VARIANCE}: every episode gave the same difference, so the range has no width; a verdict "
            "from it needs the task declared deterministic"
        )
    if FEW_PAIRS in reasons:
        lines.append(f"  {FEW_PAIRS}: no verdict from fewer than {MIN_N} episodes per checkpoint")
    return lines


def _plan(cell: CellResult) -> dict:
    """The look plan an adaptive cell's lines record (``sequential``), or an empty one."""
    plan = cell.record_a.get("sequential")
    return plan if isinstance(plan, dict) else {}


def _planned(cell: CellResult) -> bool:
    """Whether the cell's run planned its looks (``--design planned``): its budget cannot be raised."""
    return cell.paired.method == "group-sequential" or _plan(cell).get("design") == "planned"


def _note(cell: CellResult) -> str:
    """The note column of an inconclusive cell: the next step in a few words."""
    if cell.verdict != "inconclusive":
        return ""
    if cell.paired.reason:
        return cell.paired.reason
    if cell.looks is None:
        return "next: a new run, more --episodes"
    if _planned(cell):
        return "next: plan spent, a new run"
    if cell.stop == UNFINISHED:
        return "next: resume the run"
    return f"next: --max-episodes {_more(cell)}"


def _more(cell: CellResult) -> int:
    """A larger budget for a cell: twice its plan's ``max_episodes`` (twice its episodes when unrecorded)."""
    budget = _plan(cell).get("max_episodes")
    return 2 * int(budget) if isinstance(budget, int | float) and budget > 0 else 2 * cell.paired.n


def _out_dir(comparison: Comparison) -> str | None:
    """The launcher's ``--out`` of a two-checkpoint run: the parent of its ``a`` and ``b`` directories."""
    a, b = (os.path.normpath(d) for d in (comparison.dir_a, comparison.dir_b))
    if (os.path.basename(a), os.path.basename(b)) == ("a", "b") and os.path.dirname(a) == os.path.dirname(b):
        return os.path.dirname(a) or "."
    return None


def _next_step(comparison: Comparison, cell: CellResult) -> str:
    """What to do about one inconclusive cell."""
    name = f"{cell.task} / {cell.condition}"
    n = cell.paired.n
    if cell.paired.reason == SKEWED:
        return (
            f"{name}: {SKEWED}: an episode fell far from the others and the {cell.paired.method} range assumes "
            "near-symmetric differences; declare the task's bounds (the suite's bounds: {low, high}) and compare again"
        )
    if cell.looks is None:
        return (
            f"{name}: inconclusive after {n} episodes per checkpoint: a fixed-n comparison cannot be extended; "
            f"evaluate both checkpoints again with more episodes (--episodes {2 * n}) into a new --out"
        )
    budget = _plan(cell).get("max_episodes", n)
    if _planned(cell):
        return (
            f"{name}: inconclusive at the end of its planned looks ({budget} episodes per checkpoint): a planned "
            f"(group-sequential) run cannot be extended, its boundaries are fixed by its budget; launch a new run "
            f"with a larger plan (--max-episodes {_more(cell)}) into a new --out"
        )
    out = _out_dir(comparison)
    same_out = f"--out {shlex.quote(out)}" if out else "the same --out"
    if cell.stop == UNFINISHED:
        return f"{name}: the run ended before this cell stopped: run the launcher's command again ({same_out})"
    return (
        f"{name}: inconclusive after {n} episodes per checkpoint (--max-episodes {budget}): continue the run, its "
        f"looks kept: the launcher's command with --max-episodes {_more(cell)} and {same_out} (the range stays "
        "valid at any look)"
    )


def next_steps(comparison: Comparison) -> list[str]:
    """One line per inconclusive cell: the command or flag that continues it, or why it cannot be continued."""
    steps = [_next_step(comparison, cell) for cell in comparison.cells if cell.verdict == "inconclusive"]
    return [f"next: {line}" for line in steps]


def footer_lines(comparison: Comparison) -> list[str]:
    """The lines below the table: the legend, each inconclusive cell's next step, the statistical details,
    warnings, cells only one run has (control characters escaped: :func:`shown`)."""
    c = comparison
    methods = [m for m in METHODS if any(cell.paired.method == m for cell in c.cells)]
    lines = [*legend_lines(c), *next_steps(c), DETAILS, "  " + family_line(c), "  " + aggregate_line(c)]
    lines.append("  method: " + "; ".join(f"{m} = {METHODS[m]}" for m in methods))
    if any(cell.success is not None for cell in c.cells):
        keys = sorted({cell.success.key for cell in c.cells if cell.success is not None})
        lines.append(
            f"  success A, success B: success rates ({', '.join(keys)}); success verdict: McNemar's test on the "
            "episodes where exactly one succeeded, at the cell's other half share"
        )
    lines += [f"warning: {w}" for w in c.warnings]
    for name, cells in (("A", c.only_a), ("B", c.only_b)):
        for task, condition in cells:
            lines.append(f"only in {name}: {task} / {condition} (left out of the statistics)")
    return [shown(line) for line in lines]


def _has_success(comparison: Comparison) -> bool:
    return any(cell.success is not None for cell in comparison.cells)


def columns(comparison: Comparison) -> tuple[str, ...]:
    """The table's column titles (the success columns only where some cell compares success)."""
    head = (
        "task",
        "condition",
        "mean A",
        "mean B",
        "B - A [CI]",
        VERDICT,
        NOTE,
        "method",
        "episodes",
        "stop",
        "pairing gain",
        "share B ahead",
    )
    return head + (("success A", "success B", SUCCESS_VERDICT) if _has_success(comparison) else ())


def _cell_row(c: CellResult, success: bool) -> tuple[str, ...]:
    p = c.paired
    d = interval_digits(p.diff.value, p.diff.low, p.diff.high, p.mean_a, p.mean_b)
    row = (
        shown(c.task),
        shown(c.condition),
        f"{p.mean_a:.{d}f}",
        f"{p.mean_b:.{d}f}",
        with_ci(p.diff.value, p.diff.low, p.diff.high, digits=d),
        p.verdict,
        _note(c),
        p.method,
        str(p.n),
        c.stop,
        gain(p.pairing_gain),
        f"{p.b_wins:.2f}",
    )
    if not success:
        return row
    s = c.success
    return (*row, *(("", "", "") if s is None else (f"{s.rate_a:.2f}", f"{s.rate_b:.2f}", s.verdict)))


def table_rows(comparison: Comparison) -> list[tuple[str, ...]]:
    """The table as text cells, one tuple per cell and the aggregate last (the text and HTML tables)."""
    success = _has_success(comparison)
    rows = [_cell_row(c, success) for c in comparison.cells]
    g = comparison.aggregate
    d = interval_digits(g.diff.value, g.diff.low, g.diff.high, g.mean_a, g.mean_b)
    aggregate = (
        "*",
        "*",
        f"{g.mean_a:.{d}f}",
        f"{g.mean_b:.{d}f}",
        with_ci(g.diff.value, g.diff.low, g.diff.high, digits=d),
        g.verdict,
        g.reason or UNITS[g.normalised_by],
        "mean of intervals",
        str(g.episodes),
        "",
        "",
        "",
    )
    rows.append(aggregate + (("", "", "") if success else ()))
    return rows


def text_table(comparison: Comparison) -> str:
    """The comparison as plain aligned text: header lines, the table (aggregate last), footnotes.

    Columns are separated by at least two spaces (a cell may hold single spaces),
    and the aggregate row is set off by a rule.
    """
    head, rows = columns(comparison), table_rows(comparison)
    widths = [max(len(str(r[k])) for r in (head, *rows)) for k in range(len(head))]
    right = {k for k, title in enumerate(head) if title in NUMERIC}

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

    console = console_cls(file=file, highlight=False, width=None if file.isatty() else 240)
    for line in header_lines(comparison):
        console.print(line, markup=False)
    table = Table(show_edge=False, header_style="bold")
    head = columns(comparison)
    for title in head:
        table.add_column(title, justify="right" if title in NUMERIC else "left", no_wrap=True)
    coloured = {k for k, title in enumerate(head) if title in (VERDICT, SUCCESS_VERDICT)}
    rows = table_rows(comparison)
    for k, row in enumerate(rows):
        cells = [Text(s, style=STYLES.get(s, "") if j in coloured else "") for j, s in enumerate(row)]
        table.add_row(*cells, end_section=k == len(rows) - 2)
    console.print(table)
    for line in footer_lines(comparison):
        console.print(line, markup=False)
