"""Adaptive evaluation (``--until-decided``, ``--until-precise``): looks on look seeds, lines, replay, resume, errors.

Real runs of the shipped HalfCheetah PPO run's first and final checkpoints on a two-cell suite of
50-step episodes: ``nominal``, where the final checkpoint is far better (decided at the first look),
and ``noisy`` (observation noise 3.0), where the two are close (it runs to its budget).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from launch_helpers import cli, in_process

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.conditions import LOOK_STRIDE, episode_seed, look_seed
from simeval.launch.cli import parse
from simeval.launch.config import ConfigError
from simeval.launch.suite import load_suite
from simeval.sequential import LookPlan

A = os.path.join(SHIPPED_RUN, "step_000126976.pt")  # the first checkpoint
B = os.path.join(SHIPPED_RUN, "step_001001472.pt")  # the final one

SUITE = """\
name: adaptive
episodes: 16
seed: 0
num_envs: 4
max_steps: 50
tasks:
  - env: HalfCheetah-v5
    conditions:
      nominal: {}
      noisy: {observation_noise: 3.0}
"""
DECIDED = ("--look-every", "8")  # two episodes per sub-env: the nominal cell is decided at its first look
ONE = ("--suite", "s.yaml", "--checkpoint", B)  # the flags every error case below starts with


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("adaptive") / "suite.yaml"
    path.write_text(SUITE)
    return str(path)


def _run(*args: str, env: dict | None = None):
    proc = cli(*args, env=env) if env else in_process(*args)  # an environment of its own: a process of its own
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _decided(suite: str, out, *extra: str, env: dict | None = None):
    return _run("--suite", suite, "--checkpoint", B, "--baseline", A, "--until-decided", *DECIDED,
                "--out", str(out), *extra, env=env)  # fmt: skip


def _lines(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _looks(out, side: str) -> dict[tuple[str, int], dict]:
    """(condition, look) -> the newest line of that look in OUT/<side>/results.jsonl."""
    return {(r["condition"], r["look"]): r for r in _lines(os.path.join(out, side, "results.jsonl"))}


@pytest.fixture(scope="module")
def decided(suite, tmp_path_factory):
    out = tmp_path_factory.mktemp("decided") / "out"
    return out, _decided(suite, out)


def test_a_large_effect_cell_stops_at_its_first_look_and_the_other_runs_to_its_budget(decided):
    out, proc = decided
    a, b = _looks(out, "a"), _looks(out, "b")
    assert sorted(a) == sorted(b) == [("noisy", 0), ("noisy", 1), ("nominal", 0)]
    assert a[("nominal", 0)]["stop"] == b[("nominal", 0)]["stop"] == "decided"
    assert a[("noisy", 1)]["stop"] == b[("noisy", 1)]["stop"] == "budget"
    assert "stop" not in a[("noisy", 0)] and "stop" not in b[("noisy", 0)]
    plan = {"rule": "until-decided", "alpha": 0.05, "rows": 2, "look_every": 8, "max_episodes": 16, "margin": 0.0,
            "precision": 0.0, "relative": False, "design": "anytime"}  # fmt: skip
    for (condition, look), line in [*a.items(), *b.items()]:
        assert line["status"] == "ok" and line["look"] == look and line["sequential"] == plan
        assert line["suite"] == "adaptive" and line["condition"] == condition and "bounds" not in line
        assert len(line["episode_returns"]) == line["metrics"]["num_episodes"] == 8
    assert {r["checkpoint_sha256"] for r in a.values()} != {r["checkpoint_sha256"] for r in b.values()}
    assert "look 0 HalfCheetah-v5 / nominal: 8 episodes each" in proc.stdout
    assert "episodes used: 48 of the 64 a fixed run evaluates" in proc.stdout


def test_each_look_is_one_round_on_its_own_seed_in_sub_env_order_for_both_checkpoints(decided):
    out, _ = decided
    a, b = _looks(out, "a"), _looks(out, "b")
    seen: set[int] = set()
    for (condition, look), line in a.items():
        seed = look_seed(0, look)
        assert line["seed"] == b[(condition, look)]["seed"] == seed and line["num_envs"] == 4
        # quotas of 2 per sub-env; the round's order is (sub-env, ordinal): sub-env first, not the order episodes end
        expected = [episode_seed(seed, i, k) for i in range(4) for k in range(2)]
        assert line["episode_seeds"] == b[(condition, look)]["episode_seeds"] == expected
        if condition == "noisy":
            assert not seen & set(expected)  # no episode seed repeats across looks
            seen |= set(expected)
    # the cells of a task share each look's episodes (common random numbers across conditions too)
    assert a[("nominal", 0)]["episode_seeds"] == a[("noisy", 0)]["episode_seeds"]


def _printed(stdout: str) -> dict[str, tuple[str, str, str, str]]:
    """Cell -> (verdict, diff, low, high) as the final table prints them."""
    rows = re.findall(r"^(HalfCheetah-v5 / \S+)\s+(\w+)\s+(\S+) \[(\S+), (\S+)\]", stdout, re.M)
    return {cell: tuple(rest) for cell, *rest in rows}


def test_replaying_the_lines_with_the_look_plan_reproduces_the_printed_verdicts(decided):
    out, proc = decided
    a, b = _looks(out, "a"), _looks(out, "b")
    printed = _printed(proc.stdout)
    for condition in ("nominal", "noisy"):
        seq, look = None, 0
        while (condition, look) in a:
            line_a, line_b = a[(condition, look)], b[(condition, look)]
            plan = LookPlan.from_data(line_a["sequential"])
            if seq is None:
                success = any(k in line_a for k in ("episode_success_once", "episode_success_at_end"))
                seq = plan.paired(None, f"HalfCheetah-v5 / {condition}", with_success=success)
            by_seed = dict(zip(line_b["episode_seeds"], line_b["episode_returns"], strict=True))
            seq.update(line_a["episode_returns"], [by_seed[s] for s in line_a["episode_seeds"]])
            assert plan.stop(seq) == line_a.get("stop") == line_b.get("stop")
            look += 1
        shown = (seq.verdict, f"{seq.diff:+.2f}", f"{seq.low:+.2f}", f"{seq.high:+.2f}")
        assert printed[f"HalfCheetah-v5 / {condition}"] == shown
    assert printed["HalfCheetah-v5 / nominal"][0] == "better"


def test_a_resume_evaluates_only_the_looks_missing_from_either_file(decided, suite, tmp_path):
    out, _ = decided
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = {side: _lines(copy / side / "results.jsonl") for side in "ab"}
    for side in "ab":  # the last look (noisy, look 1) lost from both files
        lines = (copy / side / "results.jsonl").read_text().splitlines(keepends=True)
        assert json.loads(lines[-1])["look"] == 1
        (copy / side / "results.jsonl").write_text("".join(lines[:-1]))
    proc = _decided(suite, copy)
    assert "resuming: 2 look(s) already in" in proc.stdout and "1 cell(s) stopped before" in proc.stdout
    progress = re.findall(r"^look \d .*$", proc.stdout, re.M)
    assert len(progress) == 1 and progress[0].startswith("look 1 HalfCheetah-v5 / noisy: 16 episodes each")
    journal = [json.loads(line) for line in (copy / "b" / "attempts.jsonl").read_text().splitlines()]
    assert [json.loads(e["key"])[1:] for e in journal if e["launch"] == 2] == [["HalfCheetah-v5", "noisy", 1]]
    after = {side: _lines(copy / side / "results.jsonl") for side in "ab"}
    for side in "ab":
        assert after[side][-1]["episode_returns"] == before[side][-1]["episode_returns"]
        assert after[side][-1]["stop"] == "budget"
    # a look found in one file only is evaluated again for both; the newest line of each look counts
    lines = (copy / "b" / "results.jsonl").read_text().splitlines(keepends=True)
    (copy / "b" / "results.jsonl").write_text("".join(lines[:-1]))
    proc = _decided(suite, copy)
    assert proc.stdout.count("look 1 HalfCheetah-v5 / noisy") == 1
    assert len(_lines(copy / "a" / "results.jsonl")) == 4 and len(_lines(copy / "b" / "results.jsonl")) == 3
    assert _looks(copy, "a")[("noisy", 1)]["episode_returns"] == before["a"][-1]["episode_returns"]
    proc = _decided(suite, copy)  # everything stopped: nothing is evaluated
    assert "resuming: 3 look(s)" in proc.stdout and not re.search(r"^look \d", proc.stdout, re.M)
    assert len(_lines(copy / "b" / "results.jsonl")) == 3
    # another plan (alpha) on the same directory is refused in one line
    proc = in_process("--suite", suite, "--checkpoint", B, "--baseline", A, "--until-decided", *DECIDED, "--alpha",
                      "0.1", "--out", str(copy))  # fmt: skip
    assert proc.returncode == 2
    assert "look 0 was evaluated with alpha 0.05 (now 0.1)" in proc.stderr.strip().splitlines()[-1]


def test_a_slot_keeps_one_evaluator_per_cell_across_its_looks_on_the_process_backend(
    decided, suite, tmp_path, monkeypatch
):
    """Each look's round is given its look seed, so the thread run's episodes come from one worker per cell."""
    from simeval.launch import app, session

    built = []
    make_evaluator = session.make_evaluator

    def counted(*args, **kwargs):
        built.append(kwargs["condition"])
        return make_evaluator(*args, **kwargs)

    monkeypatch.setattr(session, "make_evaluator", counted)
    for module in (app, session):  # the launcher's SIGTERM/SIGINT handlers: not in pytest's process
        monkeypatch.setattr(module, "install_stop_handlers", lambda stop: None)
    parsed = parse(["--suite", suite, "--checkpoint", B, "--baseline", A, "--until-decided", *DECIDED,
                    "--backend", "process", "--out", str(tmp_path)])  # fmt: skip
    assert app.run(parsed, str(tmp_path)) == 0
    assert len(built) == 2  # one per cell (nominal, noisy), not one per look (3) or per round (6)
    out, _ = decided
    for side in "ab":
        thread, process = _looks(out, side), _looks(tmp_path, side)
        assert sorted(process) == sorted(thread)
        for key, line in thread.items():
            for field in ("seed", "episode_seeds", "episode_returns", "episode_lengths", "stop"):
                assert process[key].get(field) == line.get(field), (side, key, field)
            assert process[key]["backend"] == "process"


@pytest.mark.ray
def test_two_ray_workers_see_the_episodes_one_thread_worker_sees(ray_cluster, decided, suite, tmp_path):
    out, _ = decided
    env = {"RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    _decided(suite, tmp_path, "--backend", "ray", "--workers", "2", env=env)
    for side in "ab":
        thread, ray = _looks(out, side), _looks(tmp_path, side)
        assert sorted(ray) == sorted(thread)
        for key, line in thread.items():
            assert ray[key]["episode_seeds"] == line["episode_seeds"], key
            assert ray[key]["episode_returns"] == pytest.approx(line["episode_returns"], rel=1e-6), key
            assert ray[key].get("stop") == line.get("stop") and ray[key]["backend"] == "ray"


def test_planned_looks_decide_as_their_replay_does_and_a_resume_keeps_the_design(suite, tmp_path):
    """--design planned: the lines record it, compare replays the group-sequential design to the printed verdicts,
    and a resume with the other design is refused in one line (the boundaries depend on the plan)."""
    proc = _decided(suite, tmp_path, "--design", "planned")
    assert "planned looks (group-sequential)" in proc.stdout
    a, b = _looks(tmp_path, "a"), _looks(tmp_path, "b")
    assert {line["sequential"]["design"] for line in [*a.values(), *b.values()]} == {"planned"}
    report = subprocess.run([sys.executable, "-m", "simeval.report", "compare", str(tmp_path / "a"),
                             str(tmp_path / "b"), "--json"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert report.returncode == 0, report.stderr
    rows = {r["condition"]: r for r in json.loads(report.stdout) if r["condition"] != "*"}
    printed = _printed(proc.stdout)
    for condition, row in rows.items():
        assert row["method"] == "group-sequential"
        shown = (row["verdict"], f"{row['diff']:+.2f}", f"{row['diff_ci_low']:+.2f}", f"{row['diff_ci_high']:+.2f}")
        assert printed[f"HalfCheetah-v5 / {condition}"] == shown
        assert row["stop"] == a[(condition, max(k for c, k in a if c == condition))]["stop"]
    assert rows["nominal"]["verdict"] == "better"
    proc = in_process("--suite", suite, "--checkpoint", B, "--baseline", A, "--until-decided", *DECIDED,
                      "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 2
    assert "design 'planned' (now 'anytime')" in proc.stderr.strip().splitlines()[-1]


def test_until_precise_stops_a_cell_when_precise_and_another_on_its_budget(suite, tmp_path):
    proc = _run("--suite", suite, "--checkpoint", B, "--until-precise", "40", "--max-episodes", "4",
                "--out", str(tmp_path))  # fmt: skip
    lines = {r["condition"]: r for r in _lines(tmp_path / "results.jsonl")}
    assert lines["nominal"]["stop"] == "precise" and lines["noisy"]["stop"] == "budget"
    for line in lines.values():
        assert line["look"] == 0 and line["seed"] == look_seed(0, 0) and len(line["episode_returns"]) == 4
        assert line["sequential"]["rule"] == "until-precise" and line["sequential"]["precision"] == 40.0
        assert not line["sequential"]["relative"] and line["sequential"]["look_every"] == 4  # the task's num_envs
    plan = LookPlan.from_data(lines["nominal"]["sequential"])
    seq = plan.mean(None, "HalfCheetah-v5 / nominal").update(lines["nominal"]["episode_returns"])
    assert seq.half_width <= 40 < plan.mean(None, "x").update(lines["noisy"]["episode_returns"]).half_width
    assert f"{seq.mean:.2f} [{seq.low:+.2f}, {seq.high:+.2f}]" in proc.stdout
    assert not (tmp_path / "a").exists()


def test_bounds_too_tight_fail_the_cell_in_one_line_naming_it_and_the_episode(tmp_path):
    path = tmp_path / "tight.yaml"
    one_cell = SUITE.replace("      noisy: {observation_noise: 3.0}\n", "")
    path.write_text(one_cell.replace("tasks:", "bounds: {low: -100, high: 50}\ntasks:"))
    proc = _run("--suite", str(path), "--checkpoint", B, "--until-precise", "5%", "--out", str(tmp_path / "p"))
    (line,) = _lines(tmp_path / "p" / "results.jsonl")
    assert line["status"] == "failed" and line["error_kind"] == "evaluation" and line["look"] == 0
    assert line["bounds"] == {"low": -100.0, "high": 50.0}
    assert re.fullmatch(
        r"HalfCheetah-v5 / nominal: episode \d returned [\d.]+, outside the declared bounds \[-100.0, 50.0\]: "
        r"fix the bounds \(values are never clipped\)\.",
        line["error"],
    )
    assert f"failed: {line['error']}" in proc.stdout
    proc = _run("--suite", str(path), "--checkpoint", B, "--until-precise", "5%", "--out", str(tmp_path / "p"))
    assert "1 left as failed" in proc.stdout and not re.search(r"^look \d", proc.stdout, re.M)  # not retried
    assert len(_lines(tmp_path / "p" / "results.jsonl")) == 1
    # a fixed-n suite run fails the cell the same way, and records loose bounds on its ok lines
    _run("--suite", str(path), "--checkpoint", B, "--out", str(tmp_path / "f"))
    (line,) = _lines(tmp_path / "f" / "results.jsonl")
    assert line["status"] == "failed" and line["error"].startswith("HalfCheetah-v5 / nominal: episode 0 returned ")
    path.write_text(path.read_text().replace("high: 50", "high: 5000"))
    _run("--suite", str(path), "--checkpoint", B, "--out", str(tmp_path / "g"))
    (line,) = _lines(tmp_path / "g" / "results.jsonl")
    assert line["status"] == "ok" and line["bounds"] == {"low": -100.0, "high": 5000.0}


@pytest.mark.parametrize(
    "argv, words",
    [
        ([*ONE, "--until-decided"], "--until-decided needs --baseline A and --suite"),
        (["--checkpoint", B, "--baseline", A, "--until-decided"], "--until-decided needs --baseline A and --suite"),
        ([*ONE, "--baseline", A], "--baseline is the checkpoint A of --until-decided"),
        ([*ONE, "--baseline", A, "--until-precise", "5"],
         "--until-precise evaluates one checkpoint"),
        ([*ONE, "--baseline", A, "--until-decided", "--until-precise", "5"],
         "give --until-decided (B against A) or --until-precise"),
        (["--suite", "s.yaml", "--watch", SHIPPED_RUN, "--baseline", A, "--until-decided"],
         "--until-decided evaluates the checkpoint --checkpoint names, not --watch"),
        (["--suite", "s.yaml", "--baseline", A, "--until-decided"], "--until-decided needs --checkpoint FILE"),
        ([*ONE, "--until-precise", "5", "--look-every", "0"],
         "--look-every must be >= 1, got 0"),
        ([*ONE, "--until-precise", "5", "--look-every", "8", "--max-episodes", "4"],
         "--max-episodes 4 < --look-every 8"),
        ([*ONE, "--until-precise", "wide"], "--until-precise: a half-width > 0"),
        ([*ONE, "--until-precise=-5%"], "--until-precise: a half-width > 0"),
        ([*ONE, "--until-precise", "5", "--margin", "1"], "--margin is --until-decided"),
        ([*ONE, "--look-every", "4"], "--look-every set the looks of"),
        ([*ONE, "--baseline", A, "--until-decided", "--alpha", "1.5"],
         "--alpha must be in (0, 1)"),
        ([*ONE, "--until-precise", "5", "--time-budget", "10"],
         "--until-precise sizes its rounds in looks"),
        ([*ONE, "--design", "planned"], "--design set the looks of"),
        ([*ONE, "--baseline", A, "--until-decided", "--design", "fast"],
         "unknown design 'fast': choose one of anytime, planned"),
    ],
)  # fmt: skip
def test_adaptive_flag_errors_are_one_line(argv, words):
    with pytest.raises(ConfigError) as err:
        parse(argv)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_until_precise_takes_a_width_or_a_percentage():
    assert parse([*ONE, "--until-precise", "5%"]).cfg.precision == (0.05, True)
    assert parse([*ONE, "--until-precise", "2.5"]).cfg.precision == (2.5, False)


def test_looks_are_whole_waves_and_one_wave_where_resets_share_a_generator(tmp_path):
    from simeval.launch.adaptive import look_plans
    from simeval.launch.suite_run import SuiteCell

    def plans(text: str, *flags: str):
        path = tmp_path / "s.yaml"
        path.write_text(text)
        suite = load_suite(str(path))
        cfg = parse(["--suite", str(path), "--checkpoint", B, "--until-precise", "5", *flags]).cfg
        return look_plans(cfg, [SuiteCell(c, suite.name) for c in suite.cells()])

    (plan,) = plans(SUITE).values()  # the defaults: one wave of the task's sub-envs, the suite's episodes
    assert (plan.look_every, plan.max_episodes, plan.rows) == (4, 16, 2)
    (plan,) = plans(SUITE, "--look-every", "2").values()  # half a wave: allowed off Isaac Lab and mjlab, with a note
    assert (plan.look_every, plan.max_episodes) == (2, 16)
    with pytest.raises(ConfigError, match=r"the suite's episodes \(16\) is not a multiple of the look \(12 episodes\)"):
        plans(SUITE, "--look-every", "12")
    with pytest.raises(ConfigError, match=r"--max-episodes \(2\) < --look-every 4"):
        plans(SUITE, "--max-episodes", "2")
    isaac = "name: i\nnum_envs: 4\ntasks:\n  - env: isaaclab:Simeval-Isaac-Cartpole\n"
    assert next(iter(plans(isaac).values())).look_every == 4
    with pytest.raises(ConfigError, match=r"--look-every 8 must equal the task's num_envs 4: Isaac Lab draws reset"):
        plans(isaac, "--look-every", "8")


def test_look_seeds_never_repeat_and_keep_looks_sub_env_generators_apart():
    seeds = [look_seed(7, look) for look in range(LOOK_STRIDE)]
    assert len(set(seeds)) == LOOK_STRIDE and all(s % LOOK_STRIDE == 0 and 0 <= s < 2**32 for s in seeds)
    assert seeds[:3] == [look_seed(7, look) for look in range(3)]  # the same on every call
    assert look_seed(8, 0) != look_seed(7, 0)
    with pytest.raises(ValueError):
        look_seed(7, LOOK_STRIDE)


@pytest.mark.parametrize(
    "text, words",
    [
        ("name: x\nbounds: {low: 1}\ntasks:\n  - env: HalfCheetah-v5\n", ": bounds: {low: <the least"),
        ("name: x\ntasks:\n  - env: HalfCheetah-v5\n    bounds: {low: 5, high: 5}\n",
         "tasks[0].bounds: low and high are two finite numbers with low < high"),
        ("name: x\ntasks:\n  - env: HalfCheetah-v5\n    bounds: [0, 1]\n", "tasks[0].bounds: {low:"),
    ],
)  # fmt: skip
def test_bad_bounds_are_one_line_naming_the_file_and_the_field(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_suite(str(path))
    assert str(err.value).startswith(str(path)) and words in str(err.value) and "\n" not in str(err.value)


def test_a_task_takes_the_suites_bounds_unless_it_declares_its_own(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: x\nbounds: {low: -10, high: 10}\ntasks:\n  - env: HalfCheetah-v5\n  - env: Hopper-v5\n"
        "    bounds: {low: 0, high: 3}\n  - env: Walker2d-v5\n    bounds: null\n"
    )
    assert [t.bounds for t in load_suite(str(path)).tasks] == [(-10.0, 10.0), (0.0, 3.0), None]
