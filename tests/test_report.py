"""``python -m simeval.launch.report``: the table and the plot read real results.jsonl files."""

from __future__ import annotations

import os

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
