"""The comparison as text: a plain table for pipes and files, a coloured one (rich) on a terminal."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TextIO

from simeval.report.comparison import Comparison


def digits(*values: float) -> int:
    """Decimals that suit a row of numbers: 1 from 100 up, 2 from 1 up, else 3."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    return 1 if top >= 100 else 2 if top >= 1 else 3


def with_ci(value: float, low: float, high: float, digits: int | None = None) -> str:
    """``812.3 [790.1, 830.0]``."""
    d = digits(value, low, high) if digits is None else digits
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
        d = digits(p.mean_a, p.mean_b, *c.ci_a, *c.ci_b)
        rows.append(
            (
                c.task,
                c.condition,
                with_ci(p.mean_a, *c.ci_a, digits=d),
                with_ci(p.mean_b, *c.ci_b, digits=d),
                with_ci(p.diff.value, p.diff.low, p.diff.high, digits=d),
                f"{p.p_improvement.value:.2f}",
                c.verdict,
            )
        )
    g = comparison.aggregate
    d = digits(g.iqm_a.value, g.iqm_b.value, g.iqm_a.low, g.iqm_a.high, g.iqm_b.low, g.iqm_b.high)
    rows.append(
        (
            "*",
            "*",
            with_ci(g.iqm_a.value, g.iqm_a.low, g.iqm_a.high, digits=d),
            with_ci(g.iqm_b.value, g.iqm_b.low, g.iqm_b.high, digits=d),
            with_ci(g.diff.value, g.diff.low, g.diff.high, digits=d),
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
