"""Eval curves: mean return against training step with its 95% band, one line per run, and the table."""

from __future__ import annotations

import math

from simeval.report.html import plain_text


def _value(metrics: dict, key: str, default: float = math.nan) -> float:
    """``metrics[key]`` as a float; ``default`` when it is missing or null (a NaN when written)."""
    value = metrics.get(key)
    return default if value is None else float(value)


def table(runs: dict[str, list[dict]]) -> str:
    """Every evaluation of ``runs`` (label -> ok records), one row each; a missing value shows as nan."""
    head = f"{'run':<28}{'step':>12}{'return':>12}{'ci low':>12}{'ci high':>12}{'episodes':>10}"
    lines = [head, "-" * len(head)]
    for name, rows in runs.items():
        for r in rows:
            m = r["metrics"]
            lines.append(
                f"{name[-28:]:<28}{r['step']:>12,}{_value(m, 'reward'):>12.1f}{_value(m, 'reward_ci_low'):>12.1f}"
                f"{_value(m, 'reward_ci_high'):>12.1f}{m.get('num_episodes', 0):>10}"
            )
    return "\n".join(lines)


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
        steps = [r["step"] for r in rows]
        mean, low, high = zip(*(_band(r) for r in rows), strict=True) if rows else ((), (), ())
        (line,) = ax.plot(steps, mean, marker="o", label=name)
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    for k, (label, record) in enumerate(references.items(), start=len(runs)):
        mean, low, high = _band(record)
        ax.axhline(mean, linestyle="--", linewidth=1.2, color=f"C{k}", label=label)
        ax.axhspan(low, high, color=f"C{k}", alpha=0.12)
    ax.xaxis.set_major_formatter(_steps)
    ax.set_xlabel("training step")
    ax.set_ylabel("eval return (mean, 95% bootstrap CI)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
