"""``python -m simeval.launch.report compare A B``: synthetic runs whose answer is known, read as users run it.

Run A and run B are results directories written line by line with
``append_record``; on the three cells they share, B is A + 100 on every
episode (better, a difference of exactly 100), B is A (inconclusive, 0) and
B is A - 50 with a little noise (worse). Each run has one more cell the other
lacks. Run A also has an earlier checkpoint (step 100,000) scoring 100 less.

Every expected number comes from an oracle (``_oracle``) that reads the two
results.jsonl files itself and shares no code with ``simeval.stats``: the
sign-flip p-value by enumerating every sign pattern, Holm's correction by
statsmodels, the bootstrap intervals by its own resampling (checked within
Monte Carlo error), the IQM by sorting and trimming. A second pair of runs
(``family``) has a cell significant alone that Holm's correction makes
inconclusive, and one that Holm keeps but Bonferroni would not.
"""

from __future__ import annotations

import html
import io
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

from simeval.metrics import bootstrap_ci
from simeval.records import append_record
from simeval.report import cli as report_cli
from simeval.report import comparison as compare
from simeval.report import runs as run_dirs
from simeval.report import text as text_out

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


# -- the oracle: the expected comparison from the raw results.jsonl lines, sharing no code with simeval.stats ----------

ALPHA = 0.05
ORACLE_RESAMPLES = 20_000  # the oracle's own bootstraps: ten times simeval's 2000, another generator


def _raw_lines(run_dir: str) -> dict[tuple[str, str], dict]:
    """Per cell, the line compared: read with json, ok lines only, the highest step (the last written of it)."""
    picked: dict[tuple[str, str], dict] = {}
    with open(os.path.join(run_dir, "results.jsonl")) as f:
        for text in f:
            line = json.loads(text)
            if line.get("status") != "ok":
                continue
            cell = (line.get("task") or line["env"], line.get("condition") or "nominal")
            if cell not in picked or line["step"] >= picked[cell]["step"]:
                picked[cell] = line
    return picked


def _sign_flip_p(d: np.ndarray) -> float:
    """Exact two-sided p-value of mean(d) == 0: the share of all 2**n sign patterns whose |mean| reaches |mean(d)|."""
    if not np.any(d):
        return 1.0
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    means = np.abs(signs @ d) / d.size
    return float(np.mean(means >= abs(d.mean()) * (1 - 1e-9)))


def _iqm(x: np.ndarray) -> float:
    """The interquartile mean by hand: sort, drop floor(n/4) from each end, average the rest."""
    x = np.sort(np.asarray(x, dtype=np.float64).ravel())
    cut = x.size // 4
    return float(x[cut : x.size - cut].mean())


def _iqm_rows(rows: np.ndarray) -> np.ndarray:
    """_iqm of each row of a matrix."""
    rows = np.sort(rows, axis=1)
    cut = rows.shape[1] // 4
    return rows[:, cut : rows.shape[1] - cut].mean(axis=1)


def _percentiles(boot: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(boot, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return float(low), float(high)


def _wins(b: np.ndarray, a: np.ndarray) -> float:
    """P(B > A) over every (episode of B, episode of A) pair, ties half: a double loop, no rank statistic."""
    total = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in b for y in a)
    return total / (len(a) * len(b))


def _oracle(dir_a: str, dir_b: str) -> dict:
    """What ``compare dir_a dir_b`` must say: per cell and ``("*", "*")``, numbers, intervals, p-values, verdicts."""
    from statsmodels.stats.multitest import multipletests

    lines_a, lines_b = _raw_lines(dir_a), _raw_lines(dir_b)
    cells = [c for c in lines_a if c in lines_b]
    rng = np.random.default_rng(20240531)
    out, pairs = {}, {}
    for cell in cells:
        la, lb = lines_a[cell], lines_b[cell]
        by_seed = dict(zip(lb["episode_seeds"], lb["episode_returns"], strict=True))
        a = np.array(la["episode_returns"], dtype=np.float64)
        b = np.array([by_seed[s] for s in la["episode_seeds"]], dtype=np.float64)
        pairs[cell] = (a, b)
        d = b - a
        idx = rng.integers(0, d.size, size=(ORACLE_RESAMPLES, d.size))
        out[cell] = {
            "mean_a": float(np.mean(a)),
            "mean_b": float(np.mean(b)),
            "diff": float(np.mean(d)),
            "constant": bool(np.all(d == d[0])),
            "diff_ci": _percentiles(d[idx].mean(axis=1)),
            "p_improvement": float(np.mean((d > 0) + 0.5 * (d == 0))),
            "p_value": _sign_flip_p(d),
        }
    raw = [out[c]["p_value"] for c in cells]
    reject, adjusted, _, _ = multipletests(raw, alpha=ALPHA, method="holm")
    for cell, rejected, p in zip(cells, reject, adjusted, strict=True):
        diff = out[cell]["diff"]
        out[cell]["holm"] = float(p)
        out[cell]["verdict"] = ("better" if diff > 0 else "worse") if rejected else "inconclusive"

    # The aggregate: normalised by each task's reference when every line has one, IQM of all cells pooled.
    normalised = all("reference" in lines[c] for lines in (lines_a, lines_b) for c in cells)
    scores = {}
    for cell, (a, b) in pairs.items():
        if normalised:
            low, high = lines_a[cell]["reference"]["low"], lines_a[cell]["reference"]["high"]
            a, b = (a - low) / (high - low), (b - low) / (high - low)
        scores[cell] = (a, b)
    pooled_a = np.concatenate([a for a, _ in scores.values()])
    pooled_b = np.concatenate([b for _, b in scores.values()])
    boot_a, boot_b = [], []  # stratified and paired: within each cell, one set of episode indices for A and B
    for a, b in scores.values():
        idx = rng.integers(0, a.size, size=(ORACLE_RESAMPLES, a.size))
        boot_a.append(a[idx])
        boot_b.append(b[idx])
    boot = _iqm_rows(np.concatenate(boot_b, axis=1)) - _iqm_rows(np.concatenate(boot_a, axis=1))
    low, high = _percentiles(boot)
    out[("*", "*")] = {
        "normalised": normalised,
        "mean_a": _iqm(pooled_a),
        "mean_b": _iqm(pooled_b),
        "diff": _iqm(pooled_b) - _iqm(pooled_a),
        "diff_ci": (low, high),
        "p_improvement": float(np.mean([_wins(b, a) for a, b in scores.values()])),
        "verdict": "better" if low > 0 else "worse" if high < 0 else "inconclusive",
    }
    return out


def _near(ours: tuple[float, float], theirs: tuple[float, float]) -> bool:
    """Two percentile intervals from independent bootstraps (2000 and 20,000 resamples) agree within MC error."""
    tolerance = 0.15 * (theirs[1] - theirs[0]) + 1e-9
    return abs(ours[0] - theirs[0]) <= tolerance and abs(ours[1] - theirs[1]) <= tolerance


def _check_row(row: dict, expected: dict) -> None:
    """A ``--json`` row against the oracle."""
    assert row["mean_a"] == pytest.approx(expected["mean_a"], rel=1e-12, abs=1e-12)
    assert row["mean_b"] == pytest.approx(expected["mean_b"], rel=1e-12, abs=1e-12)
    assert row["diff"] == pytest.approx(expected["diff"], rel=1e-9, abs=1e-9)
    interval = (row["diff_ci_low"], row["diff_ci_high"])
    if expected.get("constant"):  # the same difference on every episode: nothing to resample
        assert interval == pytest.approx((expected["diff"],) * 2, rel=1e-9, abs=1e-9)
    else:
        assert _near(interval, expected["diff_ci"]), (interval, expected["diff_ci"])
    assert row["p_improvement"] == pytest.approx(expected["p_improvement"], abs=1e-12)
    assert row["verdict"] == expected["verdict"]


@pytest.fixture(scope="module")
def oracle(runs) -> dict:
    return _oracle(*runs)


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


def test_the_table_gives_each_shared_cell_its_verdict_and_lists_the_others(runs, oracle):
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
    assert rows[("*", "*")][-1] == oracle[("*", "*")]["verdict"]
    assert "A: a/out  step 200,000 (ck_200000.pt)" in out and "B: b/out  step 200,000 (ck_200000.pt)" in out
    assert "verdicts: Holm-corrected over 3 cells, alpha 0.05" in out
    assert "IQM over normalised scores" in out
    assert "only in A: Hopper-v5 / heavy" in out and "only in B: Walker2d-v5 / nominal" in out


def test_json_has_the_agreed_keys_and_the_numbers_of_an_independent_oracle(runs, oracle):
    a, b = runs
    proc = _cli("compare", a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    keys = ["task", "condition", "mean_a", "mean_b", "diff", "diff_ci_low", "diff_ci_high", "p_improvement", "verdict"]
    assert all(list(row) == keys for row in rows)
    assert [(r["task"], r["condition"]) for r in rows] == [*CELLS, ("*", "*")]
    for row in rows:
        _check_row(row, oracle[(row["task"], row["condition"])])
    assert [row["verdict"] for row in rows[:-1]] == [EXPECTED[cell] for cell in CELLS]  # the answer built in
    assert rows[0]["diff_ci_low"] == rows[0]["diff_ci_high"] == 100.0
    agg = rows[-1]
    assert oracle[("*", "*")]["normalised"]  # every line has its task's reference
    assert agg["diff"] == pytest.approx(agg["mean_b"] - agg["mean_a"])
    assert agg["diff_ci_low"] < agg["diff"] < agg["diff_ci_high"]


def test_each_cells_p_value_and_holm_verdict_are_the_oracles(runs, oracle):
    a, b = runs
    result = compare.compare(run_dirs.read_results(a), run_dirs.read_results(b), a, b)
    assert [(c.task, c.condition) for c in result.cells] == CELLS
    for cell in result.cells:
        expected = oracle[(cell.task, cell.condition)]
        # 16 episodes: 2**16 sign patterns, more than simeval's 2000 permutations, so its p-value is a Monte
        # Carlo estimate (scipy's, (hits + 1) / 2001 a side) of the oracle's exact one: within its error.
        p, n = expected["p_value"], 2000
        assert abs(cell.paired.p_value - p) <= 4 * math.sqrt(p * (1 - p) / n) + 2 / (n + 1), (cell.task, p)
        assert cell.verdict == expected["verdict"]


# A family where the correction decides (no references: the aggregate is over raw returns). Each cell's B - A on
# every episode; B's lines list the episodes in the reverse order (paired back by their seeds). Exact p-values
# (at most 2**10 sign patterns, fewer than 2000: simeval's test is exact too): 2/2**8, 2/2**7, 2/2**6 = 0.031
# and 0.46. Raw p-values would call three cells; Holm (x4, x3, x2, ...) calls the first two (0.031, 0.047);
# Bonferroni (x4 each) only the first.
FAMILY = {
    ("Reacher-v5", "nominal"): [3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0, 6.0],
    ("Reacher-v5", "heavy"): [-2.0, -7.0, -1.0, -8.0, -2.5, -8.5, -3.0],
    ("Pusher-v5", "nominal"): [0.5, 1.0, 1.5, 2.0, 2.5, 3.0],
    ("Pusher-v5", "windy"): [2.0, -1.0, 3.0, -2.0, 1.0, -3.0, 2.5, -1.0, 0.5, 4.0],
}
FAMILY_VERDICTS = ["better", "worse", "inconclusive", "inconclusive"]


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("family")
    rng = np.random.default_rng(7)
    lines_a, lines_b = [], []
    for (task, condition), d in FAMILY.items():
        seeds = list(range(900, 900 + len(d)))
        a = rng.normal(500, 50, len(d))
        lines_a.append(_line(task, condition, 1000, a, seeds=seeds, reference=False))
        lines_b.append(_line(task, condition, 1000, (a + np.array(d))[::-1], seeds=seeds[::-1], reference=False))
    return _write(root / "a", lines_a), _write(root / "b", lines_b)


def test_holm_corrects_the_verdicts_of_a_family_where_the_correction_decides(family):
    a, b = family
    expected = _oracle(a, b)
    cells = list(FAMILY)
    raw = [expected[c]["p_value"] for c in cells]
    assert raw[:3] == pytest.approx([2 / 2**8, 2 / 2**7, 2 / 2**6]) and raw[3] > 0.3
    assert [expected[c]["verdict"] for c in cells] == FAMILY_VERDICTS
    assert sum(p < ALPHA for p in raw) == 3 and sum(len(raw) * p < ALPHA for p in raw) == 1  # raw, Bonferroni
    result = compare.compare(run_dirs.read_results(a), run_dirs.read_results(b), a, b)
    assert [(c.task, c.condition) for c in result.cells] == cells
    assert [c.paired.p_value for c in result.cells] == pytest.approx(raw, rel=1e-9)
    assert [c.verdict for c in result.cells] == FAMILY_VERDICTS
    rows = compare.json_rows(result)  # what --json prints
    assert [(r["task"], r["condition"]) for r in rows] == [*cells, ("*", "*")]
    for row in rows:
        _check_row(row, expected[(row["task"], row["condition"])])
    assert not expected[("*", "*")]["normalised"] and not result.aggregate.normalised
    assert "verdicts: Holm-corrected over 4 cells, alpha 0.05" in text_out.text_table(result)


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
    result = compare.compare(run_dirs.read_results(a), run_dirs.read_results(b), a, b, *run_dirs.labels([a, b]))
    buf = io.StringIO()
    text_out.print_text(result, file=buf, use_rich=True)
    text = buf.getvalue()
    assert all(v in text for v in ("better", "worse", "inconclusive", "100.0 [100.0, 100.0]", "Holm-corrected"))
    # The curve mode is unchanged: the first argument is a run, not "compare".
    assert report_cli.main([a, b, "--output", str(tmp_path / "curve.png")]) == 0
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


def test_html_page_renders_in_a_browser_with_its_tables_and_plots(runs, oracle, tmp_path, chromium):
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
    aggregate = oracle[("*", "*")]["verdict"]
    assert cells[("*", "*")][-1] == aggregate
    assert sorted(dom.classes) == sorted(f"verdict {v}" for v in [*EXPECTED.values(), aggregate])


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
    assert report_cli.main([*runs, "--output", str(tmp_path / "curve.png")]) == 0  # the curve's legend: run names
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
    rows = run_dirs.read_results(a)
    assert [r["step"] for r in rows] == [500, 500, 1000]  # a served evaluator's lines are each their own
    assert rows[-1]["episode_returns"] == pytest.approx(list(x + 7.0))
    b = _write(tmp_path / "b", [_line(task, condition, 1000, x + 7.0)])
    proc = _cli("compare", a, b)
    assert proc.returncode == 0, proc.stderr
    assert _table(proc.stdout)[(task, condition)][2] == "0.0 [0.0, 0.0]"  # A's newest line, the same as B


def test_each_runs_interval_is_its_own_lines_and_a_line_with_more_seeds_than_returns_is_refused(tmp_path):
    """A run's interval is the one its line records (what ``report`` showed for it), a bootstrap only without one;
    a line whose seeds and returns do not pair one to one is an error, whichever has more."""
    rng = np.random.default_rng(4)
    x = rng.normal(100, 10, 16)
    recorded = _line("Pendulum-v1", None, 1000, x)
    recorded["metrics"].update(reward_ci_low=-7.0, reward_ci_high=7.0)  # not what a bootstrap of x gives
    bare = _line("Pendulum-v1", None, 1000, x + 1.0)
    del bare["metrics"]["reward_ci_low"], bare["metrics"]["reward_ci_high"]
    result = compare.compare([recorded], [bare], "a", "b")
    (cell,) = result.cells
    assert cell.ci_a == (-7.0, 7.0)
    assert cell.ci_b == bootstrap_ci([float(v) for v in x + 1.0])
    for more in ("seeds", "returns"):
        odd = _line("Pendulum-v1", None, 1000, x)
        if more == "seeds":
            odd["episode_seeds"] = [*SEEDS, 9999]
        else:
            odd["episode_returns"] = [*odd["episode_returns"], 1.0]
        with pytest.raises(compare.CompareError, match=r"has 1[67] episode returns for 1[67] episode seeds"):
            compare.compare([recorded], [odd], "a", "b")
