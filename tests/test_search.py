"""``--search``: the failure-region search through the launcher and the report, on native MuJoCo HalfCheetah.

The shipped final checkpoint runs forward at nominal mass and stalls when its bodies are about twice as heavy (its
return over 40 steps falls from about 90 to near 0): a monotone failure along ``body_mass_scale`` that the map must
find, with every episode's drawn mass recorded and every region's class consistent with its episodes.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import shutil
import subprocess

import pytest
from launch_helpers import cli, in_process, write_checkpoints

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.strategies.search import region_seed

FINAL = os.path.join(SHIPPED_RUN, "step_001001472.pt")
ARGS = ["--checkpoint", FINAL, "--env", "HalfCheetah-v5", "--num-envs", "8", "--max-steps", "40", "--seed", "0"]


def _lines(out: str) -> list[dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _report(*args: str) -> subprocess.CompletedProcess:
    return in_process(*args, report=True)


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("search") / "mass")
    run = in_process(*ARGS, "--search", "body_mass_scale=0.5:3.0", "--fail-below", "45", "--max-episodes", "160",
              "--out", out)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> str:
    """An untrained policy's checkpoint: it fails (return < 45 in 40 steps) at every mass."""
    return write_checkpoints(str(tmp_path_factory.mktemp("untrained")), steps=(0,))[0]


@pytest.fixture(scope="module")
def failing(untrained, tmp_path_factory) -> str:
    """The untrained policy's map over ``searched``'s range and failure: every region decided ``fail``."""
    out = str(tmp_path_factory.mktemp("search") / "untrained")
    run = in_process("--checkpoint", untrained, *ARGS[2:], "--search", "body_mass_scale=0.5:3.0", "--fail-below", "45",
              "--max-episodes", "64", "--out", out)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_the_search_maps_where_a_heavier_cheetah_fails(searched):
    lines = _lines(searched)
    assert all(r["status"] == "ok" for r in lines)
    last = lines[-1]
    assert last["stop"] in ("every region decided", "resolution reached", "budget") and "map" in last
    regions = last["map"]["regions"]
    light = [r for r in regions if r["bounds"]["body_mass_scale"][1] <= 1.2]
    heavy = [r for r in regions if r["bounds"]["body_mass_scale"][0] >= 1.75]
    assert light and all(r["class"] == "pass" for r in light)
    assert heavy and all(r["class"] == "fail" for r in heavy)
    boundary = last["map"]["boundary"]
    assert boundary["direction"] == "increasing" and 0.5 <= boundary["low"] < boundary["high"] <= 2.5
    assert boundary["high"] - boundary["low"] < 2.0
    assert sum(r["n"] for r in regions) == sum(len(r["episode_returns"]) for r in lines) <= 160


def test_each_round_draws_its_episodes_within_its_region_on_its_own_seed(searched):
    lines = _lines(searched)
    seen = set()
    for r in lines:
        lo, hi = r["region"]["bounds"]["body_mass_scale"]
        drawn = r["episode_conditions"]["body_mass_scale"]
        assert len(drawn) == len(r["episode_returns"]) == 8 and all(lo <= x <= hi for x in drawn)
        assert r["condition_settings"] == {"body_mass_scale": [lo, hi]}
        assert r["seed"] == region_seed(0, tuple(r["region"]["key"]), r["region"]["round"])
        seen.add(r["seed"])
    assert len(seen) == len(lines)  # no two rounds share episodes
    # the classes follow the episodes: a fail region's episodes mostly returned below --fail-below
    for region in lines[-1]["map"]["regions"]:
        assert 0 <= region["failures"] <= region["n"]


def test_the_report_prints_draws_and_pages_the_map(searched, tmp_path):
    page = tmp_path / "map.html"
    shown = _report(searched, "--html", str(page))
    assert shown.returncode == 0, shown.stderr
    assert "failure map of step_001001472.pt: failure = return < 45" in shown.stdout
    assert "boundary: body_mass_scale in [" in shown.stdout and "assumes the failure probability is monotone" in (
        shown.stdout
    )
    assert os.path.getsize(os.path.join(searched, "failure_map.png")) > 1000
    text = page.read_text()
    assert '<img id="map"' in text and "data:image/png;base64," in text and '<tr class="fail">' in text
    # the report rebuilds the map the run wrote, from its lines
    last = _lines(searched)[-1]
    for region in last["map"]["regions"]:
        lo, hi = region["bounds"]["body_mass_scale"]
        assert f"body_mass_scale [{lo:.4g}, {hi:.4g}]" in shown.stdout
    (worst,) = [r for r in last["map"]["regions"] if r["key"] == last["map"]["worst"]]
    lo, hi = worst["bounds"]["body_mass_scale"]
    assert f"worst region: body_mass_scale [{lo:.4g}, {hi:.4g}] ({worst['failures']}/{worst['n']} failed)" in (
        shown.stdout
    )


def test_a_finished_search_resumed_evaluates_nothing(searched):
    before = _lines(searched)
    again = in_process(*ARGS, "--search", "body_mass_scale=0.5:3.0", "--fail-below", "45", "--max-episodes", "160",
                "--out", searched)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming: {len(before)} round(s)" in again.stdout
    assert _lines(searched) == before


def test_two_searched_checkpoints_compare_region_by_region(searched, tmp_path):
    early = str(tmp_path / "early")
    run = in_process(*ARGS[:1], os.path.join(SHIPPED_RUN, "step_000126976.pt"), *ARGS[2:], "--search",
              "body_mass_scale=0.5:3.0", "--fail-below", "45", "--max-episodes", "96", "--out", early)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    shown = _report("compare", early, searched)
    assert shown.returncode == 0, shown.stderr
    assert "failure maps compared:" in shown.stdout
    assert "fails where" in shown.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--search", "body_mass_scale=3:0.5"], "--search 'body_mass_scale=3:0.5': expected SETTING=LOW:HIGH"),
        (["--search", "gravity=-12:-5", "--search", "gravity=-9:-1"], "--search names gravity twice"),
        (["--search", "body_mass_scale=0.5:3", "--resolution", "5"], "--resolution '5' for body_mass_scale"),
        (["--fail-below", "10"], "--fail-below sets the failure search: add --search SETTING=LOW:HIGH."),
        (["--search", "body_mass_scale=0.5:3", "--failure-rate", "1.5"], "--failure-rate must be in (0, 1)"),
        (["--search", "body_mass_scale=0.5:3", "--evidence", "-1"], "--evidence must be >= 0"),
        (["--search", "body_mass_scale=0.5:3", "--suite", "s.yaml"], "give each task its own search: block"),
    ],
)
def test_search_flags_are_checked_in_one_line(flags, message, tmp_path, capsys):
    from simeval.launch import main

    assert main([*ARGS, *flags, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not os.path.exists(tmp_path / "x")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--search", "wind=0:1"], "--search: unknown setting 'wind'"),
        (["--search", "body_mass_scale=0.5:3", "--env-backend", "gymnasium"], "body_mass_scale set model physics"),
    ],
)
def test_a_searched_setting_the_env_cannot_take_is_one_line_before_any_round(flags, message, tmp_path):
    run = in_process(*ARGS, *flags, "--out", str(tmp_path / "x"))
    assert run.returncode == 2
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not os.path.exists(tmp_path / "x")


def test_evidence_replays_the_worst_failures_exactly_with_video_and_the_page_links_them(tmp_path):
    out = str(tmp_path / "evidence")
    run = cli(*ARGS, "--search", "body_mass_scale=0.5:3.0", "--fail-below", "45", "--max-episodes", "64",
              "--evidence", "2", "--out", out)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "evidence: the 2 worst failed episode(s) of the failing regions, replayed with video" in run.stdout
    with open(os.path.join(out, "replays.jsonl")) as f:
        replays = [json.loads(line) for line in f]
    lines = _lines(out)
    regions = [r for r in lines[-1]["map"]["regions"] if r["class"] == "fail"]
    assert len(replays) == 2 and all(r["equal"] for r in replays)
    for r in replays:
        record = lines[r["line"] - 1]
        assert r["recorded_return"] == record["episode_returns"][r["index"]] < 45
        mass = r["conditions"]["body_mass_scale"]
        assert any(g["bounds"]["body_mass_scale"][0] <= mass <= g["bounds"]["body_mass_scale"][1] for g in regions)
        assert os.path.getsize(r["video"]) > 1000
        assert (
            r["command"] == f"python -m simeval.launch --replay {out} --replay-episode {r['line']}:{r['index']} --video"
        )
    inside = lambda m: any(lo <= m <= hi for lo, hi in (g["bounds"]["body_mass_scale"] for g in regions))  # noqa: E731
    failed = sorted(
        x
        for rec in lines
        for x, m in zip(rec["episode_returns"], rec["episode_conditions"]["body_mass_scale"], strict=True)
        if x < 45 and inside(m)
    )
    assert [r["recorded_return"] for r in replays] == failed[:2]
    page = tmp_path / "page.html"
    shown = _report(out, "--html", str(page))
    assert shown.returncode == 0, shown.stderr
    text = page.read_text()
    assert text.count("<video controls") == 2 and "evidence/videos/replay_line" in text
    again = cli(*ARGS, "--search", "body_mass_scale=0.5:3.0", "--fail-below", "45", "--max-episodes", "64",
                "--evidence", "2", "--out", out)  # fmt: skip
    assert "(2 replayed before)" in again.stdout  # a resume renders nothing twice


def _decided_overlaps(run_a: str, run_b: str, klass_a: str, klass_b: str) -> list[str]:
    """The boxes where the maps the two runs wrote overlap with classes ``klass_a`` (A's) and ``klass_b`` (B's)."""
    boxes = []
    for ra in _lines(run_a)[-1]["map"]["regions"]:
        for rb in _lines(run_b)[-1]["map"]["regions"]:
            (a0, a1), (b0, b1) = ra["bounds"]["body_mass_scale"], rb["bounds"]["body_mass_scale"]
            lo, hi = max(a0, b0), min(a1, b1)
            if hi > lo and (ra["class"], rb["class"]) == (klass_a, klass_b):
                boxes.append(f"body_mass_scale [{lo:.4g}, {hi:.4g}]")
    return boxes


def _pixels(page: str, image: str, colour: str) -> int:
    """How many pixels of the page's embedded PNG ``image`` (its id) are ``colour`` (#rrggbb)."""
    import matplotlib.image as mpimg
    import numpy as np

    src = re.search(rf'<img id="{image}"[^>]* src="data:image/png;base64,([^"]+)"', page).group(1)
    rgb = (mpimg.imread(io.BytesIO(base64.b64decode(src)))[..., :3] * 255).round()
    return int((np.abs(rgb - [int(colour[i : i + 2], 16) for i in (1, 3, 5)]).sum(-1) <= 6).sum())


def test_two_maps_compared_on_a_page_show_both_their_difference_and_where_b_fails(searched, failing, tmp_path):
    from test_compare import _Page

    from simeval.report.search import PAIR_COLOURS

    page = tmp_path / "report" / "maps.html"
    shown = _report("compare", searched, failing, "--html", str(page))
    assert shown.returncode == 0, shown.stderr
    assert f"html: {page}" in shown.stdout
    assert "untrained fails where mass passes: body_mass_scale [0.5, " in shown.stdout
    assert os.listdir(page.parent) == ["maps.html"]  # written whole: no temporary file left beside it
    text = page.read_text()
    assert len(re.findall(r'<img id="(maps|difference)"[^>]* src="data:image/png;base64,', text)) == 2
    assert not re.search(r"<script|<link|https?://", text)
    dom = _Page()
    dom.feed(text)
    rows = [r for r in dom.rows if r]
    b_fails = _decided_overlaps(searched, failing, "pass", "fail")
    assert b_fails, "the trained policy passes the light masses, where the untrained one fails"
    assert rows == [["untrained fails where mass passes", box] for box in b_fails] + [
        ["mass fails where untrained passes", "nowhere the maps decided"]
    ]
    assert not _decided_overlaps(searched, failing, "fail", "pass")
    # the difference is drawn: a band where B fails and A passes, none the other way (only its legend's patch)
    assert _pixels(text, "difference", PAIR_COLOURS["b fails"]) > 5000
    assert _pixels(text, "difference", PAIR_COLOURS["a fails"]) < 500
    # the table compare prints, escaped, on the page
    assert html.escape(shown.stdout.split("\nhtml: ")[0]) in text


def test_the_two_maps_page_renders_in_a_browser(searched, failing, tmp_path):
    """The page forbids every fetch (its CSP); a copy with a probe script says what headless Chromium decoded."""
    from test_compare import rendered

    if shutil.which("chromium") is None and not os.path.exists("/usr/bin/chromium"):
        pytest.skip("no chromium here (tests/test_compare.py installs it where it can)")
    page = tmp_path / "maps.html"
    assert _report("compare", searched, failing, "--html", str(page)).returncode == 0
    text = page.read_text()
    dom = rendered(text, tmp_path)
    images = json.loads(dom.probe)
    assert [i[0] for i in images] == ["maps", "difference"], images
    assert all(complete and width > 0 for _id, complete, width, *_ in images), images
    assert ["untrained fails where mass passes", "body_mass_scale [0.5, 1.125]"] in dom.rows, dom.rows


def test_two_maps_of_two_axes_compare_on_a_page(untrained, tmp_path):
    out = str(tmp_path / "pushed")
    run = in_process("--checkpoint", untrained, *ARGS[2:], "--search", "body_mass_scale=0.5:3.0", "--search",
                     "push=0:10", "--fail-below", "45", "--max-episodes", "32", "--out", out)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    page = tmp_path / "maps.html"
    shown = _report("compare", out, out, "--html", str(page))
    assert shown.returncode == 0, shown.stderr
    text = page.read_text()
    assert len(re.findall(r'<img id="(maps|difference)"[^>]* src="data:image/png;base64,', text)) == 2
    assert text.count("<td>nowhere the maps decided</td>") == 2  # a map against itself differs nowhere


def test_the_two_maps_page_escapes_the_runs_names(failing, tmp_path):
    hostile = tmp_path / "<i>b"
    shutil.copytree(failing, hostile)
    page = tmp_path / "maps.html"
    assert _report("compare", failing, str(hostile), "--html", str(page)).returncode == 0
    text = page.read_text()
    assert "<i>" not in text and "<title>simeval: failure maps compared: untrained and &lt;i&gt;b</title>" in text
    assert "<td>&lt;i&gt;b fails where untrained passes</td>" in text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "is no --search run but {a} is: compare two --search runs or two of neither."),
        (
            ["--search", "body_mass_scale=0.5:2.0", "--fail-below", "45", "--max-episodes", "8"],
            "the two searches map other ranges: compare searches of the same --search ranges.",
        ),
    ],
)
def test_a_search_compared_with_an_unlike_run_is_one_line_and_no_page(flags, message, searched, untrained, tmp_path):
    other = str(tmp_path / "other")
    run = in_process("--checkpoint", untrained, *ARGS[2:], *flags, "--out", other)
    assert run.returncode == 0, run.stderr[-3000:]
    page = tmp_path / "maps.html"
    for a, b in ((searched, other), (other, searched)):
        shown = _report("compare", a, b, "--html", str(page))
        assert shown.returncode == 2 and not shown.stdout
        assert message.format(a=searched) in shown.stderr and len(shown.stderr.strip().splitlines()) == 1, shown.stderr
    assert not page.exists()


@pytest.mark.parametrize("flag", [["--json"], ["--step-a", "1"], ["--margin", "5"], ["--alpha", "0.1"]])
def test_a_flag_of_cells_comparisons_given_with_two_searches_is_one_line(flag, searched, failing):
    shown = _report("compare", failing, searched, *flag)
    assert shown.returncode == 2 and not shown.stdout
    assert f"{flag[0]} is for runs of cells: two --search runs compare their maps as recorded" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr


def test_a_suite_task_s_search_block_is_the_flags_search_after_the_suite_s_cells(searched, tmp_path):
    from test_suite_search import SUITE

    suite, out = tmp_path / "suite.yaml", str(tmp_path / "suite-out")
    suite.write_text(SUITE)  # the fixture's search as a block: HalfCheetah-v5, 8 envs, 40 steps, seed 0, 160 episodes
    run = in_process("--checkpoint", FINAL, "--suite", str(suite), "--out", out)
    assert run.returncode == 0, run.stderr[-3000:]
    path = os.path.join(out, "search", "HalfCheetah-v5")
    assert f"task HalfCheetah-v5: search into {path}/results.jsonl" in run.stdout
    cells = _lines(out)
    assert [(c["task"], c["condition"], c["status"]) for c in cells] == [("HalfCheetah-v5", "nominal", "ok")]
    rounds, theirs = _lines(path), _lines(searched)
    same = ("region", "round", "seed", "episode_returns", "episode_conditions", "search", "env", "map", "stop")
    assert [{k: r.get(k) for k in same} for r in rounds] == [{k: r.get(k) for k in same} for r in theirs]
    again = in_process("--checkpoint", FINAL, "--suite", str(suite), "--out", out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {len(rounds)} round(s) already in {path}/results.jsonl" in again.stdout
    assert _lines(path) == rounds and len(_lines(out)) == 1


def test_the_python_api_runs_the_flags_search_and_replays_its_worst_failure_exactly(searched, tmp_path):
    from simeval.launch.api import replay, search
    from simeval.launch.config import ConfigError

    out = str(tmp_path / "api")
    shutil.copytree(searched, out)
    found = search(FINAL, "HalfCheetah-v5", {"body_mass_scale": (0.5, 3.0)}, out=out, max_episodes=160,
                   fail_below=45.0, num_envs=8, max_steps=40, seed=0)  # fmt: skip
    assert found.lines == _lines(searched)  # the same search: the copy resumed, nothing evaluated again
    assert found.map.as_data() == _lines(searched)[-1]["map"] and found.stop == _lines(searched)[-1]["stop"]
    (line, index, worst), (_, _, next_worst) = found.worst_failures(2)
    assert worst <= next_worst < 45
    again = replay(out, line, index)
    assert again["equal"] and again["recorded_return"] == worst == found.lines[line - 1]["episode_returns"][index]
    with pytest.raises(ConfigError, match="holds a line that is not a round of this search"):
        search(FINAL, "HalfCheetah-v5", {"body_mass_scale": (0.5, 2.0)}, out=out, max_episodes=160, fail_below=45.0,
               num_envs=8, max_steps=40, seed=0)  # fmt: skip
