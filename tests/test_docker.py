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
import sys
import time

import pytest
from launch_helpers import REPO, cli, popen_cli, write_checkpoints
from root_services import started_or_skip

from simeval.containers.plan import (
    LABEL,
    SERVER_PORT,
    ContainerError,
    gpu_device_requests,
    plan,
    plan_pair,
    strip_flags,
)
from simeval.launch.config import ConfigError, LaunchConfig

# The image build (debootstrap, pip inside the build) runs inside the first engine test's set-up.
pytestmark = pytest.mark.timeout(1500)
SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30")
IMAGE = "simeval:test"
CONTAINER_TESTS = ("tests/test_envs.py", "tests/test_api.py", "tests/test_checkpoint.py")


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
    with pytest.raises(ContainerError, match="--gpus 'two'"):
        gpu_device_requests("two")


def test_plan_mounts_paths_where_they_are_and_forwards_the_rest(tmp_path):
    argv = ["--launcher", "docker", "--image=img", "--gpus", "1", "--watch", "ckpt", "--episodes", "4"]
    cfg = LaunchConfig(launcher="docker", image="img", gpus="1", watch="ckpt", episodes=4).validate()
    (tmp_path / "launchers").mkdir()
    (tmp_path / "launchers" / "x.yaml").write_text("episodes: 4\n")
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
    with pytest.raises(ContainerError, match="sees only the 1 GPU"):
        plan(cfg, [], None, cwd=str(tmp_path))


# -- the trust boundary: what the container sees of the host ---------------------------------------
def _docker_cfg(**settings) -> LaunchConfig:
    return LaunchConfig(launcher="docker", image="img", **settings).validate()


def _file(path, text: str = "x") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _mounts(spec) -> dict[str, str]:
    """The container's view: each mounted path inside -> ro/rw."""
    return {m["bind"]: m["mode"] for m in spec.volumes.values()}


def test_the_checkpoint_file_itself_is_mounted_read_only_not_its_directory(tmp_path):
    ckpt = _file(tmp_path / "run" / "model.pt")
    _file(tmp_path / "run" / "other-experiment.pt")  # beside it, not the container's business
    out = str(tmp_path / "out")
    spec = plan(_docker_cfg(checkpoint=ckpt, out=out), [], None, cwd=str(tmp_path))
    assert _mounts(spec) == {ckpt: "ro", out: "rw"}


def test_a_checkpoint_at_the_top_of_the_home_directory_mounts_only_the_file(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))  # --checkpoint ~/model.pt mounted all of ~ (as /root for root)
    ckpt = _file(home / "model.pt")
    spec = plan(_docker_cfg(checkpoint=ckpt, out=str(tmp_path / "out")), [], None, cwd=str(tmp_path))
    assert str(home) not in spec.volumes and _mounts(spec)[ckpt] == "ro"


def test_a_checkpoint_in_the_root_directory_never_mounts_it(tmp_path):
    # /model.pt mounted / itself; the file is refused in one line when it is not there
    refusal = r"^--checkpoint /no-such-model\.pt: no such file; give the checkpoint file"
    with pytest.raises(ContainerError, match=refusal):
        plan(_docker_cfg(checkpoint="/no-such-model.pt"), [], None, cwd=str(tmp_path))


@pytest.mark.parametrize(
    ("flag", "path", "refusal"),
    [
        ("out", "/", "--out /: refuses to mount / into the container: give a directory of its own."),
        ("watch", "/", "--watch /: refuses to mount / into the container: give a directory of its own."),
        ("out", "/etc/simeval", "--out /etc/simeval: refuses to mount /etc/simeval (under /etc, a system directory)"),
        ("watch", "/usr/lib", "--watch /usr/lib: refuses to mount /usr/lib (under /usr, a system directory)"),
        ("out", "/home", "--out /home: refuses to mount /home into the container: give a directory of its own."),
        ("watch", "/var", "--watch /var: refuses to mount /var into the container: give a directory of its own."),
        ("out", "/root", "--out /root: refuses to mount /root into the container: give a directory of its own."),
        ("checkpoint", "/etc/passwd", "--checkpoint /etc/passwd: refuses to mount /etc/passwd (under /etc, a system"),
        ("suite", "/etc/hosts", "--suite /etc/hosts: refuses to mount /etc/hosts (under /etc, a system directory)"),
    ],
)
def test_system_directories_are_never_mounted(tmp_path, flag, path, refusal):
    with pytest.raises(ContainerError) as info:
        plan(_docker_cfg(**{flag: path}), [], None, cwd=str(tmp_path))
    assert str(info.value).startswith(refusal), str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_the_home_directory_and_symlinks_to_refused_places_are_refused(tmp_path, monkeypatch):
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for flag, path in (("out", home), ("watch", home), ("out", home.parent)):
        with pytest.raises(ContainerError, match=rf"^--{flag} {path}: refuses to mount {path} \(your home directory"):
            plan(_docker_cfg(**{flag: str(path)}), [], None, cwd=str(tmp_path))
    (tmp_path / "to-root").symlink_to("/")
    with pytest.raises(ContainerError, match=r"^--out to-root: refuses to mount / into the container"):
        plan(_docker_cfg(out="to-root"), [], None, cwd=str(tmp_path))  # decided on the resolved path
    (tmp_path / "etc-file.pt").symlink_to("/etc/passwd")
    with pytest.raises(ContainerError, match=r"^--checkpoint etc-file.pt: refuses to mount /etc/passwd \(under /etc"):
        plan(_docker_cfg(checkpoint="etc-file.pt"), [], None, cwd=str(tmp_path))
    # ~/runs/eval is a directory of its own: fine
    spec = plan(_docker_cfg(out=str(home / "runs" / "eval")), [], None, cwd=str(tmp_path))
    assert _mounts(spec) == {str(home / "runs" / "eval"): "rw"}


def test_a_symlinked_checkpoint_is_mounted_from_its_target_at_the_path_given(tmp_path):
    target = _file(tmp_path / "store" / "model_100.pt")
    (tmp_path / "latest.pt").symlink_to(target)
    spec = plan(_docker_cfg(checkpoint="latest.pt", out="out"), [], None, cwd=str(tmp_path))
    assert spec.volumes[target] == {"bind": str(tmp_path / "latest.pt"), "mode": "ro"}


def test_the_config_and_suite_files_are_mounted_not_their_directories(tmp_path):
    config = _file(tmp_path / "launchers" / "x.yaml", "episodes: 2\n")
    suite = _file(tmp_path / "suites" / "s.yaml", "name: s\n")
    _file(tmp_path / "launchers" / "secrets.yaml")
    spec = plan(_docker_cfg(suite="suites/s.yaml", out="out"), [], "launchers/x.yaml", cwd=str(tmp_path))
    assert _mounts(spec) == {config: "ro", suite: "ro", str(tmp_path / "out"): "rw"}
    with pytest.raises(ContainerError, match=r"^--suite nope.yaml: no such file"):
        plan(_docker_cfg(suite="nope.yaml"), [], None, cwd=str(tmp_path))


def test_a_run_directory_s_params_are_mounted_beside_the_checkpoint_file(tmp_path):
    """What the readers look for beside a checkpoint (yaml_params.run_params) is mounted, read-only, and no more."""
    from simeval.checkpoints.formats.yaml_params import run_params

    for layout, subdir in (("rsl/model_100.pt", None), ("skrl/checkpoints/agent_100.pt", "checkpoints"),
                           ("games/nn/last_x_ep_10_rew_1.5.pth", "nn")):  # fmt: skip
        ckpt = _file(tmp_path / layout)
        run = os.path.dirname(ckpt) if subdir is None else os.path.dirname(os.path.dirname(ckpt))
        params = [_file(tmp_path / run / "params" / name, "seed: 1\n") for name in ("agent.yaml", "env.yaml")]
        _file(tmp_path / run / "params" / "agent.pkl")  # a pickle beside them is not read, so not mounted
        spec = plan(_docker_cfg(checkpoint=ckpt, out=str(tmp_path / "out")), [], None, cwd=str(tmp_path))
        assert _mounts(spec) == {ckpt: "ro", params[0]: "ro", params[1]: "ro", str(tmp_path / "out"): "rw"}, layout
        assert run_params(ckpt, subdir)["__path__"] in _mounts(spec)


def test_sb3_vecnormalize_statistics_beside_the_zip_are_mounted(tmp_path, monkeypatch):
    """Whatever sb3_vecnormalize.find picks for a zip (or names in its refusal) is mounted with it."""
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.formats.sb3_vecnormalize import find

    monkeypatch.delenv("SIMEVAL_SB3_VECNORMALIZE", raising=False)
    out = str(tmp_path / "out")
    layouts = {
        "a/model.zip": ["a/vecnormalize.pkl"],
        "b/model.zip": ["b/model/vec_normalize.npz"],
        "c/rl_model_1000_steps.zip": ["c/rl_model_vecnormalize_1000_steps.pkl", "c/vecnormalize.pkl"],
    }
    for zipped, stats in layouts.items():
        ckpt = _file(tmp_path / zipped)
        files = [_file(tmp_path / s) for s in stats]
        _file(tmp_path / zipped.split("/")[0] / "unrelated.pkl")
        mounts = _mounts(plan(_docker_cfg(checkpoint=ckpt, out=out), [], None, cwd=str(tmp_path)))
        assert mounts == {ckpt: "ro", out: "rw", **dict.fromkeys(files, "ro")}, zipped
        assert find(ckpt, "ppo", {}) in mounts
    # the run saved statistics per step but not this step's: the reader refuses, naming one of the others
    ckpt = _file(tmp_path / "d" / "rl_model_2000_steps.zip")
    other = _file(tmp_path / "d" / "rl_model_vecnormalize_1000_steps.pkl")
    _file(tmp_path / "d" / "vecnormalize.pkl")  # would be picked up inside if the others were not seen
    mounts = _mounts(plan(_docker_cfg(checkpoint=ckpt, out=out), [], None, cwd=str(tmp_path)))
    assert other in mounts
    with pytest.raises(CheckpointError, match="rl_model_vecnormalize_1000_steps.pkl"):
        find(ckpt, "ppo", {})
    # $SIMEVAL_SB3_VECNORMALIZE passed in names a file: it is mounted too
    named = _file(tmp_path / "stats" / "vn.npz")
    monkeypatch.setenv("SIMEVAL_SB3_VECNORMALIZE", named)
    cfg = _docker_cfg(checkpoint=ckpt, out=out, pass_env=["SIMEVAL_SB3_VECNORMALIZE"])
    spec = plan(cfg, [], None, cwd=str(tmp_path))
    assert _mounts(spec)[named] == "ro" and spec.environment["SIMEVAL_SB3_VECNORMALIZE"] == named


def test_a_watched_run_s_params_in_the_parent_directory_are_mounted(tmp_path):
    watch = tmp_path / "run" / "checkpoints"
    watch.mkdir(parents=True)
    agent = _file(tmp_path / "run" / "params" / "agent.yaml", "seed: 1\n")
    _file(tmp_path / "run" / "notes.txt")
    spec = plan(_docker_cfg(watch=str(watch), out=str(tmp_path / "out")), [], None, cwd=str(tmp_path))
    assert _mounts(spec) == {str(watch): "ro", agent: "ro", str(tmp_path / "out"): "rw"}


def test_only_simeval_s_own_settings_pass_into_the_container_by_default(tmp_path, monkeypatch):
    host = {"WANDB_API_KEY": "w-secret", "MLFLOW_TRACKING_PASSWORD": "m-secret", "AWS_SECRET_ACCESS_KEY": "a-secret",
            "MUJOCO_GL": "egl", "HF_TOKEN": "h-secret"}  # fmt: skip
    for name, value in host.items():
        monkeypatch.setenv(name, value)
    for name in ("MUJOCO_EGL_DEVICE_ID", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    spec = plan(_docker_cfg(out="out"), [], None, cwd=str(tmp_path))
    assert spec.environment == {"MUJOCO_GL": "egl", "PYTHONUNBUFFERED": "1"}
    # a logger's own variables go with it
    env = plan(_docker_cfg(out="out", logger="wandb"), [], None, cwd=str(tmp_path)).environment
    assert env["WANDB_API_KEY"] == "w-secret" and not any(k.startswith(("MLFLOW_", "AWS_")) for k in env)
    env = plan(_docker_cfg(out="out", logger="mlflow"), [], None, cwd=str(tmp_path)).environment
    assert env["MLFLOW_TRACKING_PASSWORD"] == "m-secret" and "WANDB_API_KEY" not in env
    # --pass-env names others
    env = plan(_docker_cfg(out="out", pass_env=["HF_TOKEN"]), [], None, cwd=str(tmp_path)).environment
    assert env["HF_TOKEN"] == "h-secret" and "AWS_SECRET_ACCESS_KEY" not in env
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    for names, refusal in ((["NOT_SET_HERE"], "--pass-env NOT_SET_HERE: it is not set in this environment"),
                           (["A=1"], "--pass-env 'A=1': give variable names")):  # fmt: skip
        with pytest.raises(ContainerError, match="^" + re.escape(refusal)):
            plan(_docker_cfg(out="out", pass_env=names), [], None, cwd=str(tmp_path))


def test_the_container_has_no_network_unless_asked_or_a_logger_needs_one(tmp_path):
    def network(**settings) -> str | None:
        spec = plan(_docker_cfg(out="out", **settings), [], None, cwd=str(tmp_path))
        return spec.create_kwargs("1000:1000").get("network_mode")

    assert network() == "none"
    assert network(network="host") == "host"
    assert network(logger="wandb") is None  # the engine's default network (bridge)
    assert network(logger="mlflow", network="tracking") == "tracking"
    assert network(logger="tensorboard") == "none"
    # --serve is reached by training from outside: without a network it could not be
    with pytest.raises(ContainerError, match=r"^--serve in a container: .* give --network \(e.g. --network host\)\.$"):
        network(serve="cheetah", backend="ray")
    assert network(serve="cheetah", backend="ray", network="host") == "host"


def test_pass_env_is_a_repeatable_container_flag_that_stays_outside(tmp_path):
    from simeval.launch.cli import parse

    argv = ["--launcher", "docker", "--image", "img", "--pass-env", "A", "B", "--pass-env=C", "--episodes", "2"]
    parsed = parse([*argv, "--out", str(tmp_path / "out")])
    assert parsed.cfg.pass_env == ["A", "B", "C"]
    assert strip_flags(argv, ("--launcher", "--image", "--pass-env")) == ["--episodes", "2"]
    with pytest.raises(ConfigError, match="--pass_env is a container setting|--pass-env is a container setting"):
        parse(["--pass-env", "A"])


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

    from simeval.containers import engine as launcher

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


def test_a_policy_container_alone_mounts_the_checkpoint_and_the_simulators_get_its_address(tmp_path):
    """--policy-image: the server's container has the checkpoint (read-only) and the GPUs of --policy-gpus; the
    simulators' container has --out, --policy-server on the shared loopback, and the run's token in its
    environment only."""
    ckpt = _file(tmp_path / "run" / "model.pt")
    out = str(tmp_path / "out")
    argv = ["--checkpoint", ckpt, "--policy", "m:f", "--cameras", "track", "--out", out, "--policy-gpus", "1"]
    cfg = _docker_cfg(checkpoint=ckpt, policy="m:f", cameras=["track"], out=out, policy_image="pol", policy_gpus="1")
    pair = plan_pair(cfg, argv, None, cwd=str(tmp_path))
    server, sims = pair.server, pair.simulators
    assert _mounts(server) == {ckpt: "ro"} and _mounts(sims) == {out: "rw"}
    assert server.image == "pol" and server.entrypoint == ["python"] and server.network_mode == "none"
    assert server.command == ["-m", "simeval.serve_policy", ckpt, "--port", str(SERVER_PORT), "--policy", "m:f",
                              "--cameras", "track", "--image-size", "64", "--device", "cuda:0"]  # fmt: skip
    assert server.device_requests[0]["DeviceIDs"] == ["1"] and not sims.device_requests
    assert ckpt not in sims.command and "m:f" not in sims.command and "--policy-gpus" not in sims.command
    assert sims.command[-2:] == ["--policy-server", f"ws://127.0.0.1:{SERVER_PORT}"]
    token = server.environment["SIMEVAL_POLICY_SERVER_TOKEN"]
    assert len(token) >= 32 and sims.environment["SIMEVAL_POLICY_SERVER_TOKEN"] == token
    assert token not in " ".join(server.command + sims.command)
    sims.network_mode = "container:abc"  # as the engine sets it: the joined namespace's hostname is the server's
    assert "hostname" not in sims.create_kwargs("1000:1000") and "hostname" in server.create_kwargs("1000:1000")
    for settings, words in (
        ({"watch": str(tmp_path)}, "--policy-image serves one checkpoint: give --checkpoint FILE"),
        ({"checkpoint": ckpt, "policy_kwargs": {"a": 1}}, "--policy-kwargs is not served"),
    ):
        with pytest.raises(ContainerError, match=words):
            plan_pair(_docker_cfg(policy_image="pol", **settings), ["--checkpoint", ckpt], None, cwd=str(tmp_path))
    with pytest.raises(ConfigError, match="--policy-image is a container setting: it needs --launcher docker"):
        LaunchConfig(checkpoint=ckpt, policy_image="pol").validate()


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
    # This session's core runs these files on the host: inside, the batched MuJoCo env, the API and checkpoints show
    # that the image works (containers/ci.sh's full set, with test_native_envs and test_metrics, costs a minute more).
    env["SIMEVAL_CONTAINER_TESTS"] = " ".join(CONTAINER_TESTS)
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
    assert f"{_collected(CONTAINER_TESTS)} passed" in image_build.stdout  # the files asked for, all of them, no other
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


def _collected(files: tuple[str, ...]) -> int:
    """How many tests pytest collects from ``files`` here (what the image must pass)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(re.search(r"(\d+) tests? collected", proc.stdout).group(1))


def _inspect_while_it_runs(engine, proc, timeout: float = 120) -> dict:
    """The engine's inspect of the launcher's container, taken while ``proc`` (the host launcher) runs it."""
    import docker

    client = docker.DockerClient(base_url=engine["DOCKER_HOST"])
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        # The low-level list: containers.list() inspects each one it lists, and one removed in between raised.
        for container in client.api.containers(all=True, filters={"label": LABEL}):
            try:
                return client.api.inspect_container(container["Id"])
            except docker.errors.NotFound:
                continue  # removed in the meantime
        time.sleep(0.05)
    raise AssertionError("the launcher's container was not seen: " + (proc.stderr.read() if proc.poll() else ""))


def test_the_docker_launcher_evaluates_a_checkpoint_into_the_host_results(engine, image, tmp_path):
    """The shipped checkpoint, mounted as the one file, read-only, in a container with no network: host results."""
    from simeval.checkpoints import file_hash
    from simeval.checkpoints.shipped import SHIPPED_RUN

    checkpoint = os.path.join(SHIPPED_RUN, "step_000126976.pt")
    out = tmp_path / "out"
    proc = popen_cli(
        "--launcher", "docker", "--image", image, "--checkpoint", checkpoint, "--out", str(out), *SMALL, env=engine,
    )  # fmt: skip
    inspected = _inspect_while_it_runs(engine, proc)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    # what the container saw of the host: the checkpoint file (not its directory) and --out, nothing else
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in inspected["Mounts"]}
    real = os.path.realpath
    assert mounts == {checkpoint: (real(checkpoint), False), str(out): (real(out), True)}, mounts
    assert inspected["HostConfig"]["NetworkMode"] == "none"
    assert list(inspected["NetworkSettings"]["Networks"]) == ["none"]
    assert inspected["Config"]["User"] == "1000:1000"  # as root here: the image's non-root user
    assert not [e for e in inspected["Config"]["Env"] if e.startswith(("WANDB_", "MLFLOW_"))]
    (record,) = _records(out)
    assert record["status"] == "ok" and record["step"] == 126976
    assert record["checkpoint"] == checkpoint  # the same path inside and out
    assert record["checkpoint_sha256"] == file_hash(checkpoint)
    assert record["host"] == socket.gethostname()
    assert len(record["episode_returns"]) == 2
    # the container's logs were streamed here: its result table on stdout
    assert "reward_ci_low" in stdout and "results: " + str(out) in stdout
    assert _containers(engine) == [], "the container was not removed"
    # same numbers as a local run of the same command
    local = tmp_path / "local"
    assert cli("--checkpoint", checkpoint, "--out", str(local), *SMALL).returncode == 0
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


def test_a_policy_container_serves_the_simulators_container_on_their_shared_loopback(engine, image, tmp_path):
    """--policy-image: the shipped checkpoint served from its own container, the simulators in a second one in its
    network namespace (no other network); both non-root, both removed; the returns of a local --checkpoint run."""
    import docker

    from simeval.checkpoints.shipped import SHIPPED_RUN

    checkpoint = os.path.join(SHIPPED_RUN, "step_000126976.pt")
    out = tmp_path / "out"
    proc = popen_cli(
        "--launcher", "docker", "--image", image, "--policy-image", image, "--checkpoint", checkpoint,
        "--out", str(out), *SMALL, env=engine,
    )  # fmt: skip
    client = docker.DockerClient(base_url=engine["DOCKER_HOST"])
    seen: dict[str, dict] = {}
    deadline = time.time() + 240
    while len(seen) < 2 and time.time() < deadline and proc.poll() is None:
        for container in client.api.containers(filters={"label": LABEL}):  # low-level: see _inspect_while_it_runs
            try:
                seen.setdefault(container["Id"], client.api.inspect_container(container["Id"]))
            except docker.errors.NotFound:
                continue
        time.sleep(0.1)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert len(seen) == 2, f"saw {len(seen)} containers: {stderr[-2000:]}"
    (server,) = [c for c in seen.values() if c["Config"]["Entrypoint"] == ["python"]]
    (sims,) = [c for c in seen.values() if c is not server]
    assert server["HostConfig"]["NetworkMode"] == "none"
    assert sims["HostConfig"]["NetworkMode"] == f"container:{server['Id']}"
    mounts = {c["Id"]: {m["Destination"]: m["RW"] for m in c["Mounts"]} for c in (server, sims)}
    assert mounts == {server["Id"]: {checkpoint: False}, sims["Id"]: {str(out): True}}  # weights: the server only
    assert server["Config"]["User"] == sims["Config"]["User"] == "1000:1000"
    assert "served " in stderr and "requests in" in stderr  # the server's summary when it was stopped
    (record,) = _records(out)
    assert record["status"] == "ok" and record["checkpoint_format"] == "remote"
    assert record["host"] == socket.gethostname()
    assert _containers(engine) == [], "a container was not removed"
    local = tmp_path / "local"
    assert cli("--checkpoint", checkpoint, "--out", str(local), *SMALL).returncode == 0
    assert record["episode_returns"] == pytest.approx(_records(local)[0]["episode_returns"], rel=1e-4)


def test_a_policy_container_that_exits_before_it_listens_is_its_error_and_one_line(engine, image, tmp_path):
    """A policy the server cannot build: its error line, then the launcher's one line, exit code 2, nothing left."""
    from simeval.checkpoints.shipped import SHIPPED_RUN

    checkpoint = os.path.join(SHIPPED_RUN, "step_000126976.pt")
    proc = cli(
        "--launcher", "docker", "--image", image, "--policy-image", image, "--checkpoint", checkpoint,
        "--policy", "no_such_module:factory", "--out", str(tmp_path / "out"), *SMALL, env=engine,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = _errors(proc.stderr)
    assert errors[-1] == (
        "simeval-launch: error: the policy container exited (code 2) before its server listened: its error is above."
    ), proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert any(line.startswith("simeval.serve_policy: error:") and "no_such_module" in line for line in lines)
    assert _containers(engine) == [] and not (tmp_path / "out" / "results.jsonl").exists()
