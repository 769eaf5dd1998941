"""``python -m simeval.report OUT [OUT2 ...]``: the eval curve as a PNG, and a table.

Plots mean eval return against training step with its 95% bootstrap band,
one line per run directory, and prints every evaluation as a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def read_results(out_dir: str) -> list[dict]:
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{out_dir}: no results.jsonl (is it a simeval.launch --out directory?)")
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                record = json.loads(line)
                if record.get("status") == "ok":
                    rows.append(record)
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


def plot(runs: dict[str, list[dict]], path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in runs.items():
        steps = [r["step"] for r in rows]
        mean = [r["metrics"]["reward"] for r in rows]
        low = [r["metrics"].get("reward_ci_low", m) for r, m in zip(rows, mean, strict=True)]
        high = [r["metrics"].get("reward_ci_high", m) for r, m in zip(rows, mean, strict=True)]
        (line,) = ax.plot(steps, mean, marker="o", label=os.path.basename(os.path.normpath(name)))
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("eval return (mean, 95% bootstrap CI)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simeval.report", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="results directories (simeval.launch --out)")
    parser.add_argument("--output", help="PNG path (default: <first run>/eval_curve.png)")
    args = parser.parse_args(argv)
    try:
        runs = {d: read_results(d) for d in args.runs}
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        print(f"simeval.report: error: {exc}", file=sys.stderr)
        return 2
    print(table(runs))
    path = plot(runs, args.output or os.path.join(args.runs[0], "eval_curve.png"))
    print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
