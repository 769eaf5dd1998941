"""Eval curves: mean return against training step with its 95% band, one line per run (per cell of a suite's run),
the table, and the failed evaluations."""

from __future__ import annotations

import math
import os
import shlex

from simeval.metrics import LEGACY_CI_METHOD, ci_method_of
from simeval.report.html import plain_text
from simeval.report.text import shown

# The most curves the plot's legend names; above it, a title says how many there are.
MAX_LEGEND = 24


def _value(metrics: dict, key: str, default: float = math.nan) -> float:
    """``metrics[key]`` as a float; ``default`` when it is missing or null (a NaN when written)."""
    value = metrics.get(key)
    return default if value is None else float(value)


def _cell(record: dict) -> tuple[str, str] | None:
    """A suite line's (task, condition), control characters escaped (:func:`shown`); None for a plain run's line."""
    task, condition = record.get("task"), record.get("condition")
    if task is None and condition is None:
        return None
    return shown(task or record.get("env") or "?"), shown(condition or "nominal")


def table(runs: dict[str, list[dict]]) -> str:
    """Every evaluation of ``runs`` (label -> ok records), one row each; a missing value shows as nan.

    When some line is a suite's (it has ``task`` or ``condition``), the table has task and
    condition columns: one row per checkpoint and cell. Plain runs' tables have neither.
    """
    cells = any(_cell(r) is not None for rows in runs.values() for r in rows)
    width = {"task": 6, "condition": 11}
    if cells:
        for rows in runs.values():
            for r in rows:
                task, condition = _cell(r) or ("", "")
                width["task"] = max(width["task"], len(task) + 2)
                width["condition"] = max(width["condition"], len(condition) + 2)
    where = f"{'return':>12}"
    if cells:
        where = f"  {'task':<{width['task']}}{'condition':<{width['condition']}}{'return':>10}"
    head = f"{'run':<28}{'step':>12}{where}{'ci low':>12}{'ci high':>12}{'episodes':>10}"
    lines = [head, "-" * len(head)]
    for name, rows in runs.items():
        for r in rows:
            m = r["metrics"]
            if cells:
                task, condition = _cell(r) or ("", "")
                start = f"{shown(name)[-28:]:<28}{r['step']:>12,}  "
                start += f"{task:<{width['task']}}{condition:<{width['condition']}}{_value(m, 'reward'):>10.1f}"
            else:
                start = f"{shown(name)[-28:]:<28}{r['step']:>12,}{_value(m, 'reward'):>12.1f}"
            lines.append(
                f"{start}{_value(m, 'reward_ci_low'):>12.1f}{_value(m, 'reward_ci_high'):>12.1f}"
                f"{m.get('num_episodes', 0):>10}"
            )
    note = mixed_methods_note([r for rows in runs.values() for r in rows])
    return "\n".join(lines + ([note] if note else []))


def mixed_methods_note(records: list[dict]) -> str | None:
    """One line naming the methods of the rounds' intervals when ``records`` mix them (results of an older and a
    newer simeval in one table: :func:`simeval.metrics.ci_method_of`); None when they are of one method. An
    adaptive evaluation's merged looks (``looks``) are left out: the report replays their confidence sequence."""
    methods = sorted({ci_method_of(r) for r in records if "looks" not in r})
    if len(methods) < 2:
        return None
    named = [f"{m} (lines without ci_method)" if m == LEGACY_CI_METHOD else m for m in methods]
    return f"note: these intervals mix methods ({', '.join(named)}); docs/statistics.md, 'One cell', compares them."


def failures(runs: dict[str, list[dict]], dirs: dict[str, str] | None = None) -> list[str]:
    """Lines listing the failed evaluations of ``runs`` (label -> failed lines) and how to retry them.

    Each failed line gives the run, the checkpoint, its step, its cell (a suite's) and its
    one-line reason; the last line says how to evaluate them again: rerun the launcher on the
    same ``--out`` with ``--retry-failed`` (a failure whose line says ``retry: "resume"`` is
    evaluated again by a plain rerun too). None failed: no lines.

    Args:
        runs: label -> the failed lines that stand (:func:`simeval.report.runs.read_failures`).
        dirs: label -> the results directory, named in the retry command.
    """
    listed = [(name, r) for name, rows in runs.items() for r in rows]
    if not listed:
        return []
    out = [f"failed ({len(listed)}):"]
    for name, r in listed:
        checkpoint = r.get("checkpoint_name") or os.path.basename(str(r.get("checkpoint") or "")) or "?"
        step = f"step {int(r['step']):,}" if r.get("step") is not None else "step ?"
        cell = _cell(r)
        where = f"  {cell[0]} / {cell[1]}" if cell is not None else ""
        reason = " ".join(str(r.get("error") or "no reason recorded").split())
        out.append(shown(f"  {name}: {checkpoint}  {step}{where}: {reason}"))
    outs = sorted({(dirs or {}).get(name, name) for name, _r in listed})
    command = "; ".join(f"python -m simeval.launch ... --out {shlex.quote(d)} --retry-failed" for d in outs)
    out.append(f"retry: rerun the launcher with the same flags and --retry-failed ({command})")
    return out


def _steps(x: float, _pos: int = 0) -> str:
    """Training steps as 250k, 1M, 1.5M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    return f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def _band(record: dict) -> tuple[float, float, float]:
    """(mean, CI low, CI high) of a record; a missing or null bound is the mean (no band)."""
    m = record["metrics"]
    mean = _value(m, "reward")
    return mean, _value(m, "reward_ci_low", mean), _value(m, "reward_ci_high", mean)


def _curves(name: str, rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """A run's curves: (legend label, its records by step); one per cell for a suite's lines, else one."""
    by_cell: dict[tuple[str, str] | None, list[dict]] = {}
    for r in rows:
        by_cell.setdefault(_cell(r), []).append(r)
    if list(by_cell) == [None]:
        return [(name, sorted(rows, key=lambda r: r["step"]))]
    return [
        (name if cell is None else f"{name}: {cell[0]} / {cell[1]}", sorted(mine, key=lambda r: r["step"]))
        for cell, mine in by_cell.items()
    ]


def plot(runs: dict[str, list[dict]], path: str, references: dict[str, dict] | None = None) -> str:
    """Curves with CI bands for ``runs`` (label -> records); each of ``references`` (label -> record) as a band."""
    with plain_text():  # run names may hold $, a backslash, _ or ^: drawn as written
        return _plot(runs, path, references or {})


def _plot(runs: dict[str, list[dict]], path: str, references: dict[str, dict]) -> str:
    """:func:`plot`'s figure, drawn and saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in runs.items():
        for label, mine in _curves(name, rows):
            if not mine:  # a run without an evaluation: in the legend only
                ax.plot([], [], marker="o", label=label)
                continue
            steps = [r["step"] for r in mine]
            mean, low, high = (list(v) for v in zip(*(_band(r) for r in mine), strict=True))
            (line,) = ax.plot(steps, mean, marker="o", label=label)
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
            if len(steps) == 1:  # a band needs two steps: an error bar instead
                ax.errorbar(steps, mean, yerr=[[mean[0] - low[0]], [high[0] - mean[0]]], color=line.get_color())
    for k, (label, record) in enumerate(references.items(), start=len(runs)):
        mean, low, high = _band(record)
        ax.axhline(mean, linestyle="--", linewidth=1.2, color=f"C{k}", label=label)
        ax.axhspan(low, high, color=f"C{k}", alpha=0.12)
    ax.xaxis.set_major_formatter(_steps)
    ax.set_xlabel("training step")
    ax.set_ylabel("eval return (mean, 95% bootstrap CI)")
    ax.grid(alpha=0.3)
    labelled = len(ax.get_legend_handles_labels()[1])
    if labelled <= MAX_LEGEND:
        ax.legend(fontsize=10 if labelled <= 6 else 7)
    else:  # a legend of hundreds of cells would hide the plot: the table names them
        ax.set_title(f"{labelled} curves (one per run and cell): too many to label, the table names them", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
