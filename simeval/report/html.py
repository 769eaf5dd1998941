"""The comparison as one self-contained HTML page: the table, the aggregate, and its figures as PNGs."""

from __future__ import annotations

import base64
import contextlib
import functools
import html
import io
import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from simeval import stats
from simeval.atomic import write_atomically
from simeval.report.comparison import CellResult, Comparison, cell_of
from simeval.report.text import (
    NUMERIC,
    SUCCESS_VERDICT,
    VERDICT,
    aggregate_line,
    columns,
    footer_lines,
    header_lines,
    interval_digits,
    table_rows,
    with_ci,
)

VERDICT_COLOURS = {"better": "#1a7f37", "worse": "#cf222e", "equivalent": "#0969da", "inconclusive": "#6e7781"}

_T = TypeVar("_T")


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


# A figure's width in inches (at 100 dpi, the page's width): the page shows it across its width.
PAGE_WIDTH = 13.0


def _grid(n: int, height: float = 3.6) -> tuple[Any, list[Any]]:
    """A figure of ``n`` panels, up to 3 a row, as wide as the page whatever ``n``; the unused panels hidden."""
    plt = _pyplot()
    ncols = min(3, max(n, 1))
    nrows = math.ceil(max(n, 1) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PAGE_WIDTH, height * nrows + 0.4), squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _step_format(x: float, _pos: int = 0) -> str:
    """Training steps as 250k, 1M, 1.5M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    return f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def cells_phrase(n: int) -> str:
    """``the 1 cell``, ``all 3 cells``: how the aggregate's sentence names the cells."""
    return "the 1 cell" if n == 1 else f"all {n} cells"


def has_curves(comparison: Comparison) -> bool:
    """Whether either run was evaluated at more than one training step (else no curve has two points)."""
    return any(len({int(r["step"]) for r in rows}) > 1 for rows in (comparison.rows_a, comparison.rows_b))


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
        ax.set_ylabel("return (mean, 95% CI)")
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
    fig, axes = _grid(len(tasks), height=3.4)
    for ax, (task, cells) in zip(axes, tasks.items(), strict=True):
        for x, cell in enumerate(cells):
            d = cell.paired.diff
            finite = math.isfinite(d.low) and math.isfinite(d.high)  # no interval yet (one episode): the point alone
            ax.errorbar(
                [x],
                [d.value],
                yerr=[[d.value - d.low], [d.high - d.value]] if finite else None,
                fmt="o",
                capsize=5,
                color=VERDICT_COLOURS.get(cell.verdict, "black"),
            )
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(cells)), [cell.condition for cell in cells], rotation=20, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(cells) - 0.4)
        ax.set_title(task, fontsize=10)
        ax.set_ylabel("B - A return (each cell's interval)")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _png(fig)


@_plain
def profile_taus(scores: np.ndarray, points: int = 201) -> np.ndarray:
    """The thresholds a performance profile is drawn over: the scores' range and 2% of it either side."""
    low, high = float(np.min(scores)), float(np.max(scores))
    pad = 0.02 * (high - low) or 0.5
    return np.linspace(low - pad, high + pad, points)


def page_title(comparison: Comparison) -> str:
    """``simeval compare: <A's checkpoint> vs <B's checkpoint>`` (a run's name where it spans several steps)."""
    c = comparison

    def name(label: str, steps: list[tuple[int, str]]) -> str:
        return steps[0][1] if len(steps) == 1 and steps[0][1] else label

    return f"simeval compare: {name(c.label_a, c.steps_a)} vs {name(c.label_b, c.steps_b)}"


def profile_png(comparison: Comparison) -> str | None:
    """The performance profiles of A and B (fraction of episodes scoring above tau), over normalised scores."""
    if comparison.aggregate.normalised_by != "reference":
        return None
    scores_a, scores_b = {}, {}
    for c in comparison.cells:  # each cell a stratum of the bootstrap
        low, high = c.reference or (0.0, 1.0)
        scores_a[f"{c.task} / {c.condition}"] = stats.normalized(c.returns_a, low, high)
        scores_b[f"{c.task} / {c.condition}"] = stats.normalized(c.returns_b, low, high)
    taus = profile_taus(np.concatenate([*scores_a.values(), *scores_b.values()]))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 4.8))
    for k, (label, s) in enumerate(((comparison.label_a, scores_a), (comparison.label_b, scores_b))):
        profile = stats.performance_profile_ci(s, taus, confidence=0.95)
        ax.plot(taus, profile.value, color=f"C{k}", label=f"{'AB'[k]}: {label}")
        ax.fill_between(taus, profile.low, profile.high, color=f"C{k}", alpha=0.2)
    ax.set_xlabel("normalised score tau")
    ax.set_ylabel("fraction of episodes > tau (95% pointwise bootstrap band)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(taus[0], taus[-1])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       color: #1f2328; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; display: block; overflow-x: auto; }
th, td { padding: 0.3em 0.6em; border-bottom: 1px solid #d0d7de; text-align: left; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.aggregate td { border-top: 2px solid #1f2328; font-weight: 600; }
td.verdict { font-weight: 600; color: #fff; text-align: center; }
td.better { background: #1a7f37; } td.worse { background: #cf222e; } td.inconclusive { background: #8c959f; }
td.equivalent { background: #0969da; } td.verdict:empty { background: none; }
p.note, ul.note { color: #57606a; font-size: 0.9em; }
img { width: 100%; height: auto; }
code { background: #f6f8fa; padding: 0.1em 0.3em; }
"""


def html_page(comparison: Comparison) -> str:
    """The ``--html`` page: one self-contained document (inline CSS, plots as data URIs, no URL at all)."""
    c = comparison
    esc = html.escape
    titles = columns(c)
    head = "".join(f"<th>{esc(t)}</th>" for t in titles)
    body = []
    rows = table_rows(c)
    for k, row in enumerate(rows):
        aggregate = k == len(rows) - 1
        tds = []
        for title, s in zip(titles, row, strict=True):
            if title in (VERDICT, SUCCESS_VERDICT):
                tds.append(f'<td class="verdict {esc(s)}">{esc(s)}</td>')
            else:
                tds.append(f'<td class="num">{esc(s)}</td>' if title in NUMERIC else f"<td>{esc(s)}</td>")
        body.append(f'<tr class="{"aggregate" if aggregate else "cell"}">{"".join(tds)}</tr>')
    header = "".join(f"<li>{esc(line)}</li>" for line in header_lines(c))
    notes = "".join(f"<li>{esc(line)}</li>" for line in footer_lines(c)[1:])
    g = c.aggregate
    d = interval_digits(g.diff.value, g.diff.low, g.diff.high, g.mean_a, g.mean_b)
    summary = (
        f"Over {cells_phrase(len(c.cells))}, B - A = {with_ci(g.diff.value, g.diff.low, g.diff.high, d)} "
        f"(A {g.mean_a:.{d}f}, B {g.mean_b:.{d}f}): "
    )
    summary = esc(summary) + f'<strong class="aggregate-verdict">{esc(g.verdict)}</strong>'
    if g.reason:  # what the interval reads, withheld: said where the verdict is read, not only in the notes
        summary += f' <span class="withheld">(withheld: {esc(g.reason)})</span>'
    summary += "."
    summary += f'</p>\n<p class="note">{esc(aggregate_line(c))}.'
    profile = profile_png(c)
    sections = []
    if has_curves(c):  # runs of one step each have none: the section is left out
        sections += [
            "<h2>Training curves</h2>",
            '<p class="note">Mean return against training step, with its CI band; each task\'s first condition.</p>',
            f'<img id="curves" alt="training curves" src="{curves_png(c)}">',
        ]
    sections += [
        "<h2>Per cell</h2>",
        f'<table id="cells"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>',
        f'<ul class="note">{notes}</ul>',
        "<h2>Aggregate</h2>",
        f'<p id="aggregate">{summary}</p>',
        "<h2>Sensitivity to the condition</h2>",
        '<p class="note">B - A per condition, with its interval: green better, red worse, blue equivalent, grey '
        "inconclusive.</p>",
        f'<img id="sensitivity" alt="difference per condition" src="{sensitivity_png(c)}">',
    ]
    if profile is not None:
        sections += [
            "<h2>Performance profile</h2>",
            '<p class="note">Fraction of episodes whose normalised score exceeds tau, with a 95% pointwise '
            "bootstrap band: a description of the scores, not a test.</p>",
            f'<img id="profile" alt="performance profiles" src="{profile}">',
        ]
    title = page_title(c)
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
