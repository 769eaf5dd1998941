"""The eval image and the Docker launcher, against a real Docker engine (dockerd on a private socket).

The image is built by containers/ci.sh from a Debian base made here with
debootstrap (no registry is reachable) and the CI torch wheel; ci.sh also runs
the MuJoCo tests inside it. The launcher tests then start eval workers as
containers of that image. Needs root (dockerd); CI runs as root.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest
from launch_helpers import REPO, cli, popen_cli, write_checkpoints
from root_services import started_or_skip

from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.container import LABEL, gpu_device_requests, plan, strip_flags

# The image build (debootstrap, pip inside the build) runs inside the first engine test's set-up.
pytestmark = pytest.mark.timeout(1500)
SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30")
IMAGE = "simeval:test"


def _records(out) -> list[dict]:
    path = os.path.join(out, "results.jsonl")
    return [json.loads(x) for x in open(path) if x.strip()] if os.path.exists(path) else []


def _readable_dir(path) -> str:
    os.chmod(path, 0o755)  # pytest makes 0700 directories; the container's user is not root
    return str(path)


def _owner(path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid


def _errors(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("simeval-launch: error:")]


def _container_id(stdout_line: str) -> str:
    m = re.match(r"container (\w+) \(", stdout_line)
    assert m, stdout_line
    return m.group(1)


# -- without an engine ----------------------------------------------------------------------------
def test_gpu_requests_name_only_the_chosen_host_gpus():
    assert gpu_device_requests("1") == [
        {"Driver": "", "Count": 0, "DeviceIDs": ["1"], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert gpu_device_requests("0, 2")[0]["DeviceIDs"] == ["0", "2"]
    assert gpu_device_requests("all")[0]["Count"] == -1
    assert gpu_device_requests(None) == []
    with pytest.raises(ConfigError, match="--gpus 'two'"):
        gpu_device_requests("two")


def test_plan_mounts_paths_where_they_are_and_forwards_the_rest(tmp_path):
    argv = ["--launcher", "docker", "--image=img", "--gpus", "1", "--watch", "ckpt", "--episodes", "4"]
    cfg = LaunchConfig(launcher="docker", image="img", gpus="1", watch="ckpt", episodes=4).validate()
    spec = plan(cfg, argv, config_path="launchers/x.yaml", cwd=str(tmp_path))
    watch, config = str(tmp_path / "ckpt"), str(tmp_path / "launchers" / "x.yaml")
    assert spec.volumes[watch] == {"bind": watch, "mode": "ro"}
    assert spec.volumes[config] == {"bind": config, "mode": "ro"}
    assert spec.volumes[spec.out]["mode"] == "rw" and spec.out.startswith(str(tmp_path / "runs"))
    assert spec.working_dir == str(tmp_path)
    # container flags stay outside; the inner launcher runs locally on the renumbered GPU
    assert spec.command == [
        "--watch", "ckpt", "--episodes", "4", "--launcher", "local", "--out", spec.out, "--device", "cuda:0",
    ]  # fmt: skip
    argv = ["--image", "a", "--gpus=0", "--network", "none", "--seed", "1"]
    assert strip_flags(argv, ("--image", "--gpus", "--network")) == ["--seed", "1"]


def test_a_device_outside_the_requested_gpus_is_refused(tmp_path):
    cfg = LaunchConfig(launcher="docker", image="img", gpus="3", device="cuda:1").validate()
    with pytest.raises(ConfigError, match="sees only the 1 GPU"):
        plan(cfg, [], None, cwd=str(tmp_path))


class _LogStream:
    """The container object as _stream uses it: its log yields a line, then ``error``.

    ``states`` are what successive reload() calls find (the last one stays; None: removed).
    """

    short_id = "c0ffee123456"

    def __init__(self, error: Exception, states: list[str | None]) -> None:
        self.error, self.states, self.status = error, list(states), None

    def logs(self, **kwargs):
        yield b"a line\n"
        raise self.error

    def reload(self) -> None:
        import docker

        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if state is None:
            raise docker.errors.NotFound("No such container: c0ffee123456")
        self.status = state


class _GoneTerminal(io.BytesIO):
    def write(self, data) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_only_the_end_of_a_log_stream_is_silent_every_other_failure_is_one_line(monkeypatch, capsys):
    import docker
    import requests
    import urllib3

    from simeval.launch import container_engine as launcher

    monkeypatch.setattr(launcher, "STREAM_END_GRACE_S", 0.5, raising=False)
    broken = urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(0 bytes read)")
    ends = [  # the engine closing the stream because the container exited or was removed
        (broken, ["exited"]),
        (requests.exceptions.ChunkedEncodingError("Response ended prematurely"), [None]),
        (requests.exceptions.ConnectionError("Connection aborted."), ["running", "running", "exited"]),  # state lags
        (docker.errors.NotFound("No such container: c0ffee123456"), ["running"]),
    ]
    for error, states in ends:
        sink = io.BytesIO()
        launcher._stream(_LogStream(error, states), True, sink)
        assert sink.getvalue() == b"a line\n"
        assert capsys.readouterr().err == "", error
    failures = [  # anything else is reported, not lost
        (broken, ["running"], "ProtocolError: Connection broken"),  # dropped while the container runs on
        (requests.exceptions.ConnectionError("Connection refused"), ["running"], "Connection refused"),
        (docker.errors.APIError("500 Server Error", explanation="log file is corrupted"), ["exited"], "corrupted"),
        (ValueError("bad frame header"), ["exited"], "ValueError: bad frame header"),
    ]
    for error, states, cause in failures:
        launcher._stream(_LogStream(error, states), False, io.BytesIO())
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("simeval-launch: warning:") and "stderr log of container c0ffee123456" in line, line
        assert cause in line, line
    launcher._stream(_LogStream(docker.errors.NotFound("gone"), [None]), True, _GoneTerminal())  # the sink broke
    (line,) = capsys.readouterr().err.splitlines()
    assert "stdout log of container c0ffee123456 (BrokenPipeError: " in line, line


def test_container_flags_need_the_docker_launcher():
    proc = cli("--image", "simeval", "--checkpoint", "x.pt")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "simeval-launch: error: --image is a container setting: it needs --launcher docker."
    proc = cli("--launcher", "docker", "--checkpoint", "x.pt")
    assert proc.returncode == 2 and "needs --image IMAGE" in proc.stderr


def test_an_unreachable_engine_is_one_clear_line(tmp_path):
    proc = cli(
        "--launcher", "docker", "--image", IMAGE, "--out", str(tmp_path / "out"),
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"},
    )  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot reach the Docker engine at unix://" in line and "start dockerd or set DOCKER_HOST" in line


# -- a real engine ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine():
    from docker_engine import docker_engine

    with started_or_skip(docker_engine, "a private Docker engine") as env:
        yield env


@pytest.fixture(scope="module")
def image_build(engine):
    """containers/ci.sh: build the image from a local Debian base, run the MuJoCo tests inside."""
    from docker_engine import DOCKER, import_base_image, torch_wheelhouse

    env = {**os.environ, **engine}
    base = import_base_image(env)
    torch_spec = next(x.strip() for x in open(os.path.join(REPO, "constraints-ci.txt")) if x.startswith("torch=="))
    torch_wheelhouse(os.path.join(REPO, "containers", "wheelhouse"), torch_spec)
    env.update(DOCKER=DOCKER, BASE_IMAGE=base, TORCH_SPEC=torch_spec, SIMEVAL_IMAGE_TAG=IMAGE)
    proc = subprocess.run(
        ["containers/ci.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200
    )  # fmt: skip
    return proc


@pytest.fixture(scope="module")
def image(image_build):
    if image_build.returncode != 0:
        pytest.fail("the image did not build: " + (image_build.stdout + image_build.stderr)[-3000:])
    return IMAGE


def _containers(engine) -> list[str]:
    from docker_engine import DOCKER

    out = subprocess.run(
        [DOCKER, "ps", "-a", "-q", "--filter", f"label={LABEL}"],
        env={**os.environ, **engine}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    directory = _readable_dir(tmp_path_factory.mktemp("ckpt"))
    return write_checkpoints(directory)


def test_ci_script_builds_a_non_root_image_and_the_mujoco_tests_pass_inside(engine, image_build):
    from docker_engine import DOCKER

    assert image_build.returncode == 0, (image_build.stdout + image_build.stderr)[-3000:]
    assert " passed" in image_build.stdout and " failed" not in image_build.stdout
    env = {**os.environ, **engine}
    whoami = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "id", IMAGE, "-u"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert whoami.stdout.strip() == "1000"
    # the entrypoint is the launcher: its --help answers
    helped = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", IMAGE, "--help"], env=env, capture_output=True, text=True
    )
    assert helped.returncode == 0 and "--watch" in helped.stdout


def test_the_docker_launcher_evaluates_a_checkpoint_into_the_host_results(engine, image, checkpoints, tmp_path):
    from simeval.checkpoints import file_hash

    out = tmp_path / "out"
    proc = cli(
        "--launcher", "docker", "--image", image, "--network", "none",
        "--checkpoint", checkpoints[1], "--out", str(out), *SMALL, env=engine,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = _records(out)
    assert record["status"] == "ok" and record["step"] == 2000
    assert record["checkpoint"] == checkpoints[1]  # the same path inside and out
    assert record["checkpoint_sha256"] == file_hash(checkpoints[1])
    assert record["host"] == socket.gethostname()
    assert len(record["episode_returns"]) == 2
    # the container's logs were streamed here: its result table on stdout
    assert "reward_ci_low" in proc.stdout and "results: " + str(out) in proc.stdout
    assert _containers(engine) == [], "the container was not removed"
    # same numbers as a local run of the same command
    local = tmp_path / "local"
    assert cli("--checkpoint", checkpoints[1], "--out", str(local), *SMALL).returncode == 0
    assert record["episode_returns"] == pytest.approx(_records(local)[0]["episode_returns"], rel=1e-5)


def test_sigterm_stops_and_removes_the_container_and_a_rerun_resumes(engine, image, checkpoints, tmp_path):
    out = tmp_path / "out"
    args = ("--launcher", "docker", "--image", image, "--network", "none", "--watch", os.path.dirname(checkpoints[0]))
    args += ("--out", str(out), "--episodes", "4", "--num-envs", "2", "--max-steps", "1000", "--poll-interval", "0.5")
    proc = popen_cli(*args, env=engine)
    deadline = time.time() + 240
    while not _records(out) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert _records(out), "no result before the deadline: " + (proc.stderr.read() if proc.poll() is not None else "")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert "stopping container" in stdout
    assert "received SIGTERM: stopping cleanly" in stderr  # the launcher inside got the signal
    assert _containers(engine) == []
    done = len(_records(out))
    assert done < 3, "the watch finished before the signal; the test did not interrupt anything"
    rerun = cli(*args, "--until-step", "3000", env=engine, timeout=400)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    steps = [r["step"] for r in _records(out)]
    assert steps == [1000, 2000, 3000], steps  # each checkpoint exactly once, in order


def test_an_error_inside_the_container_is_its_exit_code_and_one_line(engine, image, tmp_path):
    bad = tmp_path / "ckpt"
    bad.mkdir(mode=0o755)
    (bad / "broken.pt").write_bytes(b"not a checkpoint")
    os.chmod(bad / "broken.pt", 0o644)
    proc = cli(
        "--launcher", "docker", "--image", image, "--network", "none",
        "--checkpoint", str(bad / "broken.pt"), "--out", str(tmp_path / "out"), *SMALL, env=engine,
    )  # fmt: skip
    assert proc.returncode == 2
    errors = [x for x in proc.stderr.splitlines() if x.startswith("simeval-launch: error:")]
    assert len(errors) == 1 and "broken.pt" in errors[0]
    assert _containers(engine) == []


def test_a_missing_image_is_one_clear_line(engine, tmp_path):
    proc = cli("--launcher", "docker", "--image", "simeval:no-such-tag", "--out", str(tmp_path / "o"), env=engine)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "image 'simeval:no-such-tag' is not on this Docker engine" in line and "docker build" in line


def test_gpus_1_asks_the_engine_for_host_gpu_1_only(engine, image, checkpoints, tmp_path):
    import docker

    cfg = LaunchConfig(launcher="docker", image=image, gpus="1", checkpoint=checkpoints[0]).validate()
    spec = plan(cfg, ["--checkpoint", checkpoints[0]], None, cwd=str(tmp_path))
    client = docker.DockerClient(base_url=engine["DOCKER_HOST"])
    container = client.containers.create(**spec.create_kwargs("1000:1000"))
    try:
        host_config = client.api.inspect_container(container.id)["HostConfig"]
        assert host_config["DeviceRequests"] == [
            {"Driver": "", "Count": 0, "DeviceIDs": ["1"], "Capabilities": [["gpu"]], "Options": {}}
        ]
        assert client.api.inspect_container(container.id)["Args"][-2:] == ["--device", "cuda:0"]
    finally:
        container.remove(force=True)
    # this machine has no GPU runtime: the launcher says so in one line
    proc = cli(
        "--launcher", "docker", "--image", image, "--gpus", "1", "--network", "none",
        "--checkpoint", checkpoints[0], "--out", str(tmp_path / "out"), *SMALL, env=engine,
    )  # fmt: skip
    assert proc.returncode == 2
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("simeval-launch: error:")]
    assert "could not start the container" in line and "NVIDIA Container Toolkit" in line
    assert _containers(engine) == []


def test_as_root_only_the_directories_made_for_out_go_to_the_container_user(engine, image, checkpoints, tmp_path):
    shared = tmp_path / "shared"  # a directory of the host's, with the host's files in it
    shared.mkdir(mode=0o755)
    (shared / "notes.txt").write_text("not simeval's\n")
    out = shared / "exp1" / "eval" / "out"  # exp1/eval/out: made by this launch
    args = ("--launcher", "docker", "--image", image, "--network", "none", "--out", str(out), *SMALL)
    proc = cli(*args, "--checkpoint", checkpoints[0], env=engine)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in _records(out)] == [1000]
    for made in (shared / "exp1", shared / "exp1" / "eval", out):
        assert _owner(made) == (1000, 1000), made
    assert _owner(shared) == (0, 0) and _owner(shared / "notes.txt") == (0, 0)
    # an --out that exists and the container's user can write is used as it is: nothing in it changes hands
    (out / "mine").mkdir()
    (out / "mine" / "data.bin").write_bytes(b"\0" * 16)
    proc = cli(*args, "--checkpoint", checkpoints[1], env=engine)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in _records(out)] == [1000, 2000]
    assert _owner(out / "mine") == (0, 0) and _owner(out / "mine" / "data.bin") == (0, 0)
    assert _containers(engine) == []


def test_as_root_an_out_the_container_user_cannot_write_is_refused_in_one_line(engine, image, checkpoints, tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o755)  # root's
    (out / "big").mkdir()
    container = ("--launcher", "docker", "--image", image, "--network", "none")
    args = (*container, "--checkpoint", checkpoints[0], *SMALL)
    proc = cli(*args, "--out", str(out), env=engine)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert f"{out} (owner 0:0, mode 755) is not writable by the container's user 1000:1000" in line, line
    assert f"chown 1000:1000 {out}, or run the launcher as that non-root user." in line, line
    assert _owner(out) == (0, 0) and _owner(out / "big") == (0, 0)  # nothing handed over
    # the directory is the container user's, a results.jsonl in it is not
    os.chown(out, 1000, 1000)
    (out / "results.jsonl").write_text("")
    os.chmod(out / "results.jsonl", 0o644)
    proc = cli(*args, "--out", str(out), env=engine)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    results = out / "results.jsonl"
    assert f"{results} (owner 0:0, mode 644) is not writable by the container's user 1000:1000" in line, line
    assert f"chown 1000:1000 {results}," in line, line
    assert _owner(results) == (0, 0) and _records(out) == []
    # a read-only mount the container's user cannot read is refused as before; the --out it made stays usable
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    fresh = tmp_path / "fresh"
    proc = cli(*container, "--watch", str(private), "--out", str(fresh), env=engine)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert f"{private} is not readable by the container's user 1000:1000" in line, line
    assert _owner(fresh) == (1000, 1000)
    assert _containers(engine) == []


def test_losing_the_engine_while_waiting_is_one_line_and_the_container_is_removed(engine, image, tmp_path):
    from docker_engine import EngineProxy

    (tmp_path / "watch").mkdir()
    watch = _readable_dir(tmp_path / "watch")  # empty: the launcher inside waits for checkpoints
    proxy = EngineProxy(engine["DOCKER_HOST"], engine["SIMEVAL_DOCKER_BASE"])
    proc = popen_cli(
        "--launcher", "docker", "--image", image, "--network", "none", "--watch", watch,
        "--out", str(tmp_path / "out"), "--poll-interval", "0.5", env={**engine, "DOCKER_HOST": proxy.host},
    )  # fmt: skip
    try:
        started = proc.stdout.readline()
        assert proxy.seen(r"/containers/\w+/wait"), "the launcher never waited for its container"
        assert proxy.cut(r"/containers/\w+/wait") == 1  # the engine restarts, as the launcher sees it
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        proxy.close()
    assert proc.returncode == 2, stderr[-3000:]
    (line,) = _errors(stderr)
    assert re.search(
        rf"the launcher lost contact with the Docker engine while waiting for container {_container_id(started)} "
        r"\(\w+: .+\)\.$",
        line,
    ), line
    assert _containers(engine) == [], "the container was not removed"


# -- an engine whose log driver keeps nothing to read back ------------------------------------------
ECHO_IMAGE = "simeval-echo:test"


@pytest.fixture(scope="module")
def engine_without_logs(tmp_path_factory):
    """dockerd --log-driver=none (hosts that keep no container logs): the engine cannot stream any."""
    from docker_engine import DOCKER, docker_engine, import_base_image

    with started_or_skip(lambda: docker_engine("--log-driver=none"), "a Docker engine without logs") as env:
        full = {**os.environ, **env}
        context = tmp_path_factory.mktemp("echo-image")
        (context / "Dockerfile").write_text(
            f"FROM {import_base_image(full)}\n"
            "USER 1000:1000\n"
            'ENTRYPOINT ["sh", "-c", "echo evaluated; echo warned >&2; exit 3", "launcher"]\n'
        )
        subprocess.run([DOCKER, "build", "-t", ECHO_IMAGE, str(context)], env=full, check=True, capture_output=True)
        yield env


def test_a_log_the_engine_cannot_stream_is_reported_not_lost(engine_without_logs, tmp_path):
    (tmp_path / "watch").mkdir()
    watch = _readable_dir(tmp_path / "watch")
    proc = cli(
        "--launcher", "docker", "--image", ECHO_IMAGE, "--network", "none", "--watch", watch,
        "--out", str(tmp_path / "out"), env=engine_without_logs,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]  # the container's own exit code
    short_id = _container_id(proc.stdout.splitlines()[0])
    warnings = [x for x in proc.stderr.splitlines() if x.startswith("simeval-launch: warning:")]
    assert len(warnings) == 2, proc.stderr
    for which, line in zip(("stdout", "stderr"), sorted(warnings, key=lambda x: "stderr log" in x), strict=True):
        assert f"{which} log of container {short_id} (APIError: " in line, line
        assert "configured logging driver does not support reading" in line, line
    assert _containers(engine_without_logs) == []
