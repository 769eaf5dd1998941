"""``python -m simeval.launch.report``: the table and the plot read real results.jsonl files."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
from helpers import const_policy, count_env

from simeval import Evaluator
from simeval.report import cli, curves

PNG = b"\x89PNG\r\n\x1a\n"


def _run(out_dir, w: float, steps: tuple[int, ...] = (1000,)) -> str:
    """A results directory written by an Evaluator: every episode of a round returns 3 * w."""
    os.makedirs(out_dir, exist_ok=True)
    ev = Evaluator(
        count_env, const_policy(w=w), num_trajectories=2, results_path=os.path.join(out_dir, "results.jsonl")
    )
    try:
        for step in steps:
            ev.evaluate(step=step)
    finally:
        ev.shutdown()
    return str(out_dir)


def _rows(stdout: str) -> list[list[str]]:
    """The table's data rows, split on whitespace (a label with a space spans two cells)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-")) + 1
    return [line.split() for line in lines[start:] if line and not line.startswith("plot:")]


def test_a_run_whose_returns_are_all_zero_shows_a_zero_interval(tmp_path, capsys):
    run = _run(tmp_path / "zero", w=0.0)
    assert cli.main([run, "--output", str(tmp_path / "curve.png")]) == 0
    ((_label, step, mean, low, high, episodes),) = _rows(capsys.readouterr().out)
    assert (step, episodes) == ("1,000", "2")
    assert (mean, low, high) == ("0.0", "0.0", "0.0")  # not "nan": 0.0 is a bound like any other
    assert (tmp_path / "curve.png").read_bytes()[:8] == PNG


def test_runs_and_references_with_the_same_basename_keep_a_row_each(tmp_path, capsys):
    run_a = _run(tmp_path / "seed0" / "out", w=1.0, steps=(1000, 2000))
    run_b = _run(tmp_path / "seed1" / "out", w=2.0, steps=(1000,))
    ref_a = _run(tmp_path / "random" / "out", w=0.0)
    ref_b = _run(tmp_path / "expert" / "out", w=3.0)
    png = tmp_path / "curve.png"
    argv = [run_a, run_b, "--reference", ref_a, "--reference", ref_b, "--output", str(png)]
    assert cli.main(argv) == 0
    rows = _rows(capsys.readouterr().out)
    by_label: dict[str, list[tuple[str, str]]] = {}
    for label, step, mean, *_ in rows:
        by_label.setdefault(label, []).append((step, mean))
    assert by_label == {
        "seed0/out": [("1,000", "3.0"), ("2,000", "3.0")],
        "seed1/out": [("1,000", "6.0")],
        "random/out": [("1,000", "0.0")],
        "expert/out": [("1,000", "9.0")],
    }
    assert png.read_bytes()[:8] == PNG


def test_a_reference_never_replaces_a_run_of_the_same_name(tmp_path, capsys, monkeypatch):
    _run(tmp_path / "a" / "out", w=1.0)
    ref = _run(tmp_path / "b" / "out", w=2.0)
    monkeypatch.chdir(tmp_path / "a")  # the run given as "out": the reference's basename
    assert cli.main(["out", "--reference", ref, "--output", str(tmp_path / "curve.png")]) == 0
    means = {label: mean for label, _step, mean, *_ in _rows(capsys.readouterr().out)}
    assert means == {"a/out": "3.0", "b/out": "6.0"}


def test_the_same_directory_as_run_and_reference_is_shown_twice(tmp_path, capsys):
    run = _run(tmp_path / "out", w=1.0)
    assert cli.main([run, "--reference", run, "--output", str(tmp_path / "curve.png")]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [row[0] for row in rows] == ["out", "out"]
    assert rows[0][1] == "1,000" and rows[1][1:3] == ["(reference)", "1,000"]


def test_a_bound_that_is_missing_or_null_shows_as_nan_and_draws_no_band(tmp_path):
    rows = [
        {"step": 1000, "metrics": {"reward": 2.0, "num_episodes": 1}},  # written before CIs were recorded
        {"step": 2000, "metrics": {"reward": 4.0, "reward_ci_low": None, "reward_ci_high": 0.0, "num_episodes": 1}},
    ]
    lines = curves.table({"run": rows}).splitlines()[2:]
    assert [line.split()[2:5] for line in lines] == [["2.0", "nan", "nan"], ["4.0", "nan", "0.0"]]
    png = curves.plot({"run": rows}, str(tmp_path / "curve.png"), {"base": rows[1]})
    assert open(png, "rb").read(8) == PNG


def test_an_adaptive_runs_looks_are_one_row_per_checkpoint_and_cell(tmp_path, capsys):
    """Lines with ``look`` (the launcher's --until-decided/--until-precise) of the same checkpoint and cell are one
    row: every look's episodes joined in look order, the band the 95% confidence sequence replayed over the looks
    (it holds however the run chose to stop); a fixed-n line beside them is shown as it is."""
    from simeval.records import append_record
    from simeval.report import runs
    from simeval.sequential import SequentialMean

    plan = {"rule": "until-precise", "alpha": 0.05, "rows": 2, "look_every": 4, "max_episodes": 12,
            "margin": 0.0, "precision": 10.0, "relative": False}  # fmt: skip
    looks = {"a": [[10.0, 12.0, 11.0, 13.0], [9.0, 12.5, 11.5, 10.5], [12.0, 11.0, 10.0, 13.0]], "b": [[50.0] * 4]}
    lines = []
    for look in range(3):  # the launcher writes look L of every cell still running, cell after cell
        for condition, parts in looks.items():
            if look < len(parts):
                line = {"status": "ok", "step": 1000, "checkpoint_name": "ck.pt", "task": "T", "condition": condition,
                        "metrics": {"reward": sum(parts[look]) / 4, "num_episodes": 4},
                        "episode_returns": parts[look], "episode_seeds": list(range(4 * look, 4 * look + 4)),
                        "episode_sub_envs": [0, 1, 2, 3], "episode_ordinals": [0, 0, 0, 0],
                        "round": {"num_envs": 4, "quotas": [1, 1, 1, 1], "seed": look, "shards": [[0, 4]]},
                        "look": look, "sequential": plan, "bounds": {"low": 0.0, "high": 100.0}}  # fmt: skip
                if look == len(parts) - 1:
                    line["stop"] = "budget"
                lines.append(line)
    lines.append({"status": "ok", "step": 2000, "checkpoint_name": "ck2.pt", "task": "T", "condition": "a",
                  "metrics": {"reward": 7.0, "reward_ci_low": 6.0, "reward_ci_high": 8.0, "num_episodes": 2},
                  "episode_returns": [6.5, 7.5]})  # fmt: skip
    out = tmp_path / "run"
    for line in lines:
        append_record(str(out / "results.jsonl"), line)
    merged = runs.merge_looks(runs.read_results(str(out)))
    assert [(m["condition"], m["step"], m.get("looks")) for m in merged] == [
        ("a", 1000, 3),
        ("b", 1000, 1),
        ("a", 2000, None),
    ]
    joined = [x for part in looks["a"] for x in part]
    assert merged[0]["episode_returns"] == joined and merged[0]["episode_seeds"] == list(range(12))
    assert merged[0]["episode_sub_envs"] == [0, 1, 2, 3] * 3 and "round" not in merged[0]  # each look: its own round
    seq = SequentialMean(0.95, (0.0, 100.0), plan_n=4)
    for part in looks["a"]:
        seq.update(part)
    m = merged[0]["metrics"]
    assert (m["reward"], m["reward_ci_low"], m["reward_ci_high"], m["num_episodes"]) == (
        sum(joined) / 12, seq.low, seq.high, 12)  # fmt: skip
    assert merged[0]["stop"] == "budget" and "look" not in merged[0]
    assert merged[2] == lines[-1]
    assert cli.main([str(out), "--output", str(tmp_path / "curve.png")]) == 0
    assert [(step, episodes) for _label, step, *_, episodes in _rows(capsys.readouterr().out)] == [
        ("1,000", "12"), ("1,000", "4"), ("2,000", "2")]  # fmt: skip


def _ok(step: int, name: str, mean: float, **cell) -> dict:
    """An ok results line of checkpoint ``name`` (a suite's cell with ``task``/``condition``)."""
    return {"status": "ok", "step": step, "checkpoint_name": name, "checkpoint": f"/ck/{name}",
            "metrics": {"reward": mean, "reward_ci_low": mean - 1, "reward_ci_high": mean + 1, "num_episodes": 4},
            **cell}  # fmt: skip


def _failed(step: int, name: str, error: str, retry: str = "--retry-failed", **cell) -> dict:
    """A failed results line as :func:`simeval.records.failed_record` writes it."""
    return {"status": "failed", "checkpoint": f"/ck/{name}", "checkpoint_name": name, "error": error, "step": step,
            "error_kind": "evaluation", "retry": retry, **cell}  # fmt: skip


def _write_lines(out_dir, lines: list[dict]) -> str:
    from simeval.records import append_record

    for line in lines:
        append_record(str(out_dir / "results.jsonl"), line)
    return str(out_dir)


def test_failed_checkpoints_are_listed_below_the_table_with_how_to_retry_them(tmp_path, capsys):
    """A failed line that still stands is listed (run, checkpoint, step, cell, reason, the retry command); one whose
    newest line is ok after it is not; the exit code stays 0 while something was evaluated."""
    run = _write_lines(tmp_path / "run", [
        _failed(1000, "ck_1000.pt", "worker died"),  # then evaluated again: ok
        _ok(1000, "ck_1000.pt", 5.0),
        _failed(2000, "ck_2000.pt", "unreadable checkpoint:\n  truncated zip"),
        _failed(3000, "ck_3000.pt", "first try"),
        _failed(3000, "ck_3000.pt", "second try"),  # the newest failed line of an evaluation is the one listed
    ])  # fmt: skip
    assert cli.main([run, "--output", str(tmp_path / "curve.png")]) == 0
    out = capsys.readouterr().out
    listing = out[out.index("failed (2):") :].splitlines()
    assert listing[1] == "  run: ck_2000.pt  step 2,000: unreadable checkpoint: truncated zip"
    assert listing[2] == "  run: ck_3000.pt  step 3,000: second try"
    assert listing[3].startswith("retry: rerun the launcher with the same flags and --retry-failed")
    assert f"--out {run} --retry-failed" in listing[3]
    assert "ck_1000.pt" not in out[out.index("failed (2):") :]
    assert (tmp_path / "curve.png").read_bytes()[:8] == PNG


def test_nothing_but_failures_exits_1_with_one_line_saying_so(tmp_path, capsys):
    """A run whose every evaluation failed (each cell of a suite's checkpoint, and a checkpoint with no cell) exits 1:
    the failures listed, one error line, no empty table and no plot."""
    run = _write_lines(tmp_path / "run", [
        _failed(1000, "ck.pt", "CUDA error: out of memory", task="Hopper-v5", condition="nominal"),
        _failed(1000, "ck.pt", "CUDA error: out of memory", task="Hopper-v5", condition="heavy"),
        _failed(2000, "ck2.pt", "not a checkpoint", retry="resume"),
    ])  # fmt: skip
    png = tmp_path / "curve.png"
    assert cli.main([run, "--output", str(png)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "failed (3):"
    assert out[1] == "  run: ck.pt  step 1,000  Hopper-v5 / nominal: CUDA error: out of memory"
    assert out[2] == "  run: ck.pt  step 1,000  Hopper-v5 / heavy: CUDA error: out of memory"
    assert out[-1] == f"simeval-report: error: every evaluation in {run} failed (listed above)."
    assert not any(line.startswith("---") for line in out) and not png.exists()


def test_a_suite_checkpoint_failed_without_a_cell_then_evaluated_is_not_listed(tmp_path, capsys):
    """A checkpoint that could not be read fails without task/condition; its cells' later ok lines supersede it."""
    run = _write_lines(tmp_path / "run", [
        _failed(1000, "ck.pt", "unreadable"),
        _ok(1000, "ck.pt", 1.0, task="T", condition="nominal"),
        _ok(1000, "ck.pt", 2.0, task="T", condition="heavy"),
    ])  # fmt: skip
    assert cli.main([run, "--output", str(tmp_path / "curve.png")]) == 0
    assert "failed (" not in capsys.readouterr().out


def test_a_suite_run_has_task_and_condition_columns_and_a_curve_per_cell(tmp_path, capsys, monkeypatch):
    """One row per checkpoint x cell with its task and condition; the plot draws one curve per (run, cell) against
    step (points joined across steps), never all of a step's cells as one vertical line."""
    lines = [_ok(s, f"ck_{s}.pt", base + s / 1000, task="Hopper-v5", condition=c)
             for s in (1000, 2000) for c, base in (("nominal", 10.0), ("heavy", 20.0))]  # fmt: skip
    run = _write_lines(tmp_path / "suite", lines)
    drawn: list[tuple[str, list, list]] = []
    from matplotlib.axes import Axes

    real = Axes.plot

    def spy(self, x, y, *args, **kwargs):
        drawn.append((kwargs.get("label"), list(x), list(y)))
        return real(self, x, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", spy)
    assert cli.main([run, "--output", str(tmp_path / "curve.png")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["run", "step", "task", "condition", "return", "ci", "low", "ci", "high", "episodes"]
    rows = [line.split() for line in out[2:6]]
    assert [r[:5] for r in rows] == [
        ["suite", "1,000", "Hopper-v5", "nominal", "11.0"],
        ["suite", "1,000", "Hopper-v5", "heavy", "21.0"],
        ["suite", "2,000", "Hopper-v5", "nominal", "12.0"],
        ["suite", "2,000", "Hopper-v5", "heavy", "22.0"],
    ]
    assert drawn == [
        ("suite: Hopper-v5 / nominal", [1000, 2000], [11.0, 12.0]),
        ("suite: Hopper-v5 / heavy", [1000, 2000], [21.0, 22.0]),
    ]


def _pipe(cmd: str) -> subprocess.CompletedProcess:
    """``cmd`` in a shell, its stdout piped into ``head -c 10``: the reader closes the pipe early."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {cmd} | head -c 10 >/dev/null"], capture_output=True, text=True,
        timeout=120, env=env,
    )  # fmt: skip


def test_a_reader_that_closes_the_pipe_early_ends_the_report_quietly(tmp_path):
    """``report compare --json | head`` and ``report DIR | head``: no BrokenPipeError traceback, exit 0 or 141."""
    # More than a pipe's buffer (64 KiB) of table and of JSON: the writer meets the closed pipe.
    lines = [_ok(s, f"ck_{s}.pt", 1.0, task=f"T{k}", condition="nominal") for s in (1, 2) for k in range(600)]
    for line in lines:
        line.update(episode_returns=[1.0, 2.0], episode_seeds=[0, 1])
    a = _write_lines(tmp_path / "a", lines)
    b = _write_lines(tmp_path / "b", lines)
    py = shlex.quote(sys.executable)
    for cmd in (
        f"{py} -m simeval.report compare {a} {b} --json --step-a 1 --step-b 1",
        f"{py} -m simeval.report {a} --output {tmp_path / 'curve.png'}",
    ):
        proc = _pipe(cmd)
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 141), (cmd, proc.returncode, proc.stderr)


# -- the compare table in plain words (issue 45 item 4) ---------------------------------------------------------

_SUITE = """\
name: words
episodes: 16
seed: 0
num_envs: 4
max_steps: 50
tasks:
  - env: HalfCheetah-v5
    reference: {low: -300.0, high: 12000.0}
    conditions:
      nominal: {}
      noisy: {observation_noise: 3.0}
"""


def _adaptive_run(tmp_path_factory, *extra: str) -> tuple[str, str, str]:
    """A two-cell suite run of the shipped first and final checkpoints, adaptively: (out, launcher's, report's stdout).

    ``nominal`` is decided at its first look; ``noisy`` runs to its budget, inconclusive.
    """
    from launch_helpers import cli as launch

    from simeval.checkpoints.shipped import SHIPPED_RUN

    root = tmp_path_factory.mktemp("words")
    (root / "suite.yaml").write_text(_SUITE)
    out = root / "out"
    proc = launch("--suite", str(root / "suite.yaml"), "--checkpoint", os.path.join(SHIPPED_RUN, "step_001001472.pt"),
                  "--baseline", os.path.join(SHIPPED_RUN, "step_000126976.pt"), "--until-decided", "--look-every", "8",
                  "--out", str(out), *extra)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "simeval.report", "compare", str(out / "a"), str(out / "b")],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert report.returncode == 0, report.stderr
    return str(out), proc.stdout, report.stdout


@pytest.fixture(scope="module")
def anytime(tmp_path_factory) -> tuple[str, str, str]:
    return _adaptive_run(tmp_path_factory)


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> tuple[str, str, str]:
    return _adaptive_run(tmp_path_factory, "--design", "planned", "--max-episodes", "8")


def _compare_rows(stdout: str) -> dict[str, list[str]]:
    """The compare table's rows by condition (``*`` for the aggregate), split on whitespace."""
    rows = [line.split() for line in stdout.splitlines()]
    return {row[1]: row for row in rows if len(row) > 8 and row[0] in ("HalfCheetah-v5", "*")}


def test_the_compare_table_has_a_legend_in_plain_words_under_it(anytime):
    _out, _launcher, report = anytime
    lines = report.splitlines()
    legend = lines.index("legend (the columns in plain words):")
    assert legend > next(i for i, line in enumerate(lines) if line.startswith("*"))  # under the table
    words = "\n".join(lines[legend:])
    assert "B - A [CI]: B's mean minus A's, then the range the true difference B - A lies in, 95% for the whole " \
        "table at once, valid at any look" in words  # fmt: skip
    for column in ("mean A, mean B:", "verdict:", "method:", "episodes: per checkpoint", "stop:", "pairing gain:",
                   "share B ahead:"):  # fmt: skip
        assert f"\n  {column}" in words, column
    # The statisticians' words are kept, below the legend, in a details block.
    assert lines.index("details (the statistics behind the table: docs/statistics.md):") > legend
    assert "family: alpha 0.05 over 2 rows" in words and "t-mixture CS = " in words
    assert "Bonferroni" not in "\n".join(lines[:legend])


def test_the_aggregate_row_names_its_units(anytime):
    _out, _launcher, report = anytime
    aggregate = next(line for line in report.splitlines() if line.startswith("*"))
    assert "  normalised: fraction of reference width  mean of intervals  " in aggregate
    assert "  *: all cells together, normalised: fraction of reference width" in report


def test_the_launcher_and_the_report_count_the_same_episodes_per_checkpoint(anytime):
    _out, launcher, report = anytime
    used = next(line for line in launcher.splitlines() if line.startswith("episodes used:"))
    per_checkpoint = int(used.split("per checkpoint: ")[1].split()[0])
    rows = _compare_rows(report)
    assert int(rows["*"][-1]) == per_checkpoint == int(rows["nominal"][-4]) + int(rows["noisy"][-4])
    assert "episodes: per checkpoint" in report


def test_an_inconclusive_anytime_cell_prints_the_command_that_continues_it(anytime):
    out, _launcher, report = anytime
    noisy = _compare_rows(report)["noisy"]
    assert noisy[7:11] == ["inconclusive", "next:", "--max-episodes", "32"]
    step = next(line for line in report.splitlines() if line.startswith("next: HalfCheetah-v5 / noisy:"))
    assert "continue the run" in step and f"--max-episodes 32 and --out {shlex.quote(out)}" in step


def test_an_inconclusive_planned_cell_says_it_cannot_be_extended(planned):
    _out, _launcher, report = planned
    noisy = _compare_rows(report)["noisy"]
    assert noisy[7:14] == ["inconclusive", "next:", "plan", "spent,", "a", "new", "run"], noisy
    step = next(line for line in report.splitlines() if line.startswith("next: HalfCheetah-v5 / noisy:"))
    assert "cannot be extended" in step and "launch a new run with a larger plan (--max-episodes 16)" in step
    assert "next: plan spent, a new run" in report
