"""The report of a ``--search`` run: its failure map, drawn, and two maps compared.

The run's lines are replayed through the search strategy's own code
(:meth:`simeval.strategies.SearchStrategy.replay`), so the map is the one the run drew, also for a run
that has not finished. The text is the strategy's table (each region's bounds, episodes, failure rate,
anytime-valid interval and class; the 1-D boundary; the worst region). The picture
(:func:`map_png`): in 1-D each region's failure rate with its interval as a band over its span and the level
as a line; in 2-D a heatmap of the regions' rates, each region outlined and marked by its class.
``--html FILE`` writes the page; ``<run>/failure_map.png`` is written always.

Two maps (``report compare`` of two search runs, :func:`compare_maps`) are compared region against region on
the finer of the two partitions: where B fails and A passes, and the reverse. Each map's classes hold with its
own confidence, so the list holds with both at once (the union: 1 - alpha_A - alpha_B).
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from simeval.atomic import write_atomically
from simeval.records import read_records
from simeval.report.runs import holds_run_of
from simeval.strategies import SearchPlan, SearchStrategy
from simeval.strategies.search import box_text

CLASS_COLOURS = {"fail": "#d62728", "uncertain": "#7f7f7f", "pass": "#2ca02c"}


def is_search(out_dir: str) -> bool:
    """Whether ``out_dir``'s results.jsonl holds a search run's lines."""
    return holds_run_of(out_dir, "search")


def replay_search(out_dir: str) -> SearchStrategy:
    """The search of ``out_dir``'s run, rebuilt from its lines by the strategy's code.

    Raises:
        ValueError: it holds no search run's line, or lines of another order than a search writes.
    """
    records = list(read_records(os.path.join(out_dir, "results.jsonl")))
    data = next((r["search"] for r in records if isinstance(r.get("search"), dict)), None)
    if data is None:
        raise ValueError(f"{out_dir}: no --search line in results.jsonl.")
    plan = SearchPlan.from_data(data, f"{out_dir}: search")
    first = next((r for r in records if r.get("status") == "ok" and "region" in r), {})
    name = str(first.get("checkpoint_name") or os.path.basename(os.path.normpath(out_dir)))

    def cell_for(key: tuple[int, ...], bounds: dict, visit: int, seed: int) -> SimpleNamespace:
        return SimpleNamespace(bounds=dict(bounds), label=lambda n: f"{n} region {key} round {visit}")

    strategy = SearchStrategy(None, name, plan, cell_for, int(first.get("seed") or 0))
    strategy.replay({"": records})
    return strategy


def report_text(strategy: SearchStrategy) -> str:
    """The map as text (:meth:`SearchStrategy.table`)."""
    return strategy.table()


def map_png(strategy: SearchStrategy) -> str:
    """The map as a PNG data URI: a curve with bands in 1-D, a heatmap in 2-D."""
    from simeval.report.html import PAGE_WIDTH, _png, _pyplot, plain_text

    plt = _pyplot()
    data = strategy.map.as_data()
    axes = strategy.plan.axes
    with plain_text():
        fig, ax = plt.subplots(figsize=(PAGE_WIDTH * 0.6, 4.4))
        if len(axes) == 1:
            _curve(ax, data, strategy.plan)
        else:
            _heatmap(fig, ax, data, strategy.plan)
        ax.set_title(f"where {strategy.ck_name} fails ({strategy.plan.failure})", fontsize=10)
        fig.tight_layout()
        return _png(fig)


def _curve(ax: Any, data: Mapping[str, Any], plan: SearchPlan) -> None:
    name = plan.axes[0].name
    for r in data["regions"]:
        lo, hi = r["bounds"][name]
        colour = CLASS_COLOURS[r["class"]]
        ax.fill_between([lo, hi], [r["low"]] * 2, [min(r["high"], 1.0)] * 2, color=colour, alpha=0.25, linewidth=0)
        if r["estimate"] is not None:
            ax.plot([lo, hi], [r["estimate"]] * 2, color=colour, linewidth=2)
    ax.axhline(plan.failure_rate, color="black", linestyle="--", linewidth=0.8, label=f"level {plan.failure_rate:g}")
    boundary = data.get("boundary") or {}
    if boundary.get("low") is not None:
        ax.axvspan(boundary["low"], boundary["high"], color="#1f77b4", alpha=0.12, label="boundary interval")
    for klass, colour in CLASS_COLOURS.items():
        ax.plot([], [], color=colour, linewidth=6, alpha=0.5, label=klass)
    ax.set_xlim(plan.axes[0].low, plan.axes[0].high)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(name)
    ax.set_ylabel("failure rate (interval as band)")
    ax.legend(fontsize=7, loc="best")


def _heatmap(fig: Any, ax: Any, data: Mapping[str, Any], plan: SearchPlan) -> None:
    import matplotlib.cm as cm
    import matplotlib.colors as mcolors
    import matplotlib.patches as mpatches

    x, y = plan.axes[0].name, plan.axes[1].name
    cmap = mcolors.LinearSegmentedColormap.from_list("fail", ["#2ca02c", "#ffffbf", "#d62728"])
    norm = mcolors.Normalize(0.0, 1.0)
    for r in data["regions"]:
        (x0, x1), (y0, y1) = r["bounds"][x], r["bounds"][y]
        face = "white" if r["estimate"] is None else cmap(norm(r["estimate"]))
        ax.add_patch(mpatches.Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=face, edgecolor="black", linewidth=0.5,
                                        hatch="//" if r["class"] == "uncertain" else None))  # fmt: skip
        mark = {"fail": "F", "pass": "", "uncertain": "?"}[r["class"]]
        if mark:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, mark, ha="center", va="center", fontsize=7)
    ax.set_xlim(plan.axes[0].low, plan.axes[0].high)
    ax.set_ylim(plan.axes[1].low, plan.axes[1].high)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="failure rate (F: fail, ?: uncertain)")


def write_png(strategy: SearchStrategy, path: str | os.PathLike) -> str:
    """Write :func:`map_png`'s picture to ``path`` atomically; returns the path."""
    import base64

    raw = base64.b64decode(map_png(strategy).split(",", 1)[1])
    return write_atomically(path, lambda f: f.write(raw))


def html_page(strategy: SearchStrategy, evidence: list[dict] | None = None, base: str = ".") -> str:
    """The ``--html`` page of a search run: the map drawn, its table, and the replayed evidence (the run's
    ``replays.jsonl`` lines: the command that replays each episode, its return, its drawn values, and its video
    linked relative to ``base``, the page's folder)."""
    esc = html.escape
    csp = "default-src 'none'; img-src data:; media-src 'self'; style-src 'unsafe-inline'"
    rows = []
    for r in strategy.map.as_data()["regions"]:
        box = box_text(r["bounds"])
        rate = "-" if r["estimate"] is None else f"{r['estimate']:.2f}"
        cells = (box, r["n"], r["failures"], rate, f"[{r['low']:.2f}, {r['high']:.2f}]", r["class"])
        rows.append(f'<tr class="{esc(r["class"])}">' + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{t}</th>" for t in ("region", "episodes", "failed", "rate", "interval", "class"))
    shown = []
    for item in evidence or []:
        video = item.get("video")
        link = ""
        if video:
            href = esc(os.path.relpath(str(video), base).replace(os.sep, "/"), quote=True)
            link = f'<video controls preload="none" src="{href}"></video><a href="{href}">{esc(href)}</a>'
        drawn = ", ".join(f"{k} {v:.4g}" for k, v in (item.get("conditions") or {}).items())
        same = "equal to the bit" if item.get("equal") else "not equal to the record"
        shown.append(
            f"<li><code>{esc(str(item.get('command', '')))}</code>: return {float(item['replayed_return']):.2f} "
            f"({esc(drawn)}; {same}){link}</li>"
        )
    evidence_html = f"<h2>Evidence</h2>\n<ul id=\"evidence\">{''.join(shown)}</ul>\n" if shown else ""
    summary = esc(strategy.table().splitlines()[0])
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        "<title>simeval: where does the policy fail</title>\n"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}tr.fail td{color:#b00}"
        "video{max-width:320px;display:block}</style></head>\n<body>\n"
        "<h1>Where does the policy fail</h1>\n"
        f'<p id="summary">{summary}</p>\n'
        f'<img id="map" alt="failure map" src="{map_png(strategy)}">\n'
        f'<table id="regions"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>\n'
        f"<pre id=\"table\">{esc(strategy.table())}</pre>\n"
        f"{evidence_html}"
        "</body></html>\n"
    )


def write_html(strategy: SearchStrategy, path: str | os.PathLike, evidence: list[dict] | None = None) -> str:
    """Write :func:`html_page` to ``path`` atomically (its videos linked relative to it); returns the path."""
    page = html_page(strategy, evidence, os.path.dirname(os.path.abspath(path))).encode("utf-8")
    return write_atomically(path, lambda f: f.write(page))


def compare_maps(a: SearchStrategy, b: SearchStrategy, label_a: str = "A", label_b: str = "B") -> str:
    """Where B fails and A does not (and the reverse), region against region, as text.

    The maps must search the same axes and define failure alike; each pair of overlapping leaves (the finer
    partition) with decided classes that differ is listed.
    """
    pa, pb = a.plan, b.plan
    if [(x.name, x.low, x.high) for x in pa.axes] != [(x.name, x.low, x.high) for x in pb.axes]:
        raise ValueError("the two searches map other ranges: compare searches of the same --search ranges.")
    if (pa.fail_below, pa.failure_rate) != (pb.fail_below, pb.failure_rate):
        raise ValueError("the two searches define failure otherwise (--fail-below, --failure-rate): compare alike.")
    names = [x.name for x in pa.axes]
    differ: dict[tuple[str, str], list[str]] = {("pass", "fail"): [], ("fail", "pass"): []}
    for ra in a.map.regions():
        for rb in b.map.regions():
            box = {}
            for n in names:
                lo, hi = max(ra.bounds[n][0], rb.bounds[n][0]), min(ra.bounds[n][1], rb.bounds[n][1])
                if hi <= lo:
                    break
                box[n] = (lo, hi)
            else:
                pair = (ra.klass, rb.klass)
                if pair in differ:
                    differ[pair].append(box_text(box))
    confidence = 1 - (1 - pa.confidence) - (1 - pb.confidence)
    lines = [
        f"failure maps compared: {label_a} ({a.ck_name}) and {label_b} ({b.ck_name}); failure = {pa.failure}, "
        f"level {pa.failure_rate:g}; listed differences hold with {confidence:.0%} confidence (both maps at once)"
    ]
    for (ka, kb), title in (
        (("pass", "fail"), f"{label_b} fails where {label_a} passes"),
        (("fail", "pass"), f"{label_a} fails where {label_b} passes"),
    ):
        boxes = differ[(ka, kb)]
        lines.append(f"{title}: " + ("; ".join(boxes) if boxes else "nowhere the maps decided"))
    return "\n".join(lines)
