"""``--select-best``: the launcher chooses the best of several checkpoints look by look on common seeds.

Real launcher runs (in process, and a real process for ``--watch``) on the shipped HalfCheetah run's checkpoints,
tiny settings (4 sub-envs, 50-step episodes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from launch_helpers import _env

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.launch import main

EARLY, MIDDLE, LATE = (os.path.join(SHIPPED_RUN, f"step_{s:09d}.pt") for s in (126976, 501760, 1001472))
TINY = ["--num-envs", "4", "--max-steps", "50", "--look-every", "4", "--max-episodes", "16"]


def _lines(out) -> list[dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def chosen(tmp_path_factory):
    """A run of three checkpoints with a margin: it stops before the budget and names the chosen one."""
    out = str(tmp_path_factory.mktemp("select") / "out")
    argv = ["--select-best", "--checkpoint", EARLY, "--checkpoint", MIDDLE, "--checkpoint", LATE, "--margin", "50"]
    code = main([*argv, *TINY, "--out", out])
    return code, out, argv


def test_three_checkpoints_stop_and_name_the_chosen_one(chosen, capsys):
    code, out, _ = chosen
    assert code == 0
    lines = _lines(out)
    final = lines[-1]
    assert final["status"] == "selection"
    result = final["selection"]
    assert result["stop"] in ("one left", "within margin")
    assert result["chosen"] in ("step_000501760.pt", "step_001001472.pt")  # the early checkpoint is far worse
    assert "step_000126976.pt" in result["eliminated"]
    rounds = [r for r in lines if r.get("status") == "ok"]
    assert {r["look"] for r in rounds} == set(range(max(r["look"] for r in rounds) + 1))
    by_look = {}
    for r in rounds:  # common seeds: every checkpoint's round of a look played the same episodes
        by_look.setdefault(r["look"], set()).add(tuple(r["episode_seeds"]))
    assert all(len(seeds) == 1 for seeds in by_look.values())
    # an eliminated checkpoint plays no later look; the episodes used are fewer than a 16-episode sweep's
    early = [r["look"] for r in rounds if r["checkpoint_name"] == "step_000126976.pt"]
    assert max(early) == result["eliminated"]["step_000126976.pt"]["look"]
    assert sum(len(r["episode_returns"]) for r in rounds) < 3 * 16


def test_the_same_command_again_evaluates_nothing_and_the_report_prints_the_table(chosen, capsys):
    code, out, argv = chosen
    before = _lines(out)
    capsys.readouterr()
    assert main([*argv, *TINY, "--out", out]) == 0
    printed = capsys.readouterr().out
    assert "resuming:" in printed
    assert _lines(out) == before
    from simeval.report.cli import main as report
    from simeval.report.selection import replay_selection

    # replaying the lines through the strategy's code (no launcher) gives the decisions the run recorded
    assert replay_selection(out).result_line() == before[-1]

    assert report([out]) == 0
    table = capsys.readouterr().out
    result = before[-1]["selection"]
    assert "gap to leader" in table and f"chosen: {result['chosen']}" in table
    assert "eliminated at look" in table
    page = os.path.join(out, "selection.html")
    assert report([out, "--html", page]) == 0
    with open(page) as f:
        text = f.read()
    assert 'id="gaps"' in text and "data:image/png;base64," in text and result["chosen"] in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--suite", "s.yaml"], "task HalfCheetah-v5 declares no reference"),  # runs: tests/test_select_best_suite.py
        (["--look-every", "4", "--max-episodes", "10"], "--max-episodes (10) is not a multiple of the look"),
        (["--look-every", "1", "--max-episodes", "65537"], "65537 looks are more than look seeds cover (65536)"),
    ],
)
def test_refusals_are_one_line(extra, message, tmp_path, capsys):
    if "--suite" in extra:
        (tmp_path / "s.yaml").write_text("name: s\nepisodes: 4\nnum_envs: 4\ntasks:\n  - env: HalfCheetah-v5\n")
        extra = ["--suite", str(tmp_path / "s.yaml")]
    argv = ["--select-best", "--checkpoint", EARLY, "--checkpoint", LATE, *extra, "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_resume_with_another_plan_is_refused_in_one_line(chosen, capsys):
    _, out, argv = chosen
    capsys.readouterr()
    assert main([*argv, *TINY[:-1], "32", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "holds a selection run with max_episodes 16 (now 32)" in err and err.count("\n") == 1, err


def test_a_checkpoint_landing_mid_run_plays_the_looks_played_and_joins(tmp_path):
    watched = tmp_path / "run"
    watched.mkdir()
    for path in (MIDDLE, LATE):
        shutil.copy2(path, watched / os.path.basename(path))
    late = "step_001100000.pt"  # a later step: the same weights as LATE, landing while the others play
    out = tmp_path / "out"
    args = ["--select-best", "--watch", str(watched), "--until-step", "1100000", "--poll-interval", "0.1", *TINY]
    proc = subprocess.Popen(
        [sys.executable, "-m", "simeval.launch", *args, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(None),
    )  # fmt: skip
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and any(r.get("look", 0) >= 1 for r in _lines(out)):
            break
        time.sleep(0.05)
    shutil.copy2(LATE, tmp_path / late)
    os.replace(tmp_path / late, watched / late)  # whole, and settled (copy2 keeps the old mtime)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    lines = _lines(out)
    rounds = [r for r in lines if r.get("status") == "ok"]
    joined = [r for r in rounds if r["checkpoint_name"] == late]
    assert joined, stdout
    assert min(r["selection"]["arrived"] for r in joined) >= 1  # it came in after look 0 was decided
    first = {r["look"]: r["episode_seeds"] for r in rounds if r["checkpoint_name"] == "step_000501760.pt"}
    assert {r["look"] for r in joined} >= set(range(joined[0]["selection"]["arrived"] + 1))
    assert all(r["episode_seeds"] == first[r["look"]] for r in joined if r["look"] in first)
    assert lines[-1]["status"] == "selection" and lines[-1]["selection"]["max_arms"] is None


def test_the_html_page_renders_its_table_and_gap_plot_in_a_browser(chosen, tmp_path):
    """The page forbids every fetch (its CSP); a copy with a probe script says what headless Chromium decoded."""
    from test_compare import rendered

    from simeval.report.cli import main as report

    if shutil.which("chromium") is None and not os.path.exists("/usr/bin/chromium"):
        pytest.skip("no chromium here (tests/test_compare.py installs it where it can)")
    _, out, _ = chosen
    page = tmp_path / "selection.html"
    assert report([out, "--html", str(page)]) == 0
    text = page.read_text()
    dom = rendered(text, tmp_path)
    images = json.loads(dom.probe)
    assert [i[0] for i in images] == ["gaps"] and images[0][1] and images[0][2] > 0, images
    outcomes = [row[-1] for row in dom.rows if row]
    assert outcomes.count("chosen") == 1 and any(o.startswith("eliminated at look") for o in outcomes), dom.rows


def test_an_unreadable_file_under_watch_is_a_failed_line_and_the_run_still_resumes(tmp_path, capsys):
    watched = tmp_path / "run"
    watched.mkdir()
    for path in (EARLY, LATE):
        shutil.copy2(path, watched / os.path.basename(path))
    broken = watched / "step_000600000.pt"
    broken.write_bytes(b"not a checkpoint")
    os.utime(broken, (time.time() - 60, time.time() - 60))  # settled: read, and found unreadable
    (watched / "DONE").write_text("")
    out = str(tmp_path / "out")
    argv = ["--select-best", "--watch", str(watched), *TINY[:-1], "8", "--out", out]
    assert main(argv) == 0
    failed = [r for r in _lines(out) if r.get("status") == "failed"]
    assert [r["checkpoint_name"] for r in failed] == ["step_000600000.pt"]
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    assert "resuming:" in capsys.readouterr().out
    assert [r["checkpoint_name"] for r in _lines(out) if r.get("status") == "failed"] == ["step_000600000.pt"]


def test_a_planned_design_records_itself_and_a_resume_under_another_design_is_refused(tmp_path, capsys):
    out = str(tmp_path / "planned")
    argv = ["--select-best", "--checkpoint", EARLY, "--checkpoint", LATE, "--design", "planned", *TINY]
    assert main([*argv, "--out", out]) == 0
    assert "planned looks (group-sequential)" in capsys.readouterr().out
    lines = _lines(out)
    assert all(r["selection"]["design"] == "planned" for r in lines if "selection" in r)
    assert lines[-1]["selection"]["chosen"] == "step_001001472.pt"
    anytime = [a for a in argv if a not in ("--design", "planned")]
    assert main([*anytime, "--out", out]) == 2
    err = capsys.readouterr().err
    assert "holds a selection run with design 'planned' (now 'anytime')" in err and err.count("\n") == 1, err
    assert main([*argv, "--out", out]) == 0  # the same flags: nothing left to evaluate
    assert len(_lines(out)) == len(lines)
