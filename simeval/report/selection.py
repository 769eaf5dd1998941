"""The report of a ``--select-best`` run: its selection table, its result, and each checkpoint's gap to the leader.

The run's lines are replayed through the selection strategy's own code
(:meth:`simeval.strategies.SelectionStrategy.replay`), so the table says what the run decided:
each checkpoint's step, episodes, mean, the interval for its gap to the leader, and whether it
was eliminated (at which look), chosen, or is still alive; then the result said as what it is
(chosen; chosen, equivalent within the margin; or, on the budget, the alive set and its leader).
``--html FILE`` writes a page with the table and the plot of each checkpoint's gap to the
leader over the looks (:func:`gaps_png`).

A ``--suite`` run's table is the same, one row per checkpoint, its means and gaps in the
suite's normalised units (each cell's return normalised by its task's reference).
"""

from __future__ import annotations

import html
import os
from types import SimpleNamespace

from simeval.atomic import write_atomically
from simeval.records import read_records
from simeval.report.runs import holds_run_of
from simeval.strategies import SelectionPlan, SelectionStrategy


def is_selection(out_dir: str) -> bool:
    """Whether ``out_dir``'s results.jsonl holds a selection run's lines."""
    return holds_run_of(out_dir, "selection")


def replay_selection(out_dir: str) -> SelectionStrategy:
    """The selection of ``out_dir``'s run, rebuilt from its lines by the strategy's code.

    Raises:
        ValueError: it holds no selection run's line.
    """
    records = list(read_records(os.path.join(out_dir, "results.jsonl")))
    data = next((r["selection"] for r in records if isinstance(r.get("selection"), dict)), None)
    if data is None:
        raise ValueError(f"{out_dir}: no --select-best line in results.jsonl.")
    plan = SelectionPlan.from_data(data)
    strategy = SelectionStrategy(plan, lambda look, seed, c: SimpleNamespace(key=(*plan.units[c][0], look)))
    strategy.replay({"": records})
    return strategy


def report_text(strategy: SelectionStrategy) -> str:
    """The selection table and its result line (:meth:`SelectionStrategy.table`)."""
    return strategy.table()


def gaps_png(strategy: SelectionStrategy) -> str:
    """Each checkpoint's gap to the leader over looks (its interval as a band), as a PNG data URI."""
    from simeval.report.html import PAGE_WIDTH, _png, _pyplot, plain_text

    plt = _pyplot()
    with plain_text():
        fig, ax = plt.subplots(figsize=(PAGE_WIDTH * 0.6, 4.2))
        for arm in strategy.arms:
            points = [(r.look, r.gaps[arm.index]) for r in strategy.history if arm.index in r.gaps]
            if not points:
                continue
            looks = [p[0] for p in points]
            low = [max(p[1][0], -1e6) for p in points]
            high = [min(p[1][1], 1e6) for p in points]
            gap = [r.means[arm.index] - r.means[r.leader] for r in strategy.history if arm.index in r.gaps]
            (line,) = ax.plot(looks, gap, marker="o", label=arm.name)
            ax.fill_between(looks, low, high, color=line.get_color(), alpha=0.15)
        ax.axhline(0.0, color="black", linewidth=0.8)
        if strategy.plan.margin:
            ax.axhline(-strategy.plan.margin, color="grey", linestyle="--", linewidth=0.8, label="-margin")
        ax.set_xlabel("look")
        ax.xaxis.get_major_locator().set_params(integer=True)
        units = "" if strategy.plan.suite is None else ", normalised"
        ax.set_ylabel(f"gap to the leader (mean - leader's{units})")
        ax.legend(fontsize=7, loc="lower left")
        fig.tight_layout()
        return _png(fig)


def html_page(strategy: SelectionStrategy) -> str:
    """The ``--html`` page of a selection run: one self-contained document (the table, the result, the plot)."""
    esc = html.escape
    rows = strategy.rows()
    suite = strategy.plan.suite is not None  # the suite's aggregate: normalised by the tasks' references
    mean, d = ("mean (normalised)", 3) if suite else ("mean", 2)
    head = "".join(f"<th>{t}</th>" for t in ("checkpoint", "step", "episodes", mean, "gap to leader", "outcome"))
    body = []
    for r in rows:
        gap = "-" if r["gap"] is None else f"[{r['gap'][0]:+.{d}f}, {r['gap'][1]:+.{d}f}]"
        cells = (r["checkpoint"], "-" if r["step"] is None else r["step"], r["episodes"], f"{r['mean']:.{d}f}", gap,
                 r["outcome"])  # fmt: skip
        body.append("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>")
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        "<title>simeval: select the best checkpoint</title>\n"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head>\n<body>\n"
        "<h1>Select the best checkpoint</h1>\n"
        f'<p id="result">{esc(strategy.describe())}</p>\n'
        f'<table id="selection"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>\n'
        "<h2>Gap to the leader over looks</h2>\n"
        "<p class=\"note\">Each checkpoint's mean minus the leader's after each look, with its anytime-valid "
        "interval as a band; a checkpoint's line ends at the look that eliminated it.</p>\n"
        f'<img id="gaps" alt="gap to the leader over looks" src="{gaps_png(strategy)}">\n'
        "</body></html>\n"
    )


def write_html(strategy: SelectionStrategy, path: str | os.PathLike) -> str:
    """Write :func:`html_page` to ``path`` atomically; returns the path."""
    page = html_page(strategy).encode("utf-8")
    return write_atomically(path, lambda f: f.write(page))
