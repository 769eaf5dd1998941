"""The disk a `make test` needs: each venv build checks the free disk first (tools/need-disk), and with
``PRUNE_VENVS=1`` (CI's) each simulator's venv and the core-only venv are removed once their tests passed.

Checked with ``make -n`` (prints the commands, runs none) and tools/need-disk run for real on this disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.required

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# make's target -> the venv its tests run in (or, for the core-only install, give their commands to)
LANES = {
    "test-core-install": ".venv-core",
    "test-isaaclab": ".venv-isaaclab",
    "test-mjlab": ".venv-mjlab",
    "test-maniskill": ".venv-maniskill",
    "test-lerobot": ".venv-lerobot",
}


def _dry_run(*args: str) -> subprocess.CompletedProcess:
    make = shutil.which("make")
    assert make, "make is not installed"
    env = {k: v for k, v in os.environ.items() if k not in ("PRUNE_VENVS", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run([make, "-n", "-C", REPO, *args], env=env, capture_output=True, text=True, timeout=60)


def _after_pytest(stdout: str) -> dict[str, str]:
    """For each lane, the command that follows its pytest command."""
    commands = stdout.replace("\\\n", " ").splitlines()
    out = {}
    for target, venv in LANES.items():
        lane = target.removeprefix("test-")
        runs = [i for i, c in enumerate(commands) if f"tools/lane-time run {lane} " in c and " -m pytest " in c]
        assert len(runs) == 1, (target, commands)
        out[venv] = commands[runs[0] + 1] if runs[0] + 1 < len(commands) else ""
    return out


def test_with_prune_venvs_each_lanes_venv_is_removed_right_after_its_tests():
    proc = _dry_run("PRUNE_VENVS=1", *LANES)
    assert proc.returncode == 0, proc.stderr
    assert _after_pytest(proc.stdout) == {venv: f"rm -rf {venv}" for venv in LANES.values()}


def test_without_it_every_venv_is_kept_for_the_next_run():
    proc = _dry_run(*LANES)
    assert proc.returncode == 0, proc.stderr
    assert not any(after.startswith("rm -rf") for after in _after_pytest(proc.stdout).values()), proc.stdout


def test_prune_venvs_takes_0_or_1_only():
    proc = _dry_run("PRUNE_VENVS=yes", "test-lerobot")
    assert proc.returncode == 2 and "PRUNE_VENVS must be 0 or 1, got 'yes'" in proc.stderr, proc.stderr


def test_ci_prunes():
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        assert "\nexport PRUNE_VENVS=1\n" in f.read()


def _need_disk(gib: str, what: str) -> subprocess.CompletedProcess:
    tool = os.path.join(REPO, "tools", "need-disk")
    return subprocess.run([tool, gib, what], cwd=REPO, capture_output=True, text=True, timeout=30)


def test_need_disk_prints_the_free_disk_and_passes_when_it_suffices():
    proc = _need_disk("0", ".venv-x")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("disk: ") and "free here before .venv-x (needs about 0 GiB)" in proc.stdout


def test_need_disk_stops_with_one_line_naming_the_venv_when_the_disk_is_short():
    proc = _need_disk("1000000", ".venv-x")  # a million GiB: more than any disk here
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("make: .venv-x needs about 1000000 GiB of disk, ") and "make clean" in line, line
