"""``python -m simeval.launch.report OUT [OUT2 ...]``: the eval curve as a PNG, and a table.

Plots mean eval return against training step with its 95% bootstrap band,
one line per run directory, and prints every evaluation as a table.
``--reference DIR`` draws a run's last evaluation as a horizontal line with
its band across the plot (a baseline: an untrained policy, another method).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from simeval.records import read_records


def read_results(out_dir: str) -> list[dict]:
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{out_dir}: no results.jsonl (is it a simeval.launch --out directory?)")
    rows = [r for r in read_records(path) if r.get("status") == "ok"]
    return sorted(rows, key=lambda r: r["step"])


def table(runs: dict[str, list[dict]]) -> str:
    head = f"{'run':<28}{'step':>12}{'return':>12}{'ci low':>12}{'ci high':>12}{'episodes':>10}"
    lines = [head, "-" * len(head)]
    for name, rows in runs.items():
        for r in rows:
            m = r["metrics"]
            lines.append(
                f"{name[-28:]:<28}{r['step']:>12,}{m['reward']:>12.1f}{m.get('reward_ci_low') or float('nan'):>12.1f}"
                f"{m.get('reward_ci_high') or float('nan'):>12.1f}{m.get('num_episodes', 0):>10}"
            )
    return "\n".join(lines)


def _steps(x: float, _pos: int = 0) -> str:
    """Training steps as 250k, 1M, 1.5M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    return f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def _band(record: dict) -> tuple[float, float, float]:
    m = record["metrics"]
    mean = m["reward"]
    return mean, m.get("reward_ci_low", mean), m.get("reward_ci_high", mean)


def plot(runs: dict[str, list[dict]], path: str, references: dict[str, dict] | None = None) -> str:
    """Curves with CI bands for ``runs``; each of ``references`` (label -> record) as a horizontal band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in runs.items():
        steps = [r["step"] for r in rows]
        mean, low, high = zip(*(_band(r) for r in rows), strict=True) if rows else ((), (), ())
        (line,) = ax.plot(steps, mean, marker="o", label=os.path.basename(os.path.normpath(name)))
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    for k, (label, record) in enumerate((references or {}).items(), start=len(runs)):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simeval.launch.report", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="results directories (simeval.launch --out)")
    parser.add_argument("--output", help="PNG path (default: <first run>/eval_curve.png)")
    parser.add_argument(
        "--reference", action="append", default=[], help="a results directory drawn as a baseline (its last result)"
    )
    args = parser.parse_args(argv)
    try:
        runs = {d: read_results(d) for d in args.runs}
        references = {os.path.basename(os.path.normpath(d)): read_results(d) for d in args.reference}
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        print(f"simeval-report: error: {exc}", file=sys.stderr)
        return 2
    empty = [d for d, rows in references.items() if not rows]
    if empty:
        print(f"simeval-report: error: --reference {empty[0]} has no successful evaluation.", file=sys.stderr)
        return 2
    print(table({**runs, **references}))
    last = {label: rows[-1] for label, rows in references.items()}
    path = plot(runs, args.output or os.path.join(args.runs[0], "eval_curve.png"), last)
    print(f"plot: {path}")
    return 0


def main_exit() -> None:
    """Console-script entry point (``simeval-report``)."""
    sys.exit(main())


if __name__ == "__main__":
    main_exit()
