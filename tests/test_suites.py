"""``--suite FILE``: cells, common random numbers, the nominal cell = a plain evaluation, restarts, errors."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from launch_helpers import cli, in_process, write_checkpoints

from simeval.conditions import Condition
from simeval.launch.config import ConfigError
from simeval.launch.suite import load_suite

SUITE = """\
name: small
episodes: 4
seed: 0
num_envs: 2
max_steps: 30
tasks:
  - env: HalfCheetah-v5
    reference: {low: -100, high: 100}
    conditions:
      nominal: {}
      obs-noise: {observation_noise: 0.3}
      delay-1: {action_delay: 1}
      heavy: {body_mass_scale: [1.2, 1.5]}
"""


@pytest.fixture(scope="module")
def suite_setup(tmp_path_factory):
    """A suite file, a checkpoint and a byte-identical copy of it under another name."""
    root = tmp_path_factory.mktemp("suite")
    (ck,) = write_checkpoints(str(root), steps=(1000,))
    twin = root / "twin" / "same_weights.pt"
    twin.parent.mkdir()
    shutil.copyfile(ck, twin)
    path = root / "small.yaml"
    path.write_text(SUITE)
    return root, str(path), ck, str(twin)


def _lines(out) -> list[dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f]


def _cells(out) -> dict[str, dict]:
    return {r["condition"]: r for r in _lines(out) if r["status"] == "ok"}


def _run(suite: str, ck: str, out, *extra: str, env: dict | None = None):
    args = ("--suite", suite, "--checkpoint", ck, "--out", str(out), *extra)
    proc = cli(*args, env=env) if env else in_process(*args)  # an environment of its own: a process of its own
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def first_run(suite_setup):
    root, suite, ck, _ = suite_setup
    out = root / "a"
    _run(suite, ck, out)
    return out


def test_every_cell_is_one_line_with_its_episodes_seeds_and_draws(first_run):
    cells = _cells(first_run)
    assert list(cells) == ["nominal", "obs-noise", "delay-1", "heavy"]
    for name, r in cells.items():
        assert r["suite"] == "small" and r["task"] == "HalfCheetah-v5" and r["condition"] == name
        assert len(r["episode_returns"]) == len(r["episode_seeds"]) == 4
        assert r["seed"] == 0 and r["num_envs"] == 2 and r["max_steps"] == 30
        assert r["reference"] == {"low": -100.0, "high": 100.0}
    assert cells["heavy"]["condition_settings"] == {"body_mass_scale": [1.2, 1.5]}
    drawn = cells["heavy"]["episode_conditions"]["body_mass_scale"]
    condition = Condition.parse({"body_mass_scale": [1.2, 1.5]})
    expected = [condition.draw(s)["body_mass_scale"] for s in cells["heavy"]["episode_seeds"]]
    assert drawn == pytest.approx(expected) and all(1.2 <= d <= 1.5 for d in drawn)
    assert "episode_conditions" not in cells["obs-noise"]  # a fixed value is no draw
    # every cell sees the same episodes (seeds); the conditions change what happens in them
    assert all(r["episode_seeds"] == cells["nominal"]["episode_seeds"] for r in cells.values())
    assert cells["obs-noise"]["episode_returns"] != cells["nominal"]["episode_returns"]
    assert cells["delay-1"]["episode_returns"] != cells["nominal"]["episode_returns"]


def test_identical_checkpoints_get_identical_episodes_in_every_cell(suite_setup, first_run, tmp_path):
    _, suite, _, twin = suite_setup
    _run(suite, twin, tmp_path)
    a, b = _cells(first_run), _cells(tmp_path)
    for name in a:
        assert b[name]["episode_returns"] == a[name]["episode_returns"], name
        assert b[name]["episode_seeds"] == a[name]["episode_seeds"]
        assert b[name].get("episode_conditions") == a[name].get("episode_conditions")


def test_the_nominal_cell_is_a_plain_evaluation_with_the_same_settings(suite_setup, first_run, tmp_path):
    _, _, ck, _ = suite_setup
    proc = cli(
        "--checkpoint", ck, "--out", str(tmp_path), "--num-envs", "2", "--episodes", "4", "--max-steps", "30",
        "--seed", "0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (plain,) = _lines(tmp_path)
    nominal = _cells(first_run)["nominal"]
    assert plain["episode_returns"] == nominal["episode_returns"]
    assert plain["episode_seeds"] == nominal["episode_seeds"]


@pytest.mark.parametrize("backend", ["process", "ray"], indirect=True)
def test_other_backends_and_workers_give_the_same_cells(backend, suite_setup, first_run, tmp_path):
    import ray

    _, suite, ck, _ = suite_setup
    extra, env = ["--backend", backend], {}
    if backend == "ray":
        extra += ["--workers", "2"]
        env = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    _run(suite, ck, tmp_path, *extra, env=env)
    a, b = _cells(first_run), _cells(tmp_path)
    assert set(b) == set(a)
    for name in a:
        assert b[name]["episode_returns"] == pytest.approx(a[name]["episode_returns"], rel=1e-6), name
        assert b[name]["backend"] == backend


def test_a_restart_evaluates_only_the_missing_cells(suite_setup, first_run, tmp_path):
    _, suite, ck, _ = suite_setup
    shutil.copytree(first_run, tmp_path / "out")
    path = tmp_path / "out" / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][:40])  # two cells done, a crash mid-write of the third
    proc = _run(suite, ck, tmp_path / "out")
    assert "resuming: 2 cell evaluation(s)" in proc.stdout
    again = _lines(tmp_path / "out")
    assert [r["condition"] for r in again] == ["nominal", "obs-noise", "delay-1", "heavy"]
    assert again[2]["episode_returns"] == _cells(first_run)["delay-1"]["episode_returns"]
    proc = _run(suite, ck, tmp_path / "out")
    assert len(_lines(tmp_path / "out")) == 4  # nothing twice


@pytest.mark.parametrize(
    "text, words",
    [
        ("name: x\ntasks: []\n", "tasks: a non-empty list"),
        ("name: x\ntasks:\n  - env: HalfCheetah-v5\n    conditions: {a: {observation_noise: -1}}\n",
         "tasks[0].conditions.a.observation_noise: observation_noise must be >= 0"),
        ("name: x\nepisode: 3\ntasks:\n  - env: HalfCheetah-v5\n", "episode: unknown field"),
        ("name: x\ntasks:\n  - env: HalfCheetah-v5\n    num_envs: 0\n", "tasks[0].num_envs: a whole number >= 1"),
        ("name: x\ntasks:\n  - env: HalfCheetah-v5\n  - env: HalfCheetah-v5\n", "listed twice"),
        ("name: x\ntasks:\n  - env: HalfCheetah-v5\n    reference: {low: 1}\n", "tasks[0].reference"),
        ("tasks: [\n", "not valid YAML"),
        ("name: x\ntasks:\n  - env: isaaclab:Simeval-Isaac-Cartpole\n    conditions:\n"
         "      evil: {cfg: {events.add_pole_mass.func: 'os:system'}}\n",
         "tasks[0].conditions.evil.cfg.events.add_pole_mass.func: 'func' names a callable"),
        ("name: x\ntasks:\n  - env: mjlab:Mjlab-Velocity-Flat-Unitree-Go1\n    conditions:\n"
         "      evil: {cfg: {rewards.track.weight: 'lambda env: 0'}}\n",
         "tasks[0].conditions.evil.cfg.rewards.track.weight: 'lambda env: 0' names a callable (module:attr) or is"),
        ("name: x\ntasks:\n  - env: HalfCheetah-v5\n    conditions: {heavy: {cfg: {body_mass: 2.0}}}\n",
         "tasks[0].conditions.heavy.cfg: cfg overrides apply to Isaac Lab and mjlab tasks only"),
        ("name: x\ntasks:\n  - env: Swimmer-v5\n    conditions: {heavy: {body_mass_scale: 1.5}}\n",
         "tasks[0].conditions.heavy: body_mass_scale set model physics, which only native MuJoCo changes; "
         "Swimmer-v5 is built on the gymnasium backend: native MuJoCo runs HalfCheetah-v5, Hopper-v5"),
        ("name: x\ntasks:\n  - env: mjlab:Mjlab-Velocity-Flat-Unitree-Go1\n"
         "    conditions: {ice: {friction_scale: 0.2}}\n",
         "tasks[0].conditions.ice: friction_scale set model physics directly; on mjlab:"),
    ],
)  # fmt: skip
def test_a_bad_suite_file_is_one_line_naming_the_file_and_the_field(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_suite(str(path))
    message = str(err.value)
    assert message.startswith(str(path)) and words in message and "\n" not in message


def test_the_cli_refuses_a_bad_suite_and_flags_the_file_sets(suite_setup, tmp_path):
    _, suite, ck, _ = suite_setup
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntasks:\n  - env: HalfCheetah-v5\n    conditions: {slow: {gravity: [1, 0]}}\n")
    proc = in_process("--suite", str(bad), "--checkpoint", ck, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1].endswith("tasks[0].conditions.slow.gravity: range [1, 0] has low > high.")
    )
    proc = in_process("--suite", suite, "--checkpoint", ck, "--episodes", "3", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "--episodes" in proc.stderr.strip().splitlines()[-1]
    proc = in_process("--suite", str(tmp_path / "none.yaml"), "--checkpoint", ck, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_a_condition_the_chosen_env_backend_cannot_apply_is_refused_before_any_cell_runs(suite_setup, tmp_path):
    _, suite, ck, _ = suite_setup
    out = tmp_path / "o"
    proc = in_process("--suite", suite, "--checkpoint", ck, "--env-backend", "gymnasium", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "conditions.heavy: body_mass_scale set model physics, which only native MuJoCo changes" in last
    assert "built on the gymnasium backend: use backend='native'" in last
    assert "evaluating" not in proc.stdout and not (out / "results.jsonl").exists()


def test_the_shipped_suite_parses():
    suite = load_suite(os.path.join(os.path.dirname(__file__), os.pardir, "suites", "halfcheetah-robustness.yaml"))
    assert suite.name == "halfcheetah-robustness"
    assert [c.condition_name for c in suite.cells()][0] == "nominal"
