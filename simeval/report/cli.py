"""``python -m simeval.report OUT [OUT2 ...]`` (eval curves and a table) and ``... compare RUN_A RUN_B``.

The first plots mean eval return against training step with its 95% bootstrap band,
one line per run directory, and prints every evaluation as a table (an adaptive run's
looks of a checkpoint are one row: :func:`simeval.report.runs.merge_looks`). ``--reference
DIR`` draws a run's last evaluation as a horizontal line with its band across the plot
(a baseline: an untrained policy, another method). Each directory is labelled by the
fewest trailing path parts that tell it from the others (``seed0/out``, ``seed1/out``).
A suite's run gets task and condition columns and a curve per cell; failed evaluations
are listed below the table (:func:`simeval.report.curves.failures`), and a report of
nothing but failures exits 1.

``compare RUN_A RUN_B`` compares two runs cell by cell instead
(:mod:`simeval.report.comparison`: a table, ``--json``, ``--html FILE``); two ``--search`` runs are compared
region by region (:func:`simeval.report.search.compare_maps`; ``--html FILE``: the page with both maps, their
difference drawn and the regions where they differ). A ``--select-best`` run's
directory gets its selection table instead (:mod:`simeval.report.selection`; ``--html FILE``: the page with
each checkpoint's gap to the leader over looks); a run
directory named ``compare`` is given as ``./compare``. ``python -m simeval.launch.report``
and the ``simeval-report`` script run the same command.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from simeval.command_line import run_command
from simeval.records import ResultsFileError, read_records
from simeval.report.comparison import CompareError, compare, json_rows
from simeval.report.curves import failures, plot, table
from simeval.report.html import write_html
from simeval.report.runs import labels, merge_looks, read_failures, read_results
from simeval.report.search import compare_maps, is_search, replay_search, write_compare_html, write_png
from simeval.report.search import report_text as search_text
from simeval.report.search import write_html as write_search_html
from simeval.report.selection import is_selection, replay_selection, report_text
from simeval.report.selection import write_html as write_selection_html
from simeval.report.text import print_text, shown

PROG = "python -m simeval.report compare"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: message`` on stderr and exit 2."""
        self.exit(2, f"simeval-report compare: error: {message}\n")


def _margin(text: str) -> float:
    """``--margin``'s value: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (the margin in the task's units)") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number >= 0 (the margin in the task's units)")
    return value


def _alpha(text: str) -> float:
    """``--alpha``'s value: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (0.05 is usual)") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} must lie strictly between 0 and 1 (0.05 is usual)")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``python -m simeval.report compare``."""
    parser = _Parser(prog=PROG, description="is B better than A, cell by cell and overall?")
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline: a results directory (simeval.launch --out)")
    parser.add_argument("run_b", metavar="RUN_B", help="the candidate, said better or worse than A")
    parser.add_argument("--step-a", type=int, help="compare A's evaluation at this step (default: each cell's highest)")
    parser.add_argument("--step-b", type=int, help="compare B's evaluation at this step (default: each cell's highest)")
    parser.add_argument(
        "--margin",
        type=_margin,
        metavar="D",
        help="equivalence margin in the task's units: a cell whose B - A interval lies inside (-D, D) is "
        "'equivalent' (default: none; an adaptive run's cells use their look plan's)",
    )
    parser.add_argument(
        "--alpha",
        type=_alpha,
        default=0.05,
        help="family-wise error of the fixed-n cells' verdicts, shared among the cells (Bonferroni; default 0.05)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write a self-contained HTML report to FILE (two --search runs: both maps, their difference drawn "
        "and the regions where they differ)",
    )
    return parser


def compare_main(argv: Sequence[str]) -> int:
    """``compare RUN_A RUN_B``: print the comparison (or ``--json``), write ``--html``; the exit code (2 on bad input).

    Two ``--search`` runs print :func:`compare_maps`'s text and ``--html`` writes their page instead.
    Every error is one line on stderr (exit code 2): a directory without
    results, a missing ``--step-a``/``--step-b``, cells whose episodes differ, a ``--search`` run against
    one of cells, two searches of other ranges, a flag of cells' comparisons given with two searches. With
    ``--json``, what the replay of an adaptive run found is a ``warning:`` line on stderr.
    """
    args = build_parser().parse_args(list(argv))
    label_a, label_b = labels([args.run_a, args.run_b])
    try:
        searched = [is_search(args.run_a), is_search(args.run_b)]
        if all(searched):
            given = {"--json": args.json, "--step-a": args.step_a is not None, "--step-b": args.step_b is not None,
                     "--margin": args.margin is not None, "--alpha": args.alpha != 0.05}  # fmt: skip
            unread = [flag for flag, on in given.items() if on]
            if unread:
                raise ValueError(
                    f"{unread[0]} is for runs of cells: two --search runs compare their maps as recorded (each map's "
                    "own alpha; one search a run); leave it out."
                )
            return _compare_searches(args.run_a, args.run_b, label_a, label_b, args.html)
    except (json.JSONDecodeError, ResultsFileError, ValueError) as exc:
        print(f"simeval-report compare: error: {shown(exc)}", file=sys.stderr)
        return 2
    try:
        rows_a, rows_b = read_results(args.run_a), read_results(args.run_b)
        if any(searched):
            one, other = (args.run_a, args.run_b) if searched[0] else (args.run_b, args.run_a)
            raise ValueError(f"{other} is no --search run but {one} is: compare two --search runs or two of neither.")
        result = compare(
            rows_a,
            rows_b,
            args.run_a,
            args.run_b,
            label_a,
            label_b,
            step_a=args.step_a,
            step_b=args.step_b,
            alpha=args.alpha,
            margin=args.margin,
        )
    except (FileNotFoundError, json.JSONDecodeError, ResultsFileError, KeyError, ValueError, CompareError) as exc:
        message = f"a results line has no {exc}" if isinstance(exc, KeyError) else str(exc)
        print(f"simeval-report compare: error: {shown(message)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(json_rows(result), indent=2, allow_nan=False))
        for warning in result.warnings:  # the JSON stays a list of rows: the replay's warnings go to stderr
            print(f"simeval-report compare: warning: {shown(warning)}", file=sys.stderr)
    else:
        print_text(result)
    if args.html:
        try:
            path = write_html(result, args.html)
        except OSError as exc:
            print(f"simeval-report compare: error: --html {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"html: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _compare_searches(run_a: str, run_b: str, label_a: str, label_b: str, html_path: str | None) -> int:
    """Two ``--search`` runs compared: the text of :func:`compare_maps`, and ``--html`` its page.

    Raises:
        ValueError: a run's lines are no search's, or the two maps are not alike (:func:`compare_maps`).
    """
    a, b = replay_search(run_a), replay_search(run_b)
    print(compare_maps(a, b, label_a, label_b))
    page = functools.partial(write_compare_html, a, b, label_a=label_a, label_b=label_b)
    return _write_page(page, html_path, "simeval-report compare")


def main(argv: list[str] | None = None) -> int:
    """Print the table and draw the plot for the command line ``argv``; the exit code (2 on bad input).

    ``compare`` as the first argument runs :func:`compare_main` on the rest.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m simeval.report", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="results directories (simeval.launch --out)")
    parser.add_argument("--output", help="PNG path (default: <first run>/eval_curve.png)")
    parser.add_argument(
        "--reference", action="append", default=[], help="a results directory drawn as a baseline (its last result)"
    )
    parser.add_argument(
        "--html", metavar="FILE", help="a --select-best run: also write an HTML page (its table, each checkpoint's "
        "gap to the leader over looks) to FILE; a --search run: its map drawn, its table and its evidence"
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        selection = len(args.runs) == 1 and not args.reference and is_selection(args.runs[0])
        searched = len(args.runs) == 1 and not args.reference and is_search(args.runs[0])
    except (json.JSONDecodeError, ResultsFileError, ValueError) as exc:  # a linked file, an endless line
        print(f"simeval-report: error: {shown(exc)}", file=sys.stderr)
        return 2
    if selection:
        return _selection(args.runs[0], args.html)
    if searched:
        return _search(args.runs[0], args.html, args.output)
    if args.html:
        print("simeval-report: error: --html is for a --select-best or --search run (compare RUN_A RUN_B has its "
              "own).",
              file=sys.stderr)  # fmt: skip
        return 2
    # One set of labels for runs and references: two different directories never share one.
    named = labels([*args.runs, *args.reference])
    run_names, reference_names = named[: len(args.runs)], named[len(args.runs) :]
    try:
        runs = {label: merge_looks(read_results(d)) for label, d in zip(run_names, args.runs, strict=True)}
        failed = {label: read_failures(d) for label, d in zip(run_names, args.runs, strict=True)}
        references = {}
        for label, d in zip(reference_names, args.reference, strict=True):
            rows = merge_looks(read_results(d))
            if not rows:
                print(f"simeval-report: error: --reference {d} has no successful evaluation.", file=sys.stderr)
                return 2
            references[f"{label} (reference)" if label in runs else label] = rows
    except (FileNotFoundError, json.JSONDecodeError, ResultsFileError, ValueError) as exc:
        print(f"simeval-report: error: {shown(exc)}", file=sys.stderr)
        return 2
    listed = failures(failed, dict(zip(run_names, args.runs, strict=True)))
    if listed and not any(runs.values()):
        # Nothing but failures: no table, no plot, and an exit code a script sees.
        print("\n".join(listed))
        print(f"simeval-report: error: every evaluation in {', '.join(args.runs)} failed (listed above).")
        return 1
    print(table({**runs, **references}))
    if listed:
        print("\n" + "\n".join(listed))
    last = {label: rows[-1] for label, rows in references.items()}
    path = plot(runs, args.output or os.path.join(args.runs[0], "eval_curve.png"), last)
    print(f"plot: {path}")
    return 0


def _selection(out_dir: str, html_path: str | None) -> int:
    """A ``--select-best`` run's report: its selection table and result; ``--html`` its page."""
    try:
        strategy = replay_selection(out_dir)
    except (json.JSONDecodeError, ResultsFileError, ValueError) as exc:
        print(f"simeval-report: error: {shown(exc)}", file=sys.stderr)
        return 2
    print(report_text(strategy))
    return _write_page(lambda path: write_selection_html(strategy, path), html_path, "simeval-report")


def _write_page(write: Callable[[str], str], html_path: str | None, prog: str) -> int:
    """``write(html_path)`` where ``--html`` is given, printing ``html: PATH``; 2 with one line when it cannot be
    written, else 0."""
    if not html_path:
        return 0
    try:
        print(f"html: {write(html_path)}")
    except OSError as exc:
        print(f"{prog}: error: --html {html_path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _search(out_dir: str, html_path: str | None, png_path: str | None) -> int:
    """A ``--search`` run's report: its map as text, drawn (``--output``, default ``<run>/failure_map.png``), and
    ``--html`` its page with the replayed evidence (``<run>/replays.jsonl``)."""
    try:
        strategy = replay_search(out_dir)
        replays = os.path.join(out_dir, "replays.jsonl")
        evidence = list(read_records(replays)) if os.path.isfile(replays) else []
    except (json.JSONDecodeError, ResultsFileError, ValueError) as exc:
        print(f"simeval-report: error: {shown(exc)}", file=sys.stderr)
        return 2
    print(search_text(strategy))
    try:
        print(f"plot: {write_png(strategy, png_path or os.path.join(out_dir, 'failure_map.png'))}")
        if html_path:
            print(f"html: {write_search_html(strategy, html_path, evidence)}")
    except OSError as exc:
        print(f"simeval-report: error: {exc.filename or html_path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def main_exit() -> None:
    """Console-script entry point (``simeval-report``, ``python -m simeval.report``): :func:`run_command`."""
    run_command(main)
