"""The benchmarks run: a tiny slice of benchmarks/bench_overhead.py exits 0 and prints a row for each engine.

No timing is asserted: only that the run ends well and that every row of the table is there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_overhead.py")

pytestmark = pytest.mark.timeout(180)


def _run(*flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, SCRIPT, *flags], capture_output=True, text=True, env=env, timeout=170)


def test_bench_overhead_prints_a_row_for_each_engine(tmp_path):
    out = tmp_path / "rows.json"
    proc = _run("--quick", "--sizes", "32", "--steps", "50", "--repeats", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("tensor ")]
    labels = ["bare loop", "Evaluator, thread", "Evaluator, process", "torchrl Collector"]
    assert len(rows) == len(labels), proc.stdout
    for row, label in zip(rows, labels, strict=True):
        assert label in row, row
    engines = {r["row"]: r["engine"] for r in json.loads(out.read_text())["rows"]}
    assert "?" not in (engines["thread"], engines["process"]), engines  # each backend's round engine was seen
