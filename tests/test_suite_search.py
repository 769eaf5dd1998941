"""A suite task's ``search:`` block, as data: bad blocks are one line naming the file and the field, before anything
runs; a block maps one checkpoint. (The run of a block, the flags' search episode for episode: tests/test_search.py.)
"""

from __future__ import annotations

import json
import os

import pytest
from launch_helpers import cli

from simeval.checkpoints.shipped import SHIPPED_RUN
from simeval.launch.config import ConfigError
from simeval.launch.suite import load_suite

FINAL = os.path.join(SHIPPED_RUN, "step_001001472.pt")
SUITE = """\
name: heavier
num_envs: 8
max_steps: 40
seed: 0
episodes: 8
tasks:
  - env: HalfCheetah-v5
    conditions: {nominal: {}}
    search:
      ranges: {body_mass_scale: [0.5, 3.0]}
      fail_below: 45
      max_episodes: 160
"""


def _lines(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("search: {max_episodes: 64}", "tasks[0].search.ranges: one or two settings"),
        ("search: {ranges: {body_mass_scale: [3, 0.5]}, max_episodes: 64}",
         "tasks[0].search.ranges.body_mass_scale: [LOW, HIGH] with finite numbers LOW < HIGH"),
        ("search: {ranges: {wind: [0, 1]}, max_episodes: 64}", "tasks[0].search.ranges: unknown setting 'wind'"),
        ("search: {ranges: {body_mass_scale: [0.5, 3]}}", "tasks[0].search.max_episodes: the search's total"),
        ("search: {ranges: {body_mass_scale: [0.5, 3]}, max_episodes: 64, resolution: 9}",
         "tasks[0].search.resolution: a width in (0, 2.5]"),
        ("search: {ranges: {body_mass_scale: [0.5, 3]}, max_episodes: 64, resolution: {gravity: 1}}",
         "tasks[0].search.resolution.gravity: not a searched setting (body_mass_scale)"),
        ("search: {ranges: {body_mass_scale: [0.5, 3]}, max_episodes: 64, failure_rate: 1}",
         "tasks[0].search.failure_rate: a probability in (0, 1)"),
        ("search: {ranges: {body_mass_scale: [0.5, 3]}, max_episodes: 64, command: rm}",
         "tasks[0].search.command: unknown field"),
    ],
)  # fmt: skip
def test_a_bad_search_block_is_one_line_naming_its_field(block, message, tmp_path):
    path = _write(tmp_path, f"name: s\ntasks:\n  - env: HalfCheetah-v5\n    {block}\n")
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--watch", SHIPPED_RUN], "search: a search maps one checkpoint: give --checkpoint CK instead of --watch"),
        (["--watch", SHIPPED_RUN, "--select-best"], "search: a search runs in a plain suite run of one --checkpoint: "
         "leave --select-best out"),
    ],
)  # fmt: skip
def test_a_search_block_maps_one_checkpoint(flags, message, tmp_path):
    suite = _write(tmp_path, SUITE)
    run = cli(*flags, "--suite", suite, "--out", str(tmp_path / "x"))
    assert run.returncode == 2
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not os.path.exists(tmp_path / "x")


def test_a_task_with_only_a_search_has_no_cells(tmp_path):
    text = SUITE.replace("    conditions: {nominal: {}}\n", "")
    suite = load_suite(_write(tmp_path, text))
    assert suite.cells() == [] and suite.tasks[0].search.ranges == (("body_mass_scale", 0.5, 3.0),)
    assert suite.tasks[0].search.resolutions == (2.5 / 16,)
