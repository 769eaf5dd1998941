"""A suite on the real Isaac Lab 3.0 (kit-less, Newton) through the launcher: ``--suite`` and ``report compare``.

The suite has the offline direct cartpole under three conditions (nominal,
observation noise, an action delay drawn per episode from 0 to 4 steps) and the
offline manager-based cartpole under two (nominal, a pole three times as heavy:
a config override of its ``events.add_pole_mass`` term). One episode per
sub-env (``episodes == num_envs``): on Isaac Lab, which resets sub-envs inside
its step from its own generator, that is where common random numbers hold.
Three launcher runs, one Isaac Lab process each: rsl_rl's cartpole run at
iterations 50 and 149, and a byte-identical copy of 149 under another name;
then one plain ``--checkpoint`` run and ``report compare``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RUN = os.path.join(REPO, "simeval", "data", "isaaclab_cartpole_rsl_rl")
DIRECT, MANAGER = "isaaclab:Simeval-Isaac-Cartpole-Direct", "isaaclab:Simeval-Isaac-Cartpole"
SEED, EPISODES, MAX_STEPS = 0, 8, 50
SUITE = f"""\
name: cartpole-robustness
seed: {SEED}
episodes: {EPISODES}
num_envs: {EPISODES}
max_steps: {MAX_STEPS}
tasks:
  - env: {DIRECT}
    conditions:
      nominal: {{}}
      obs-noise: {{observation_noise: 0.3}}
      delay: {{action_delay: [0, 4]}}
  - env: {MANAGER}
    conditions:
      nominal: {{}}
      pole-mass: {{cfg: {{events.add_pole_mass.params.mass_distribution_params: [3.0, 3.0]}}}}
"""
CELLS = {(DIRECT, "nominal"), (DIRECT, "obs-noise"), (DIRECT, "delay"), (MANAGER, "nominal"), (MANAGER, "pole-mass")}

pytestmark = [pytest.mark.required, pytest.mark.timeout(1500)]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=420, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _cells(out) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {(r["task"], r["condition"]): r for r in rows}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("isaaclab_suite")
    suite = tmp / "cartpole.yaml"
    suite.write_text(SUITE)
    copy = tmp / "copy" / "model_149_copy.pt"
    copy.parent.mkdir()
    shutil.copyfile(os.path.join(RUN, "model_149.pt"), copy)
    out = {}
    for label, checkpoint in (
        ("a", os.path.join(RUN, "model_50.pt")),
        ("b", os.path.join(RUN, "model_149.pt")),
        ("copy", str(copy)),
    ):
        _run("simeval.launch", "--suite", str(suite), "--checkpoint", checkpoint, "--out", str(tmp / label))
        out[label] = _cells(tmp / label)
    plain = tmp / "plain"
    _run(
        "simeval.launch", "--checkpoint", os.path.join(RUN, "model_149.pt"), "--env", DIRECT,
        "--episodes", str(EPISODES), "--num-envs", str(EPISODES), "--max-steps", str(MAX_STEPS),
        "--seed", str(SEED), "--out", str(plain),
    )  # fmt: skip
    out["plain"] = [json.loads(line) for line in (plain / "results.jsonl").read_text().splitlines()][-1]
    proc = _run("simeval.launch.report", "compare", str(tmp / "a"), str(tmp / "b"), "--json")
    out["compare"] = json.loads(proc.stdout)
    return out


def test_every_cell_runs_on_the_same_episode_seeds(runs):
    from simeval.conditions import episode_seed, round_seed

    want = [episode_seed(round_seed(SEED), i, 0) for i in range(EPISODES)]
    for label in ("a", "b", "copy"):
        assert set(runs[label]) == CELLS
        for cell, record in runs[label].items():
            assert record["status"] == "ok", (label, cell)
            assert sorted(record["episode_seeds"]) == sorted(want), (label, cell)


def test_the_nominal_cell_is_the_plain_run(runs):
    nominal, plain = runs["b"][(DIRECT, "nominal")], runs["plain"]
    assert nominal["episode_seeds"] == plain["episode_seeds"]
    assert nominal["episode_returns"] == plain["episode_returns"]


def test_identical_checkpoints_score_identically_episode_by_episode_in_every_cell(runs):
    for cell in CELLS:
        b, copy = runs["b"][cell], runs["copy"][cell]
        assert copy["checkpoint_name"] == "model_149_copy.pt"
        assert copy["episode_seeds"] == b["episode_seeds"]
        assert copy["episode_returns"] == b["episode_returns"], cell


def test_the_conditions_change_the_episodes_they_apply_to(runs):
    from simeval.conditions import Condition

    cells = runs["b"]
    base = cells[(DIRECT, "nominal")]
    nominal = dict(zip(base["episode_seeds"], base["episode_returns"], strict=True))
    noisy = cells[(DIRECT, "obs-noise")]
    assert all(r != nominal[s] for s, r in zip(noisy["episode_seeds"], noisy["episode_returns"], strict=True))
    delay = cells[(DIRECT, "delay")]
    drawn = delay["episode_conditions"]["action_delay"]
    condition = Condition.parse({"action_delay": [0, 4]})
    assert drawn == [condition.draw(s)["action_delay"] for s in delay["episode_seeds"]]
    assert 0 in drawn and max(drawn) > 0
    for seed, ret, steps in zip(delay["episode_seeds"], delay["episode_returns"], drawn, strict=True):
        # No delay: the nominal episode itself (same initial state); a delay: another episode.
        assert (ret == nominal[seed]) == (steps == 0), (seed, steps)
    heavy, light = cells[(MANAGER, "pole-mass")], cells[(MANAGER, "nominal")]
    assert heavy["condition_settings"] == {"cfg": {"events.add_pole_mass.params.mass_distribution_params": [3.0, 3.0]}}
    assert heavy["episode_seeds"] == light["episode_seeds"] and heavy["episode_returns"] != light["episode_returns"]


def test_compare_pairs_the_two_checkpoints_episode_by_episode(runs):
    rows = {(r["task"], r["condition"]): r for r in runs["compare"]}
    assert set(rows) == CELLS | {("*", "*")}
    for cell in CELLS:
        a, b = runs["a"][cell], runs["b"][cell]
        by_seed = dict(zip(a["episode_seeds"], a["episode_returns"], strict=True))
        diffs = [r - by_seed[s] for s, r in zip(b["episode_seeds"], b["episode_returns"], strict=True)]
        row = rows[cell]
        assert row["diff"] == pytest.approx(sum(diffs) / len(diffs), abs=1e-9)
        assert row["diff_ci_low"] <= row["diff"] <= row["diff_ci_high"]
        assert row["verdict"] in ("better", "worse", "inconclusive")


def test_until_decided_on_isaac_lab_pairs_every_look_and_refuses_looks_other_than_num_envs(tmp_path):
    """A tensor env whose sub-envs share one reset generator: each look is one episode per sub-env, all paired.

    Isaac Lab draws reset states in the order episodes end, so an adaptive run seeds a
    round per look (``look_seed``) and plays one episode per sub-env from it: A's and B's
    episodes of a look are the same, and no look repeats another's. A look of any other
    size is refused before Isaac Lab starts.
    """
    from simeval.conditions import episode_seed, look_seed
    from simeval.sequential import LookPlan

    n = 4
    suite = tmp_path / "adaptive.yaml"
    suite.write_text(f"name: a\nseed: {SEED}\nepisodes: {2 * n}\nnum_envs: {n}\nmax_steps: {MAX_STEPS}\n"
                     f"tasks:\n  - env: {DIRECT}\n")  # fmt: skip
    a, b = os.path.join(RUN, "model_50.pt"), os.path.join(RUN, "model_149.pt")
    flags = ["--suite", str(suite), "--checkpoint", b, "--baseline", a, "--until-decided"]
    refused = subprocess.run(
        [sys.executable, "-m", "simeval.launch", *flags, "--look-every", str(2 * n), "--out", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO,
    )  # fmt: skip
    assert refused.returncode == 2 and f"--look-every {2 * n} must equal the task's num_envs {n}" in refused.stderr
    out = tmp_path / "run"
    _run("simeval.launch", *flags, "--out", str(out))
    lines = {s: [json.loads(x) for x in (out / s / "results.jsonl").read_text().splitlines()] for s in "ab"}
    assert [r["look"] for r in lines["a"]] == [r["look"] for r in lines["b"]] == list(range(len(lines["a"])))
    for la, lb in zip(lines["a"], lines["b"], strict=True):
        want = [episode_seed(look_seed(SEED, la["look"]), i, 0) for i in range(n)]
        assert sorted(la["episode_seeds"]) == sorted(lb["episode_seeds"]) == sorted(want)
    plan = LookPlan.from_data(lines["a"][0]["sequential"])
    seq = plan.paired(None, "cell")
    for la, lb in zip(lines["a"], lines["b"], strict=True):
        order = [lb["episode_seeds"].index(s) for s in la["episode_seeds"]]
        seq.update(la["episode_returns"], [lb["episode_returns"][k] for k in order])
    assert lines["a"][-1]["stop"] == lines["b"][-1]["stop"] == plan.stop(seq)  # the files replay the live stop
