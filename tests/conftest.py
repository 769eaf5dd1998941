"""Test-session set-up: loopback-only Ray, and no silent skips (make test and CI) nor silently missing simulators."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile

# Ray must bind to 127.0.0.1 and send nothing out; set before Ray is imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# benchmarks/soak.py: the soak test runs a slice of it; the chaos test finds processes with it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

# The real-Isaac-Lab tests run in the Python 3.12 venv (make test-isaaclab), the mjlab tests in mjlab's own
# venv (make test-mjlab), the ManiSkill3 tests in theirs (make test-maniskill); the core suite has none of them.
# A simulator's lane names it (--simulator=isaaclab): its folder is collected and a venv without the package is
# an error. Elsewhere a folder whose package is missing is not collected, and the summary says so in one line.
# the lane (--simulator, make <lane>) -> (the package its tests need, the folder of those tests)
SIMULATOR_TESTS = {
    "isaaclab": ("isaaclab", "isaac_lab"),
    "mjlab": ("mjlab", "mj_lab"),
    "maniskill": ("mani_skill", "maniskill"),
    "lerobot": ("lerobot", "le_robot"),  # not tests/lerobot: a folder of that name would be found as the package
}
HERE = os.path.dirname(os.path.abspath(__file__))
NOT_COLLECTED = pytest.StashKey[dict]()  # the simulator folders left out of this session, each with why


def pytest_addoption(parser):
    parser.addoption(
        "--simulator",
        action="append",
        default=[],
        choices=sorted(SIMULATOR_TESTS),
        help="a simulator lane (make test-isaaclab, make test-mjlab, make test-maniskill): its tests are collected, "
        "and a venv without its package is an error instead of a folder left out",
    )


def _missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


def pytest_configure(config):
    # A launcher these tests start joins the cluster they name in RAY_ADDRESS, else starts its own: never the one
    # in /tmp/ray/ray_current_cluster (another session's `ray start`, or a stale file of a killed cluster).
    os.environ.setdefault("RAY_ADDRESS", "local")
    for lane in config.getoption("simulator"):
        module, folder = SIMULATOR_TESTS[lane]
        if _missing(module):
            raise pytest.UsageError(
                f"--simulator={lane}: {module} is not importable by {sys.executable}, so "
                f"tests/{folder} cannot run: build its venv (make {lane})."
            )


def _asked_for(config, path: str) -> bool:
    """Whether the session's arguments (or testpaths) take in ``path``: it or a folder above it."""
    for arg in config.args:
        where = os.path.abspath(os.path.join(config.invocation_params.dir, arg.split("::")[0]))
        if path == where or path.startswith(where.rstrip(os.sep) + os.sep):
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    """A simulator's folder is left out where its package is missing and no lane asks for it; the summary names
    it when the session's arguments took it in (``pytest``, ``pytest tests``), not when they name other files."""
    for lane, (module, folder) in SIMULATOR_TESTS.items():
        path = os.path.join(HERE, folder)
        if str(collection_path) == path and lane not in config.getoption("simulator") and _missing(module):
            if _asked_for(config, path):
                left_out = config.stash.setdefault(NOT_COLLECTED, {})
                left_out[f"tests/{folder}"] = f"no {module} here: make test-{lane} runs it"
            return True
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    left_out = config.stash.get(NOT_COLLECTED, {})
    if left_out:
        names = ", ".join(f"{folder} ({why})" for folder, why in left_out.items())
        terminalreporter.write_line(f"simulator tests not collected: {names}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With SIMEVAL_REQUIRE_ALL=1 (every pytest target of the Makefile, and so CI) a skipped test is a failed test."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("SIMEVAL_REQUIRE_ALL") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"a test skipped under SIMEVAL_REQUIRE_ALL=1 (make test, CI): {reason}  "
            "(make test ALLOW_SKIPS=1 lets tests skip on a machine that lacks what they need)"
        )


@pytest.fixture(scope="session", autouse=True)
def sb3_logger_dir(tmp_path_factory):
    """Stable-Baselines3's logger writes under pytest's temporary directory: without SB3_LOGDIR its configure()
    makes a /tmp/SB3-<date> directory at every learn(). Child processes inherit the variable."""
    old = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logger"))
    yield os.environ["SB3_LOGDIR"]
    if old is None:
        os.environ.pop("SB3_LOGDIR", None)
    else:
        os.environ["SB3_LOGDIR"] = old


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster on loopback declaring one logical GPU, shared by the session."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves threads or child processes behind."""
    import threading

    def children():
        """Live simeval worker processes started by this test process."""
        found = set()
        try:
            with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
                pids = f.read().split()
        except OSError:
            return found
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if b"simeval.backends.child" in cmd and state != "Z":
                found.add(pid)
        return found

    threads_before = {t.ident for t in threading.enumerate()}
    children_before = children()
    yield
    import time

    deadline = time.time() + 10
    while time.time() < deadline:
        extra_threads = [
            t for t in threading.enumerate() if t.ident not in threads_before and t.name.startswith("simeval")
        ]
        extra_children = children() - children_before
        if not extra_threads and not extra_children:
            return
        time.sleep(0.2)
    raise AssertionError(f"leaked threads {extra_threads} / child processes {extra_children}")


@pytest.fixture(params=["thread", "process", "ray"])
def backend(request):
    """Each backend in turn; the Ray one on the session's loopback cluster."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


@pytest.fixture
def two_nodes():
    """A real two-node Ray cluster (tests/ray_two_nodes.py) in a process of its own (a driver joins one cluster
    only); yields its address, node ids, the second raylet's pid and the pid of the process that owns it all."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "ray_two_nodes.py")],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            line = proc.stdout.readline()
            if not line:
                proc.wait(30)
                err.seek(0)
                pytest.fail("the two-node Ray cluster did not start: " + err.read()[-3000:])
            yield {**json.loads(line), "pid": proc.pid}
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
