"""Results written by simeval before the strategy seam (issue 46) stay readable: reported and resumed the same.

``tests/fixtures/results_v1/`` holds a suite run, a ``--watch`` run, an ``--until-decided`` run and an
``--until-precise`` run, each resumed once, written by the code of commit 9dc2cc4, with what the report printed on
them then (``golden/``; its README gives the commands). Today's code must print the same tables and rows from
them, and a resume of each with the same command must evaluate nothing it already holds.

What the future may add without breaking this: a line starting with one of :data:`FUTURE_LINES` in the report's
text (a note), and new keys in ``--json``'s rows (e.g. ``ci_method``); every golden key keeps its value.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pytest
from launch_helpers import cli

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.report.cli import main as report_main

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "results_v1")
GOLDEN = os.path.join(FIXTURES, "golden")
FUTURE_LINES = ("note: ",)
"""Prefixes of report lines a later version may add (none of them today)."""

A = os.path.join(SHIPPED_RUN, "step_000126976.pt")
B = os.path.join(SHIPPED_RUN, "step_001001472.pt")

REPORTS = {
    "report_suite.txt": ["suite", "--output", "OUTPUT.png"],
    "report_watch.txt": ["watch", "--output", "OUTPUT.png"],
    "report_precise.txt": ["precise", "--output", "OUTPUT.png"],
    "report_decided_a.txt": ["decided/a", "--output", "OUTPUT.png"],
    "report_decided_b.txt": ["decided/b", "--output", "OUTPUT.png"],
    "compare_decided.txt": ["compare", "decided/a", "decided/b"],
    "compare_decided.json": ["compare", "decided/a", "decided/b", "--json"],
    "compare_suite.txt": ["compare", "suite", "suite", "--step-a", "126976", "--step-b", "251904"],
    "compare_suite.json": ["compare", "suite", "suite", "--step-a", "126976", "--step-b", "251904", "--json"],
    "compare_watch.txt": ["compare", "watch", "watch", "--step-a", "126976", "--step-b", "251904"],
    "compare_precise.txt": ["compare", "precise_a", "precise"],
    "compare_precise.json": ["compare", "precise_a", "precise", "--json"],
}

RESUMES = {
    "suite": ["--suite", "small.yaml", "--watch", SHIPPED_RUN, "--until-step", "251904", "--poll-interval", "0.2"],
    "watch": ["--watch", SHIPPED_RUN, "--until-step", "251904", "--episodes", "2", "--num-envs", "2",
              "--max-steps", "30", "--poll-interval", "0.2"],
    "decided": ["--suite", "adaptive.yaml", "--checkpoint", B, "--baseline", A, "--until-decided", "--look-every", "8"],
    "precise": ["--suite", "adaptive.yaml", "--checkpoint", B, "--until-precise", "40", "--look-every", "4",
                "--max-episodes", "8"],
}  # fmt: skip
"""The second command of each fixture's run (``--out`` its folder)."""


@pytest.fixture
def copy(tmp_path) -> str:
    """The fixtures copied to a folder of the test's: a resume appends to what it finds."""
    root = str(tmp_path / "results_v1")
    shutil.copytree(FIXTURES, root)
    return root


def _report(argv: list[str], cwd: str) -> str:
    out = io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = report_main(argv)
    finally:
        os.chdir(here)
    assert code == 0, out.getvalue()
    return out.getvalue()


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(FUTURE_LINES)]


def _subset(golden, now, where: str = "") -> None:
    """Every key of ``golden`` has its value in ``now`` (a dict may gain keys; lists keep their length)."""
    if isinstance(golden, dict):
        assert isinstance(now, dict), where
        for key, value in golden.items():
            assert key in now, f"{where}.{key} is gone"
            _subset(value, now[key], f"{where}.{key}")
    elif isinstance(golden, list):
        assert isinstance(now, list) and len(now) == len(golden), where
        for i, (g, n) in enumerate(zip(golden, now, strict=True)):
            _subset(g, n, f"{where}[{i}]")
    else:
        assert now == golden, f"{where}: {now!r}, was {golden!r}"


@pytest.mark.parametrize("golden", sorted(REPORTS))
def test_the_report_prints_what_it_printed_on_results_written_before_the_seam(golden, copy):
    now = _report(REPORTS[golden], copy)
    with open(os.path.join(GOLDEN, golden)) as f:
        then = f.read()
    if golden.endswith(".json"):  # the rows, then the warnings (stderr) as text
        (rows_then, end_then), (rows_now, end_now) = (json.JSONDecoder().raw_decode(t) for t in (then, now))
        _subset(rows_then, rows_now)
        then, now = then[end_then:], now[end_now:]
    assert _lines(now) == _lines(then)


def _results(root: str) -> dict[str, bytes]:
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name in ("results.jsonl", "attempts.jsonl"):
                with open(os.path.join(folder, name), "rb") as f:
                    found[os.path.relpath(os.path.join(folder, name), root)] = f.read()
    return found


@pytest.mark.parametrize("run", sorted(RESUMES))
def test_a_resume_of_results_written_before_the_seam_evaluates_nothing_they_hold(run, copy):
    before = _results(os.path.join(copy, run))
    proc = cli(*RESUMES[run], "--out", run, cwd=copy, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming:" in proc.stdout, proc.stdout
    assert "evaluating " not in proc.stdout, proc.stdout
    assert _results(os.path.join(copy, run)) == before  # not one line added, not one evaluation started
