"""``--select-best --suite``: the checkpoint is chosen on the suite's aggregate score (``report compare``'s ``*`` row).

Real launcher runs in process on the shipped HalfCheetah run's checkpoints, a tiny suite (2 cells, 4 sub-envs,
50-step episodes) whose task declares its reference.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.launch import main

EARLY, MIDDLE, LATE = (os.path.join(SHIPPED_RUN, f"step_{s:09d}.pt") for s in (126976, 501760, 1001472))
NAMES = [os.path.basename(p) for p in (EARLY, MIDDLE, LATE)]
LOW, HIGH = 0.0, 100.0  # a 50-step episode returns about 20 (early) to 60 (late)
SUITE = f"""\
name: pick
episodes: 16
seed: 0
num_envs: 4
max_steps: 50
tasks:
  - env: HalfCheetah-v5
    reference: {{low: {LOW}, high: {HIGH}}}
    conditions:
      nominal: {{}}
      noisy: {{observation_noise: 3.0}}
"""
CELLS = {("HalfCheetah-v5", "nominal"), ("HalfCheetah-v5", "noisy")}


def _lines(out) -> list[dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def chosen(tmp_path_factory):
    """Three checkpoints on the suite's aggregate, margin 0.5 of the reference width: it stops before the budget."""
    root = tmp_path_factory.mktemp("select_suite")
    suite = root / "s.yaml"
    suite.write_text(SUITE)
    out = str(root / "out")
    argv = ["--select-best", "--checkpoint", EARLY, "--checkpoint", MIDDLE, "--checkpoint", LATE,
            "--suite", str(suite), "--margin", "0.5", "--look-every", "4"]  # fmt: skip
    code = main([*argv, "--out", out])
    return code, out, argv


def test_the_suite_run_stops_and_names_a_checkpoint_on_common_seeds_per_cell(chosen):
    code, out, _ = chosen
    assert code == 0
    lines = _lines(out)
    final = lines[-1]["selection"]
    assert lines[-1]["status"] == "selection" and final["suite"] == "pick"
    assert final["stop"] in ("one left", "within margin")
    assert final["chosen"] in NAMES[1:]  # the early checkpoint is far worse on both cells
    assert NAMES[0] in final["eliminated"]
    rounds = [r for r in lines if r.get("status") == "ok"]
    # one line per look per checkpoint per cell, with the suite cell line's fields
    assert all(r["suite"] == "pick" and r["reference"] == {"low": LOW, "high": HIGH} for r in rounds)
    looks = {r["look"] for r in rounds}
    assert looks == set(range(max(looks) + 1))
    for name in NAMES:
        played = {(r["look"], r["task"], r["condition"]) for r in rounds if r["checkpoint_name"] == name}
        last = max(k for k, _, _ in played)
        assert played == {(k, *cell) for k in range(last + 1) for cell in CELLS}, name
    by_round: dict[tuple, set] = {}
    for r in rounds:  # common episodes: every checkpoint's round of a cell at a look played the same seeds
        by_round.setdefault((r["look"], r["task"], r["condition"]), set()).add(tuple(r["episode_seeds"]))
    assert all(len(seeds) == 1 for seeds in by_round.values())
    assert len(by_round[0, "HalfCheetah-v5", "nominal"].pop()) == 4  # the look's episodes, on every cell
    assert sum(len(r["episode_returns"]) for r in rounds) < 3 * 2 * 16


def test_the_score_is_the_mean_over_cells_of_the_reference_normalised_returns(chosen):
    from simeval.report.selection import replay_selection

    _, out, _ = chosen
    rounds = [r for r in _lines(out) if r.get("status") == "ok"]
    rows = {r["checkpoint"]: r for r in replay_selection(out).rows()}
    for name in NAMES:
        mine = [r for r in rounds if r["checkpoint_name"] == name]
        # every cell plays the same number of episodes, so the aggregate's mean is the mean of all normalised returns
        normalised = (np.concatenate([r["episode_returns"] for r in mine]) - LOW) / (HIGH - LOW)
        assert rows[name]["mean"] == pytest.approx(float(normalised.mean()), rel=1e-12)
        assert rows[name]["episodes"] == len(normalised) // len(CELLS)
    gap = rows[_lines(out)[-1]["selection"]["chosen"]]["gap"]
    assert gap == (0.0, 0.0)


def test_the_same_command_again_evaluates_nothing_and_the_report_prints_the_table(chosen, capsys):
    from simeval.report.cli import main as report
    from simeval.report.selection import replay_selection

    code, out, argv = chosen
    before = _lines(out)
    capsys.readouterr()
    assert main([*argv, "--out", out]) == 0
    assert "resuming:" in capsys.readouterr().out
    assert _lines(out) == before
    assert replay_selection(out).result_line() == before[-1]
    assert report([out]) == 0
    table = capsys.readouterr().out
    result = before[-1]["selection"]
    assert "suite pick" in table and "norm. mean" in table and "gap to leader" in table
    assert f"chosen: {result['chosen']}" in table and "eliminated at look" in table
    page = os.path.join(out, "selection.html")
    assert report([out, "--html", page]) == 0
    with open(page) as f:
        text = f.read()
    assert "<th>mean (normalised)</th>" in text and 'id="gaps"' in text and result["chosen"] in text


def test_a_resume_with_another_reference_is_refused_in_one_line(chosen, tmp_path, capsys):
    _, out, argv = chosen
    other = tmp_path / "s.yaml"
    other.write_text(SUITE.replace(f"high: {HIGH}", "high: 200.0"))
    capsys.readouterr()
    assert main([*argv[:-5], str(other), *argv[-4:], "--out", out]) == 2
    err = capsys.readouterr().err
    assert "holds a selection run with cells" in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("", "task HalfCheetah-v5 declares no reference"),
        ("    reference: {low: 100, high: 0}\n", "its reference 100..0 cannot normalise (high must exceed low)"),
    ],
)
def test_a_task_without_a_usable_reference_is_refused_in_one_line(reference, message, tmp_path, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.replace(f"    reference: {{low: {LOW}, high: {HIGH}}}\n", reference))
    argv = ["--select-best", "--checkpoint", EARLY, "--checkpoint", LATE, "--suite", str(suite)]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "o" / "results.jsonl")


def test_declared_bounds_give_the_aggregate_normalised_bounds():
    from simeval.strategies.selection import SuiteScore, aggregate, aggregate_bounds

    cells = (SuiteScore("A", "x", 0, (0.0, 10.0), (-5.0, 15.0)), SuiteScore("B", "y", 0, (100.0, 0.0), (0.0, 100.0)))
    assert aggregate_bounds(cells) == pytest.approx(((-0.5 + 0.0) / 2, (1.5 + 1.0) / 2))
    assert aggregate_bounds((cells[0], SuiteScore("B", "y", 0, (100.0, 0.0)))) is None
    columns = [[15.0, 0.0, -5.0], [0.0, 50.0, 100.0]]
    values = aggregate(columns, cells)
    assert values == pytest.approx([(1.5 + 1.0) / 2, (0.0 + 0.5) / 2, (-0.5 + 0.0) / 2])
    low, high = aggregate_bounds(cells)
    assert low <= min(values) and max(values) <= high  # the extremes land on the bounds, not past them


def test_a_run_killed_mid_look_resumes_the_missing_cell_rounds_only(chosen, tmp_path, capsys):
    """The last look's last two cell rounds and the result line lost (a kill mid-look): the same command plays those
    two rounds, on the same seeds, and comes to the same result."""
    _, out, argv = chosen
    lines = _lines(out)
    kept = lines[:-3]
    resumed = tmp_path / "out"
    resumed.mkdir()
    (resumed / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    capsys.readouterr()
    assert main([*argv, "--out", str(resumed)]) == 0
    assert f"resuming: {len(kept)} round(s)" in capsys.readouterr().out
    again = _lines(resumed)
    new = again[len(kept) : -1]
    lost = {(r["checkpoint_name"], r["look"], r["condition"]): r["episode_seeds"] for r in lines[-3:-1]}
    assert {(r["checkpoint_name"], r["look"], r["condition"]): r["episode_seeds"] for r in new} == lost
    before, after = lines[-1]["selection"], again[-1]["selection"]
    assert (after["stop"], after["chosen"], sorted(after["eliminated"])) == (
        before["stop"], before["chosen"], sorted(before["eliminated"]),
    )  # fmt: skip
