"""Issue 44, item 3: no Python process simeval starts imports anything from its working directory.

A run directory someone else wrote may hold ``textwrap.py`` beside the checkpoint. ``python -m`` puts the
working directory first on ``sys.path``, so a process-backend worker started as ``python -m
simeval.backends.child`` imported it before it set the parent's path. Each module below writes a marker
file when imported; the oracle is that none is written while the run still works, and that the user's
own modules (``--policy mymod:f``, a factory pickled from the user's module) are still found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from launch_helpers import REPO, TESTS

from simeval.backends.bootstrap import CHILD_CODE, child_command, entry_code
from simeval.checkpoints.shipped import SHIPPED_RUN

CHECKPOINT = os.path.join(SHIPPED_RUN, "step_000126976.pt")
SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30")
# Standard-library names a worker imports after start-up (child.py, host.py, multiprocessing.connection,
# torch ...) or multiprocessing's resource tracker does, the files ``site`` would look for, and simeval
# itself. Not ``struct``, ``ctypes`` or ``types``: see the glfw test below.
SHADOWED = (
    "textwrap", "inspect", "dataclasses", "typing", "json", "traceback", "threading", "socket", "tempfile",
    "pickle", "copy", "weakref", "selectors", "signal", "random", "logging", "argparse", "subprocess",
    "multiprocessing", "sitecustomize", "usercustomize",
)  # fmt: skip
MARK = 'open(__file__ + ".ran", "w").close()\n'
BIN = os.path.dirname(sys.executable)


def hostile_dir(path) -> str:
    """``path`` made a run directory whose modules shadow the standard library's and simeval's."""
    os.makedirs(path / "simeval", exist_ok=True)
    (path / "simeval" / "__init__.py").write_text(MARK)
    for name in SHADOWED:
        (path / f"{name}.py").write_text(MARK)
    return str(path)


def markers(path) -> list[str]:
    """The shadowing modules that were imported (their markers), relative to ``path``."""
    found = []
    for root, _, files in os.walk(path):
        found += [os.path.relpath(os.path.join(root, f), path) for f in files if f.endswith(".ran")]
    return sorted(found)


def run(cmd: list[str], cwd: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """``cmd`` in ``cwd`` with simeval (this checkout) and the tests' helpers importable; ``.pid`` is its pid."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS]), **(env or {})}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    done.pid = proc.pid
    return done


def records(out) -> list[dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def backend_env(backend: str) -> dict:
    """The launcher's environment for ``backend``: Ray's joins the session's cluster (the ``backend`` fixture's)."""
    if backend != "ray":
        return {}
    import ray

    return {"RAY_ADDRESS": ray.get_runtime_context().gcs_address}


def console_script() -> str:
    launch = os.path.join(BIN, "simeval-launch")
    if not os.path.exists(launch):
        pytest.skip(f"no console script {launch}: simeval is not installed in this Python")
    return launch


@pytest.mark.parametrize("backend", ["process", "ray"], indirect=True)
def test_launcher_in_a_hostile_run_directory_imports_nothing_from_it(backend, tmp_path):
    """``simeval-launch`` in a run directory: its workers (a child process, a Ray actor) import nothing lying there.

    Ray puts the driver's working directory first on its workers' path: there the actor class is sent by value.
    """
    run_dir = hostile_dir(tmp_path / "run")
    out = tmp_path / "out"
    cmd = [console_script(), "--backend", backend, "--checkpoint", CHECKPOINT, "--out", str(out), *SMALL]
    proc = run(cmd, run_dir, env=backend_env(backend))
    assert markers(run_dir) == [], f"imported from the run directory: {markers(run_dir)}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = records(out)
    assert record["status"] == "ok" and record["backend"] == backend


def test_glfw_library_probe_imports_nothing_from_the_working_directory(tmp_path):
    """glfw (gymnasium's MuJoCo envs import it) probes candidate libraries with ``python -c`` in the working
    directory, where a ``struct.py`` would run: simeval points it at its wheel's library (PYGLFW_LIBRARY)."""
    pytest.importorskip("glfw")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "struct.py").write_text(MARK)
    out = tmp_path / "out"
    proc = run([console_script(), "--checkpoint", CHECKPOINT, "--out", str(out), *SMALL], str(run_dir))
    assert markers(run_dir) == [], proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]


USER_MODULE = textwrap.dedent(
    """
    import os
    import sys

    from helpers import const_policy
    from simeval.policies import gaussian_actor

    def where_built():
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "built_in"), "w") as f:
            f.write(f"{os.getpid()} {sys.modules[__name__].__file__}")

    def f(env, **kwargs):
        where_built()
        return gaussian_actor(env, **kwargs)

    def constant(env):
        where_built()
        return const_policy()
    """
)


def built_in(directory) -> tuple[int, str]:
    """The pid of the process that built the user's policy and the file its module was imported from."""
    pid, module_file = (directory / "built_in").read_text().split(" ", 1)
    return int(pid), module_file


@pytest.mark.parametrize("backend", ["process", "ray"], indirect=True)
def test_policy_module_in_the_working_directory_still_builds_the_workers_policy(backend, tmp_path):
    """``python -m simeval.launch --policy mymod:f`` from the user's directory: the worker imports mymod there."""
    user = tmp_path / "project"
    user.mkdir()
    (user / "mymod.py").write_text(USER_MODULE)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "simeval.launch", "--backend", backend, "--policy", "mymod:f",
           "--checkpoint", CHECKPOINT, "--out", str(out), *SMALL]  # fmt: skip
    proc = run(cmd, str(user), env=backend_env(backend))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = records(out)
    assert record["status"] == "ok" and record["backend"] == backend
    pid, module_file = built_in(user)
    assert pid != proc.pid and module_file == str(user / "mymod.py")  # built in the worker, from the user's file


TRAIN_SCRIPT = textwrap.dedent(
    """
    from helpers import count_env
    from mymod import constant  # the user's own module, beside this script
    from simeval import Evaluator

    ev = Evaluator(count_env, policy_factory=constant, num_trajectories=1, backend="process")
    try:
        print("REWARD", ev.evaluate()["eval/reward"])
    finally:
        ev.shutdown()
    """
)


def test_factory_from_the_users_module_is_found_by_the_child_and_the_cwd_stays_out(tmp_path):
    """A training script's factory, pickled by reference to the user's module, is imported by the child.

    The script runs from a hostile working directory: the script's own directory is on its path (and so
    on the child's), the working directory on neither.
    """
    user = tmp_path / "project"
    user.mkdir()
    (user / "mymod.py").write_text(USER_MODULE)
    (user / "train.py").write_text(TRAIN_SCRIPT)
    run_dir = hostile_dir(tmp_path / "run")
    proc = run([sys.executable, str(user / "train.py")], run_dir)
    assert markers(run_dir) == [], proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REWARD" in proc.stdout
    pid, module_file = built_in(user)
    assert pid != proc.pid and module_file == str(user / "mymod.py")


TRACKER_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, sys
    from multiprocessing import resource_tracker, shared_memory

    if sys.argv[1] == "safe":
        from simeval.backends.bootstrap import start_resource_tracker
        start_resource_tracker()
    lock = multiprocessing.Lock()  # registers a semaphore, as torchrl's VecNorm does
    block = shared_memory.SharedMemory(create=True, size=64)
    block.close()
    block.unlink()
    tracker = resource_tracker._resource_tracker
    assert tracker._check_alive(), "the resource tracker died"
    print("TRACKER", tracker._pid)
    """
)


def test_resource_tracker_starts_without_the_working_directory_on_its_path(tmp_path):
    """multiprocessing starts its tracker with ``python -c`` in the working directory; simeval's starts safe."""
    script = tmp_path / "tracker_script.py"
    script.write_text(TRACKER_SCRIPT)
    run_dir = hostile_dir(tmp_path / "run")
    control = run([sys.executable, str(script), "stdlib"], run_dir, timeout=60)
    assert "multiprocessing.py.ran" in markers(run_dir), control.stderr[-2000:]  # the hole, in the stdlib
    for path in markers(run_dir):
        os.remove(os.path.join(run_dir, path))

    proc = run([sys.executable, str(script), "safe"], run_dir, timeout=60)
    assert markers(run_dir) == [], proc.stderr[-2000:]
    assert proc.returncode == 0 and "TRACKER" in proc.stdout, proc.stderr[-2000:]
    assert "resource_tracker" not in proc.stderr  # no "died unexpectedly, relaunching" warning


def test_child_command_passes_the_parents_path_and_never_runs_a_module():
    cmd = child_command(7, ["/venv/site-packages", "", "/my project/src"])
    assert cmd[:3] == [sys.executable, "-c", CHILD_CODE] and "-m" not in cmd
    assert cmd[3:] == ["7", "/venv/site-packages", "", "/my project/src"]
    assert CHILD_CODE.startswith("import sys; sys.path[:] = sys.argv[2:];")  # before any import through the path
    assert "simeval.backends.child" in " ".join(cmd)  # conftest's no_leaks finds workers by this name


def entrypoint(dockerfile: str) -> list[str]:
    """The ENTRYPOINT (exec form) of ``containers/<dockerfile>``."""
    with open(os.path.join(REPO, "containers", dockerfile)) as f:
        (line,) = [line for line in f if line.startswith("ENTRYPOINT ")]
    return json.loads(line.removeprefix("ENTRYPOINT "))


def test_images_start_the_launcher_without_the_working_directory_on_its_path():
    assert entrypoint("Dockerfile") == ["simeval-launch"]
    launch = entry_code("simeval.launch", "main_exit")
    assert entrypoint("Dockerfile.isaaclab") == ["/isaac-sim/python.sh", "-c", launch]
    with open(os.path.join(REPO, "containers", "simeval.def")) as f:
        runscript = f.read().split("%runscript", 1)[1].split("%", 1)[0]
    assert 'exec simeval-launch "$@"' in runscript and "-m simeval" not in runscript


def test_entry_points_in_a_hostile_directory_import_nothing_from_it(tmp_path):
    """The images' entry points, run here, import nothing from the working directory; ``python -m`` would."""
    run_dir = hostile_dir(tmp_path / "run")
    control = run([sys.executable, "-m", "simeval.launch", "--help"], run_dir)
    assert markers(run_dir), "python -m imported nothing from the working directory: the markers prove nothing"
    assert control.returncode != 0
    for path in markers(run_dir):
        os.remove(os.path.join(run_dir, path))

    isaaclab = entrypoint("Dockerfile.isaaclab")
    commands = {  # an image's Python is this one here
        "Dockerfile (simeval-launch)": [console_script(), "--help"],
        "Dockerfile.isaaclab": [sys.executable, *isaaclab[1:], "--help"],
        "entry_code(serve_policy)": [sys.executable, "-c", entry_code("simeval.serve_policy", "main_exit"), "--help"],
    }
    for what, cmd in commands.items():
        proc = run(cmd, run_dir, timeout=120)
        assert markers(run_dir) == [], what
        assert proc.returncode == 0 and "usage:" in proc.stdout, (what, proc.stderr[-2000:])
