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
own confidence, so the list holds with both at once (the union: 1 - alpha_A - alpha_B). ``compare --html FILE``
writes their page (:func:`compare_page`): both maps drawn side by side, their difference drawn
(:func:`difference_png`: each box coloured by its pair of classes) and the list as a table.
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
# Two maps' difference (:func:`difference_png`): a box by its pair of classes, where they differ the strongest colours.
PAIR_COLOURS = {"both pass": "#c7e9c0", "both fail": "#fcbba1", "b fails": "#e6550d", "a fails": "#3182bd",
                "uncertain": "#f0f0f0"}  # fmt: skip


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
    from simeval.report.html import PAGE_WIDTH

    return _maps_png([(strategy, f"where {strategy.ck_name} fails ({strategy.plan.failure})")], PAGE_WIDTH * 0.6)


def _maps_png(panels: list[tuple[SearchStrategy, str]], width: float) -> str:
    """Each (map, title) of ``panels`` drawn side by side (:func:`_curve` or :func:`_heatmap`), as a PNG data URI."""
    from simeval.report.html import _png, _pyplot, plain_text

    plt = _pyplot()
    with plain_text():
        fig, axes = plt.subplots(1, len(panels), figsize=(width, 4.4), squeeze=False)
        for ax, (strategy, title) in zip(axes[0], panels, strict=True):
            data = strategy.map.as_data()
            if len(strategy.plan.axes) == 1:
                _curve(ax, data, strategy.plan)
            else:
                _heatmap(fig, ax, data, strategy.plan)
            ax.set_title(title, fontsize=10)
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
    return _page(
        "where does the policy fail",
        "Where does the policy fail",
        f'<p id="summary">{summary}</p>\n'
        f'<img id="map" alt="failure map" src="{map_png(strategy)}">\n'
        f'<table id="regions"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>\n'
        f"<pre id=\"table\">{esc(strategy.table())}</pre>\n"
        f"{evidence_html}",
        media=True,
    )


def _page(title: str, heading: str, body: str, media: bool = False) -> str:
    """A self-contained page, ``heading`` over ``body`` (HTML), under a policy that fetches nothing but the images
    held in the page and, with ``media``, the videos beside it."""
    csp = "default-src 'none'; img-src data:; " + ("media-src 'self'; " if media else "") + "style-src 'unsafe-inline'"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        f"<title>simeval: {html.escape(title)}</title>\n"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}tr.fail td{color:#b00}"
        "video{max-width:320px;display:block}</style></head>\n<body>\n"
        f"<h1>{heading}</h1>\n{body}"
        "</body></html>\n"
    )


def write_html(strategy: SearchStrategy, path: str | os.PathLike, evidence: list[dict] | None = None) -> str:
    """Write :func:`html_page` to ``path`` atomically (its videos linked relative to it); returns the path."""
    page = html_page(strategy, evidence, os.path.dirname(os.path.abspath(path))).encode("utf-8")
    return write_atomically(path, lambda f: f.write(page))


def overlaps(a: SearchStrategy, b: SearchStrategy) -> list[tuple[dict[str, tuple[float, float]], str, str]]:
    """Each pair of overlapping regions of the two maps (the finer partition): their common box, A's class, B's.

    Raises:
        ValueError: the maps search other axes or ranges, or define failure otherwise (one line each).
    """
    pa, pb = a.plan, b.plan
    if [(x.name, x.low, x.high) for x in pa.axes] != [(x.name, x.low, x.high) for x in pb.axes]:
        raise ValueError("the two searches map other ranges: compare searches of the same --search ranges.")
    if (pa.fail_below, pa.failure_rate) != (pb.fail_below, pb.failure_rate):
        raise ValueError("the two searches define failure otherwise (--fail-below, --failure-rate): compare alike.")
    names = [x.name for x in pa.axes]
    pairs = []
    for ra in a.map.regions():
        for rb in b.map.regions():
            box = {}
            for n in names:
                lo, hi = max(ra.bounds[n][0], rb.bounds[n][0]), min(ra.bounds[n][1], rb.bounds[n][1])
                if hi <= lo:
                    break
                box[n] = (lo, hi)
            else:
                pairs.append((box, ra.klass, rb.klass))
    return pairs


def _differences(a: SearchStrategy, b: SearchStrategy, label_a: str, label_b: str) -> list[tuple[str, str, list[str]]]:
    """Where the decided classes differ: (kind, title, the boxes) for B failing where A passes, then the reverse."""
    pairs = overlaps(a, b)
    return [
        (kind, title, [box_text(box) for box, ka, kb in pairs if _pair_kind(ka, kb) == kind])
        for kind, title in (
            ("b fails", f"{label_b} fails where {label_a} passes"),
            ("a fails", f"{label_a} fails where {label_b} passes"),
        )
    ]


def _pair_kind(klass_a: str, klass_b: str) -> str:
    """The key of :data:`PAIR_COLOURS` that a box with these two classes is drawn in."""
    if "uncertain" in (klass_a, klass_b):
        return "uncertain"
    if klass_a == klass_b:
        return f"both {klass_a}"
    return "b fails" if klass_b == "fail" else "a fails"


def compare_maps(a: SearchStrategy, b: SearchStrategy, label_a: str = "A", label_b: str = "B") -> str:
    """Where B fails and A does not (and the reverse), region against region, as text.

    The maps must search the same axes and define failure alike (:func:`overlaps`); each pair of overlapping
    leaves (the finer partition) with decided classes that differ is listed.
    """
    pa, pb = a.plan, b.plan
    differ = _differences(a, b, label_a, label_b)
    confidence = 1 - (1 - pa.confidence) - (1 - pb.confidence)
    lines = [
        f"failure maps compared: {label_a} ({a.ck_name}) and {label_b} ({b.ck_name}); failure = {pa.failure}, "
        f"level {pa.failure_rate:g}; listed differences hold with {confidence:.0%} confidence (both maps at once)"
    ]
    for _kind, title, boxes in differ:
        lines.append(f"{title}: " + ("; ".join(boxes) if boxes else "nowhere the maps decided"))
    return "\n".join(lines)


def difference_png(a: SearchStrategy, b: SearchStrategy, label_a: str = "A", label_b: str = "B") -> str:
    """The two maps' difference as a PNG data URI: each overlapping box coloured by its pair of classes
    (:data:`PAIR_COLOURS`); in 1-D boxes along the axis, in 2-D a heatmap."""
    import matplotlib.patches as mpatches

    from simeval.report.html import PAGE_WIDTH, _png, _pyplot, plain_text

    plt = _pyplot()
    axes = a.plan.axes
    names = {"b fails": f"{label_b} fails, {label_a} passes", "a fails": f"{label_a} fails, {label_b} passes",
             "uncertain": "uncertain in either"}  # fmt: skip
    with plain_text():
        fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 1.8) if len(axes) == 1 else (PAGE_WIDTH * 0.6, 4.4))
        for box, ka, kb in overlaps(a, b):
            (x0, x1), (y0, y1) = box[axes[0].name], box[axes[1].name] if len(axes) > 1 else (0.0, 1.0)
            kind = _pair_kind(ka, kb)
            ax.add_patch(mpatches.Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=PAIR_COLOURS[kind], edgecolor="black",
                                            linewidth=0.5, hatch="//" if kind == "uncertain" else None))  # fmt: skip
        ax.set_xlim(axes[0].low, axes[0].high)
        ax.set_xlabel(axes[0].name)
        if len(axes) > 1:
            ax.set_ylim(axes[1].low, axes[1].high)
            ax.set_ylabel(axes[1].name)
        else:
            ax.set_ylim(0.0, 1.0)
            ax.set_yticks([])
        legend = [
            mpatches.Patch(facecolor=c, edgecolor="black", label=names.get(k, k)) for k, c in PAIR_COLOURS.items()
        ]
        ax.legend(handles=legend, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title(f"where {label_a} and {label_b} differ", fontsize=10)
        fig.tight_layout()
        return _png(fig)


def compare_page(a: SearchStrategy, b: SearchStrategy, label_a: str = "A", label_b: str = "B") -> str:
    """The ``compare --html`` page of two search runs: both maps drawn side by side, their difference drawn
    (:func:`difference_png`), and :func:`compare_maps`'s table, region by region.

    Raises:
        ValueError: as :func:`overlaps`.
    """
    from simeval.report.html import PAGE_WIDTH

    esc = html.escape
    text = compare_maps(a, b, label_a, label_b)
    rows = [
        f'<tr class="{kind.replace(" ", "-")}"><td>{esc(title)}</td><td>{esc(box)}</td></tr>'
        for kind, title, boxes in _differences(a, b, label_a, label_b)
        for box in boxes or ["nowhere the maps decided"]
    ]
    panels = [(s, f"{label}: where {s.ck_name} fails ({s.plan.failure})") for s, label in ((a, label_a), (b, label_b))]
    return _page(
        f"failure maps compared: {label_a} and {label_b}",
        "Where do the two policies fail",
        f'<p id="summary">{esc(text.splitlines()[0])}</p>\n'
        f'<img id="maps" alt="both failure maps" src="{_maps_png(panels, PAGE_WIDTH)}">\n'
        f'<img id="difference" alt="where the maps differ" src="{difference_png(a, b, label_a, label_b)}">\n'
        '<table id="differences"><thead><tr><th>where</th><th>region</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>\n"
        f'<pre id="table">{esc(text)}</pre>\n',
    )


def write_compare_html(
    a: SearchStrategy, b: SearchStrategy, path: str | os.PathLike, label_a: str = "A", label_b: str = "B"
) -> str:
    """Write :func:`compare_page` to ``path`` atomically; returns the path."""
    page = compare_page(a, b, label_a, label_b).encode("utf-8")
    return write_atomically(path, lambda f: f.write(page))
