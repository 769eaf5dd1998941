"""No silent skips: the rule of tests/conftest.py and the Makefile, checked on a throwaway test tree and `make -n`.

A skipped test is a failure under SIMEVAL_REQUIRE_ALL=1, which every pytest target of the Makefile sets unless
``ALLOW_SKIPS=1``; a simulator's lane (``--simulator=NAME``) is an error in a venv without that simulator; the
core suite leaves the simulator folders out and says so in one summary line.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.required

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# the lane (--simulator, make test-<lane>) -> (the package it needs, the folder of its tests)
SIMULATORS = {
    "isaaclab": ("isaaclab", "isaac_lab"),
    "mjlab": ("mjlab", "mj_lab"),
    "maniskill": ("mani_skill", "maniskill"),
}


@pytest.fixture
def tree(tmp_path):
    """tests/ with the real conftest.py, one passing and one skipping test, and a test in each simulator folder."""
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(os.path.join(HERE, "conftest.py"), tests / "conftest.py")
    (tests / "test_some.py").write_text(
        "import pytest\n\ndef test_runs():\n    pass\n\ndef test_skips():\n    pytest.skip('no such thing here')\n"
    )
    for _, folder in SIMULATORS.values():
        (tests / folder).mkdir()
        (tests / folder / f"test_{folder}.py").write_text("def test_in_the_simulator():\n    pass\n")
    return tmp_path


def _pytest(tree, *args: str, require_all: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SIMEVAL_REQUIRE_ALL"}
    if require_all is not None:
        env["SIMEVAL_REQUIRE_ALL"] = require_all
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skip_is_a_failure_under_require_all_and_left_out_folders_are_named(tree):
    missing = [lane for lane, (module, _) in SIMULATORS.items() if importlib.util.find_spec(module) is None]
    allowed = _pytest(tree, "tests", require_all="0")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert re.search(r"\b1 passed, 1 skipped\b", allowed.stdout), allowed.stdout
    summary = [line for line in allowed.stdout.splitlines() if line.startswith("simulator tests not collected")]
    if missing:
        (line,) = summary  # one line, naming each folder left out and the target that runs it
        for lane in missing:
            module, folder = SIMULATORS[lane]
            assert f"tests/{folder} (no {module} here: make test-{lane} runs it)" in line
    else:
        assert not summary
    strict = _pytest(tree, "tests", require_all="1")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert re.search(r"\b1 failed, \d+ passed\b", strict.stdout), strict.stdout
    assert "no such thing here" in strict.stdout and "ALLOW_SKIPS=1" in strict.stdout
    # Naming other files: nothing was going to collect the simulator folders, so nothing is said of them.
    one = _pytest(tree, "tests/test_some.py", require_all="0")
    assert one.returncode == 0 and "simulator tests not collected" not in one.stdout, one.stdout


@pytest.mark.parametrize("lane", sorted(SIMULATORS))
def test_a_simulators_lane_collects_its_folder_and_fails_without_the_simulator(tree, lane):
    module, folder = SIMULATORS[lane]
    proc = _pytest(tree, f"--simulator={lane}", f"tests/{folder}", require_all="1")
    if importlib.util.find_spec(module) is None:
        assert proc.returncode == 4, proc.stdout + proc.stderr  # a usage error: no test ran, none skipped
        assert f"--simulator={lane}: {module} is not importable" in proc.stderr
        assert f"make {lane}" in proc.stderr
    else:
        assert proc.returncode == 0 and re.search(r"\b1 passed\b", proc.stdout), proc.stdout + proc.stderr


def _dry_run(*args: str) -> subprocess.CompletedProcess:
    make = shutil.which("make")
    assert make, "make is not installed"
    env = {k: v for k, v in os.environ.items() if k not in ("ALLOW_SKIPS", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run([make, "-n", "-C", REPO, *args], env=env, capture_output=True, text=True, timeout=60)


TARGETS = (
    "test-core-main",
    "test-core-docker",
    "test-docs-snippets",
    "test-core-install",
    "test-isaaclab",
    "test-mjlab",
    "test-maniskill",
    "fuzz",
    "faults",
)


@pytest.mark.parametrize(("flag", "value"), [((), "1"), (("ALLOW_SKIPS=0",), "1"), (("ALLOW_SKIPS=1",), "0")])
def test_every_pytest_target_of_the_makefile_requires_every_test_unless_skips_are_allowed(flag, value):
    proc = _dry_run(*flag, *TARGETS)  # -n: prints the commands, runs none
    assert proc.returncode == 0, proc.stderr
    commands = proc.stdout.replace("\\\n", " ").splitlines()  # a command continued over lines is one
    runs = [line for line in commands if " -m pytest " in line]
    assert len(runs) == len(TARGETS), runs
    assert all(f"SIMEVAL_REQUIRE_ALL={value} " in line for line in runs), runs
    lanes = {lane: [line for line in runs if f"tests/{folder}" in line] for lane, (_, folder) in SIMULATORS.items()}
    for lane, (line,) in lanes.items():
        assert f"--simulator={lane} " in line, line


def test_allow_skips_takes_0_or_1_only():
    proc = _dry_run("ALLOW_SKIPS=yes", "test-core-main")
    assert proc.returncode == 2 and "ALLOW_SKIPS must be 0 or 1, got 'yes'" in proc.stderr, proc.stderr
