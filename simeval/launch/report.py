"""``python -m simeval.launch.report OUT [OUT2 ...]``: the eval curve as a PNG, and a table.

Plots mean eval return against training step with its 95% bootstrap band,
one line per run directory, and prints every evaluation as a table.
``--reference DIR`` draws a run's last evaluation as a horizontal line with
its band across the plot (a baseline: an untrained policy, another method).
Each directory is labelled by the fewest trailing path parts that tell it
from the others (``seed0/out``, ``seed1/out``).

``python -m simeval.launch.report compare RUN_A RUN_B`` compares two runs cell
by cell instead (:mod:`simeval.launch.compare`: a table, ``--json``,
``--html FILE``); a run directory named ``compare`` is given as ``./compare``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence

from simeval.launch import compare
from simeval.records import ResultsFileError, read_records


def read_results(out_dir: str) -> list[dict]:
    """The successful records in ``out_dir``'s results.jsonl, by step: the newest line of each evaluation.

    An evaluation is a checkpoint (``checkpoint_name``) and, for a suite, a cell
    (``task``, ``condition``): when it has several lines (a failure, then an ok
    line from a resume or ``--retry-failed``), the newest (last written) is the
    one that counts. Lines without ``checkpoint_name`` (a served evaluator's) are
    each their own evaluation.

    Raises:
        FileNotFoundError: there is no results.jsonl.
        ResultsFileError: it is a symbolic link or no regular file, or holds a line over 64 MiB or not JSON.
    """
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{out_dir}: no results.jsonl (is it a simeval.launch --out directory?)")
    rows = [r for r in newest_lines(read_records(path)) if r.get("status") == "ok"]
    return sorted(rows, key=lambda r: r["step"])


def newest_lines(records: Iterable[dict]) -> list[dict]:
    """The last line of each (checkpoint name, task, condition), in file order; a line without a name is kept."""
    newest: dict[object, tuple[int, dict]] = {}
    for k, r in enumerate(records):
        key = (r["checkpoint_name"], r.get("task"), r.get("condition")) if "checkpoint_name" in r else k
        newest[key] = (k, r)
    return [r for _, r in sorted(newest.values(), key=lambda item: item[0])]


def labels(dirs: Sequence[str]) -> list[str]:
    """A label per results directory: the fewest trailing path parts that tell it from every other one.

    Directories are compared as absolute paths, so two different directories
    never share a label (``seed0/out``, ``seed1/out``); the same directory
    given twice gets the same label.
    """
    parts = [tuple(os.path.abspath(d).split(os.sep)) for d in dirs]
    distinct = set(parts)
    out = []
    for path in parts:
        k = 1
        while k < len(path) and any(other[-k:] == path[-k:] for other in distinct if other != path):
            k += 1
        out.append(os.sep.join(path[-k:]) or os.sep)
    return out


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
    with compare.plain_text():  # run names may hold $, a backslash, _ or ^: drawn as written
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


def compare_main(argv: Sequence[str]) -> int:
    """``compare RUN_A RUN_B``: print the comparison (or ``--json``), write ``--html``; the exit code (2 on bad input).

    Every error is one line on stderr (exit code 2): a directory without
    results, a missing ``--step-a``/``--step-b``, cells whose episodes differ.
    """
    args = compare.build_parser().parse_args(list(argv))
    label_a, label_b = labels([args.run_a, args.run_b])
    try:
        rows_a, rows_b = read_results(args.run_a), read_results(args.run_b)
        result = compare.compare(
            rows_a, rows_b, args.run_a, args.run_b, label_a, label_b, step_a=args.step_a, step_b=args.step_b
        )
    except (FileNotFoundError, json.JSONDecodeError, ResultsFileError, KeyError, compare.CompareError) as exc:
        message = f"a results line has no {exc}" if isinstance(exc, KeyError) else str(exc)
        print(f"simeval-report compare: error: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(compare.json_rows(result), indent=2, allow_nan=False))
    else:
        compare.print_text(result)
    if args.html:
        try:
            path = compare.write_html(result, args.html)
        except OSError as exc:
            print(f"simeval-report compare: error: --html {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"html: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Print the table and draw the plot for the command line ``argv``; the exit code (2 on bad input).

    ``compare`` as the first argument runs :func:`compare_main` on the rest.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m simeval.launch.report", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="results directories (simeval.launch --out)")
    parser.add_argument("--output", help="PNG path (default: <first run>/eval_curve.png)")
    parser.add_argument(
        "--reference", action="append", default=[], help="a results directory drawn as a baseline (its last result)"
    )
    args = parser.parse_args(argv)
    # One set of labels for runs and references: two different directories never share one.
    named = labels([*args.runs, *args.reference])
    run_names, reference_names = named[: len(args.runs)], named[len(args.runs) :]
    try:
        runs = {label: read_results(d) for label, d in zip(run_names, args.runs, strict=True)}
        references = {}
        for label, d in zip(reference_names, args.reference, strict=True):
            rows = read_results(d)
            if not rows:
                print(f"simeval-report: error: --reference {d} has no successful evaluation.", file=sys.stderr)
                return 2
            references[f"{label} (reference)" if label in runs else label] = rows
    except (FileNotFoundError, json.JSONDecodeError, ResultsFileError) as exc:
        print(f"simeval-report: error: {exc}", file=sys.stderr)
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
