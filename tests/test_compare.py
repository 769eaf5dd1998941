"""``python -m simeval.launch.report compare A B``: synthetic runs whose answer is known, read as users run it.

Run A and run B are results directories written line by line with
``append_record``; on the three cells they share, B is A + 100 on every
episode (better, a difference of exactly 100), B is A (inconclusive, 0) and
B is A - 50 with a little noise (worse). Each run has one more cell the other
lacks. Run A also has an earlier checkpoint (step 100,000) scoring 100 less.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

from simeval import stats
from simeval.launch import compare, report
from simeval.metrics import bootstrap_ci
from simeval.records import append_record

SEEDS = list(range(5000, 5016))  # the episode seeds of every cell, the same in both runs
REFERENCES = {"HalfCheetah-v5": (-280.0, 6000.0), "Hopper-v5": (-20.0, 3500.0), "Walker2d-v5": (0.0, 4000.0)}
CELLS = [("HalfCheetah-v5", "nominal"), ("HalfCheetah-v5", "obs-noise"), ("Hopper-v5", "nominal")]
EXPECTED = {CELLS[0]: "better", CELLS[1]: "inconclusive", CELLS[2]: "worse"}
TIMEOUT = 120


def _returns() -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(A, B) per-episode returns of each cell both runs have."""
    rng = np.random.default_rng(0)
    a1, a2, a3 = rng.normal(800, 60, 16), rng.normal(600, 80, 16), rng.normal(2000, 100, 16)
    return {CELLS[0]: (a1, a1 + 100.0), CELLS[1]: (a2, a2.copy()), CELLS[2]: (a3, a3 - 50.0 + rng.normal(0, 5, 16))}


def _line(task: str, condition: str | None, step: int, returns, seeds=SEEDS, reference: bool = True) -> dict:
    """A results.jsonl line as the suite runner writes it (``condition=None``: a plain evaluation)."""
    returns = [float(x) for x in returns]
    low, high = bootstrap_ci(returns)
    record = {
        "status": "ok",
        "step": step,
        "metrics": {
            "reward": float(np.mean(returns)),
            "reward_ci_low": low,
            "reward_ci_high": high,
            "num_episodes": len(returns),
            "episode_length": 1000.0,
        },
        "episode_returns": returns,
        "episode_lengths": [1000] * len(returns),
        "checkpoint": f"/abs/path/ck_{step}.pt",
        "checkpoint_name": f"ck_{step}.pt",
        "env": task,
        "seed": 0,
        "num_envs": 8,
        "max_steps": 1000,
        "host": "test",
        "time": "2025-01-01T00:00:00+0000",
        "wall_time": 1.0,
        "backend": "thread",
    }
    if seeds is not None:
        record["episode_seeds"] = list(seeds)
    if condition is not None:
        record.update(suite="synthetic", task=task, condition=condition, condition_settings={})
        if reference:
            record["reference"] = dict(zip(("low", "high"), REFERENCES[task], strict=True))
    return record


def _write(out_dir, records) -> str:
    path = os.path.join(out_dir, "results.jsonl")
    for record in records:
        append_record(path, record)
    return str(out_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[str, str]:
    """Run A (steps 200,000 then 100,000, written in that order) and run B (step 200,000)."""
    root = tmp_path_factory.mktemp("runs")
    data = _returns()
    rng = np.random.default_rng(1)
    only_a = rng.normal(1500, 100, 16)
    a = [_line(t, c, 200_000, data[(t, c)][0]) for t, c in CELLS]
    a.append(_line("Hopper-v5", "heavy", 200_000, only_a))
    a += [_line(t, c, 100_000, data[(t, c)][0] - 100.0) for t, c in CELLS]
    a.append({"status": "failed", "checkpoint": "/abs/path/ck_300000.pt", "step": 300_000, "error": "corrupt"})
    b = [_line(t, c, 200_000, data[(t, c)][1]) for t, c in CELLS]
    b.append(_line("Walker2d-v5", "nominal", 200_000, rng.normal(3000, 100, 16)))
    return _write(root / "a" / "out", a), _write(root / "b" / "out", b)


def _normalised() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A's and B's normalised scores per cell, keyed as the aggregate keys them."""
    data = _returns()
    norm = {f"{t} / {c}": [stats.normalized(x, *REFERENCES[t]) for x in data[(t, c)]] for t, c in CELLS}
    return {k: v[0] for k, v in norm.items()}, {k: v[1] for k, v in norm.items()}


def _aggregate_verdict() -> str:
    """The aggregate's verdict: where the paired stratified CI of the IQM difference lies."""
    diff = stats.aggregate_difference(*_normalised(), statistic="iqm")
    return "better" if diff.low > 0 else "worse" if diff.high < 0 else "inconclusive"


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m simeval.launch.report ARGS`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "simeval.launch.report", *args], capture_output=True, text=True, timeout=TIMEOUT
    )


def _table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """The text table's rows by (task, condition): columns are split on runs of two or more spaces."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    rows = {}
    for line in lines[start:]:
        if not line:
            break
        if line.startswith("---"):
            continue
        cells = re.split(r"\s{2,}", line.strip())
        rows[(cells[0], cells[1])] = cells[2:]
    return rows


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_the_table_gives_each_shared_cell_its_verdict_and_lists_the_others(runs):
    a, b = runs
    proc = _cli("compare", a, b)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    rows = _table(out)
    assert set(rows) == {*CELLS, ("*", "*")}
    for cell, verdict in EXPECTED.items():
        assert rows[cell][-1] == verdict
    assert rows[CELLS[0]][2] == "100.0 [100.0, 100.0]"  # B - A: 100 on every episode
    assert rows[CELLS[1]][2] == "0.0 [0.0, 0.0]"
    assert rows[CELLS[0]][3] == "1.00" and rows[CELLS[1]][3] == "0.50" and rows[CELLS[2]][3] == "0.00"
    assert rows[("*", "*")][-1] == _aggregate_verdict()
    assert "A: a/out  step 200,000 (ck_200000.pt)" in out and "B: b/out  step 200,000 (ck_200000.pt)" in out
    assert "verdicts: Holm-corrected over 3 cells, alpha 0.05" in out
    assert "IQM over normalised scores" in out
    assert "only in A: Hopper-v5 / heavy" in out and "only in B: Walker2d-v5 / nominal" in out


def test_json_has_the_agreed_keys_and_the_numbers_of_simeval_stats(runs):
    a, b = runs
    proc = _cli("compare", a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    keys = ["task", "condition", "mean_a", "mean_b", "diff", "diff_ci_low", "diff_ci_high", "p_improvement", "verdict"]
    assert all(list(row) == keys for row in rows)
    assert [(r["task"], r["condition"]) for r in rows] == [*CELLS, ("*", "*")]
    data = _returns()
    for row, cell in zip(rows, CELLS, strict=False):
        p = stats.paired(*data[cell])
        assert (row["mean_a"], row["mean_b"]) == (p.mean_a, p.mean_b)
        assert (row["diff"], row["diff_ci_low"], row["diff_ci_high"]) == (p.diff.value, p.diff.low, p.diff.high)
        assert row["p_improvement"] == p.p_improvement.value
        assert row["verdict"] == EXPECTED[cell]
    assert rows[0]["diff_ci_low"] == rows[0]["diff_ci_high"] == 100.0
    scores_a, scores_b = _normalised()
    diff = stats.aggregate_difference(scores_a, scores_b, statistic="iqm")
    agg = rows[-1]
    assert agg["mean_a"] == stats.aggregate(scores_a)["iqm"].value
    assert agg["mean_b"] == stats.aggregate(scores_b)["iqm"].value
    assert (agg["diff"], agg["diff_ci_low"], agg["diff_ci_high"]) == (diff.value, diff.low, diff.high)
    assert agg["diff"] == pytest.approx(agg["mean_b"] - agg["mean_a"])
    assert agg["p_improvement"] == stats.probability_of_improvement(scores_a, scores_b)
    assert agg["verdict"] == _aggregate_verdict()


def test_step_a_picks_an_earlier_checkpoint_and_a_missing_step_is_one_line(runs):
    a, b = runs
    proc = _cli("compare", a, b, "--step-a", "100000", "--json")
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)[0]
    assert (first["diff"], first["diff_ci_low"], first["diff_ci_high"]) == (200.0, 200.0, 200.0)
    error = _one_line_error(_cli("compare", a, b, "--step-b", "100000"))
    assert "--step-b 100000" in error and b in error and "200,000" in error


def test_different_episodes_are_refused_in_one_line(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(100, 10, 16)
    a = _write(tmp_path / "a", [_line("Hopper-v5", "nominal", 1000, x)])
    b = _write(tmp_path / "b", [_line("Hopper-v5", "nominal", 1000, x, seeds=[s + 1 for s in SEEDS])])
    error = _one_line_error(_cli("compare", a, b))
    assert "Hopper-v5 / nominal" in error and a in error and b in error
    assert "not the same episodes: evaluate both with the same suite file" in error


def test_plain_runs_pair_as_the_nominal_cell_of_their_env_and_need_seeds(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.normal(100, 10, 16)
    a = _write(tmp_path / "a", [_line("Pendulum-v1", None, 1000, x)])
    b = _write(tmp_path / "b", [_line("Pendulum-v1", None, 1000, x + 1.0)])
    proc = _cli("compare", a, b)
    assert proc.returncode == 0, proc.stderr
    rows = _table(proc.stdout)
    assert rows[("Pendulum-v1", "nominal")][2] == "1.0 [1.0, 1.0]"
    assert rows[("Pendulum-v1", "nominal")][-1] == "better"
    assert "IQM over raw returns (not every task has a reference)" in proc.stdout
    unseeded = _write(tmp_path / "c", [_line("Pendulum-v1", None, 1000, x, seeds=None)])
    error = _one_line_error(_cli("compare", a, unseeded))
    assert "evaluate both runs with a seed" in error and unseeded in error


def test_bad_input_is_one_line(tmp_path, runs):
    a, _b = runs
    assert "no results.jsonl" in _one_line_error(_cli("compare", a, str(tmp_path / "nowhere")))
    other = _write(tmp_path / "other", [_line("Ant-v5", "nominal", 1000, np.arange(16.0), reference=False)])
    assert "no (task, condition) cell in common" in _one_line_error(_cli("compare", a, other))
    assert "RUN_B" in _one_line_error(_cli("compare", a))  # argparse's error, in one line too


def test_rich_output_and_curve_mode_in_process(runs, tmp_path, capsys):
    a, b = runs
    result = compare.compare(report.read_results(a), report.read_results(b), a, b, *report.labels([a, b]))
    buf = io.StringIO()
    compare.print_text(result, file=buf, use_rich=True)
    text = buf.getvalue()
    assert all(v in text for v in ("better", "worse", "inconclusive", "100.0 [100.0, 100.0]", "Holm-corrected"))
    # The curve mode is unchanged: the first argument is a run, not "compare".
    assert report.main([a, b, "--output", str(tmp_path / "curve.png")]) == 0
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    assert "200,000" in capsys.readouterr().out


class _Page(HTMLParser):
    """The rendered DOM's table rows (text of each cell, verdict classes) and the probe's output."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.classes: list[str] = []
        self.probe = ""
        self._where: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "tr":
            self.rows.append([])
        elif tag == "td":
            self._where = "td"
            self.rows[-1].append("")
            if "verdict" in (attrs.get("class") or ""):
                self.classes.append(attrs["class"])
        elif tag == "pre" and attrs.get("id") == "probe":
            self._where = "probe"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "pre"):
            self._where = None

    def handle_data(self, data: str) -> None:
        if self._where == "td":
            self.rows[-1][-1] += data
        elif self._where == "probe":
            self.probe += data


_PROBE = """<script>
window.addEventListener("load", () => {
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify([...document.images].map(i => [i.id, i.complete, i.naturalWidth]));
  document.body.appendChild(out);
});
</script>"""


def _chromium_dom(page: str, profile: str) -> str:
    """The DOM of ``page`` once Chromium (headless) has loaded it; killed (its process group) after 30 s."""
    cmd = [
        shutil.which("chromium") or "/usr/bin/chromium",
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=5000",
        "--dump-dom",
        "file://" + page,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the browser started here, and only it
        proc.communicate()
        pytest.fail("chromium did not render the page in 30 s")
    return out


@pytest.fixture(scope="module")
def chromium() -> None:
    """Debian's Chromium, installed (as root, as CI runs) where it is missing; a skip elsewhere."""
    from root_services import apt_install

    try:
        apt_install(("chromium",), ("chromium",))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no chromium and it cannot be installed here: {exc}")


def test_html_page_renders_in_a_browser_with_its_tables_and_plots(runs, tmp_path, chromium):
    a, b = runs
    page = tmp_path / "report" / "compare.html"
    proc = _cli("compare", a, b, "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert _table(proc.stdout)[CELLS[0]][-1] == "better"  # --html still prints the table
    assert f"html: {page}" in proc.stdout
    text = page.read_text()
    assert not re.search(r"https?://", text, re.IGNORECASE)  # no URL: nothing to fetch
    markup = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text)
    assert not re.search(r"//|url\(|@import|<link|<script", markup, re.IGNORECASE)
    assert [n for n in os.listdir(page.parent)] == ["compare.html"]  # no temporary file left behind
    srcs = re.findall(r'src="([^"]*)"', text)
    assert len(srcs) == 3 and all(s.startswith("data:image/png;base64,") for s in srcs)  # curves, cells, profile

    # The page forbids every fetch (its CSP); a copy with a probe script reports what the browser decoded.
    probed = tmp_path / "probed.html"
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
    assert csp in text
    probed.write_text(text.replace(csp, csp + "; script-src 'unsafe-inline'").replace("</body>", _PROBE + "</body>"))
    dom = _Page()
    dom.feed(_chromium_dom(str(probed), str(tmp_path / "profile")))
    images = json.loads(dom.probe)
    assert [i[0] for i in images] == ["curves", "sensitivity", "profile"]
    assert all(complete and width > 0 for _id, complete, width in images), images
    cells = {(r[0], r[1]): r[2:] for r in dom.rows if len(r) == 7}
    for cell, verdict in EXPECTED.items():
        assert cells[cell][-1] == verdict
    assert cells[CELLS[0]][2] == "100.0 [100.0, 100.0]"
    assert cells[("*", "*")][-1] == _aggregate_verdict()
    assert sorted(dom.classes) == sorted(f"verdict {v}" for v in [*EXPECTED.values(), _aggregate_verdict()])


def test_names_that_look_like_math_are_drawn_as_written(tmp_path):
    """Task, condition, checkpoint and run names holding $, a backslash, _ and ^ never reach mathtext."""
    task, condition = "Cheetah_$\\alpha^2$", "$\\nope$_x^{"
    x = np.random.default_rng(4).normal(100, 10, 16)
    runs = []
    for name, returns in (("run_$\\a^$", x), ("run_$_b$", x + 1.0)):
        line = _line(task, condition, 1000, returns, reference=False)
        line["checkpoint_name"] = "ck_$\\x^_$.pt"
        runs.append(_write(tmp_path / name / "out", [line]))
    page = tmp_path / "compare.html"
    proc = _cli("compare", *runs, "--html", str(page))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _table(proc.stdout)[(task, condition)][-1] == "better"
    text = page.read_text()
    assert html.escape(task) in text and html.escape("ck_$\\x^_$.pt") in text
    assert report.main([*runs, "--output", str(tmp_path / "curve.png")]) == 0  # the curve's legend: run names
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_the_newest_line_of_an_evaluation_is_the_one_that_counts(tmp_path):
    """A failed line then an ok one (a resume, --retry-failed), or two ok lines: the last written counts."""
    x = np.random.default_rng(5).normal(100, 10, 16)
    task, condition = CELLS[0]
    failed = {"status": "failed", "checkpoint": "/abs/path/ck_1000.pt", "checkpoint_name": "ck_1000.pt",
              "step": 1000, "error": "worker died", "error_kind": "worker", "retry": "resume",
              "suite": "synthetic", "task": task, "condition": condition}  # fmt: skip
    served = {k: v for k, v in _line(task, None, 500, x).items() if not k.startswith("checkpoint")}
    lines = [failed, _line(task, condition, 1000, x), served, served, _line(task, condition, 1000, x + 7.0)]
    a = _write(tmp_path / "a", lines)
    rows = report.read_results(a)
    assert [r["step"] for r in rows] == [500, 500, 1000]  # a served evaluator's lines are each their own
    assert rows[-1]["episode_returns"] == pytest.approx(list(x + 7.0))
    b = _write(tmp_path / "b", [_line(task, condition, 1000, x + 7.0)])
    proc = _cli("compare", a, b)
    assert proc.returncode == 0, proc.stderr
    assert _table(proc.stdout)[(task, condition)][2] == "0.0 [0.0, 0.0]"  # A's newest line, the same as B
