"""One pipeline: a plain run (--checkpoint, --watch) is a run of one nominal cell, a suite run one of its cells.

The same checkpoint evaluated all three ways gets lines with the same checkpoint
fields, the same run fields and, on the nominal cell with the same settings, the
same numbers; only a suite's cell fields and a plain run's plan differ.
"""

from __future__ import annotations

from launch_helpers import in_process, read_records, write_checkpoints

SETTINGS = {"episodes": 2, "num_envs": 2, "max_steps": 30, "seed": 0}
SUITE = """\
name: one-cell
episodes: 2
num_envs: 2
max_steps: 30
seed: 0
tasks:
  - env: HalfCheetah-v5
    conditions:
      nominal: {}
"""
CHECKPOINT_FIELDS = ("checkpoint", "checkpoint_name", "checkpoint_sha256", "checkpoint_format")
RUN_FIELDS = ("status", "step", "attempts", "backend", "env", "env_backend")
CELL_FIELDS = {"suite", "task", "condition", "condition_settings", "seed", "num_envs", "max_steps"}


def test_plain_watch_and_suite_lines_carry_the_same_fields_for_the_same_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (path,) = write_checkpoints(str(ckpt), steps=(1000,))
    (ckpt / "DONE").write_text("")
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SETTINGS.items()]
    runs = {
        "checkpoint": ["--checkpoint", path, *flags],
        "watch": ["--watch", str(ckpt), *flags],
        "suite": ["--suite", str(suite), "--checkpoint", path],
    }
    lines = {}
    for kind, args in runs.items():
        out = tmp_path / kind
        proc = in_process(*args, "--out", str(out))
        assert proc.returncode == 0, proc.stderr[-2000:]
        (lines[kind],) = read_records(out)

    plain, watch, cell = lines["checkpoint"], lines["watch"], lines["suite"]
    for field in CHECKPOINT_FIELDS + RUN_FIELDS:
        assert plain[field] == watch[field] == cell[field], field
    assert plain["status"] == "ok" and plain["attempts"] == 1
    assert set(plain) == set(watch)
    assert set(cell) - set(plain) == {
        "suite",
        "task",
        "condition",
        "condition_settings",
        "seed",
        "num_envs",
        "max_steps",
    }
    assert set(plain) - set(cell) == {"plan"}  # a plain run holds one plan; a suite's cells each have theirs
    for record in lines.values():
        assert record["episode_returns"] == plain["episode_returns"]
        assert record["metrics"]["reward"] == plain["metrics"]["reward"]
