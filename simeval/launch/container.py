"""``--launcher docker``: run the eval worker as a container on chosen GPUs.

    python -m simeval.launch --launcher docker --image simeval --gpus 1 --watch runs/exp1/ckpt

The host checks the arguments first (the same one-line errors as a local run),
then starts ``python -m simeval.launch`` inside IMAGE through the Docker SDK for
Python with the other arguments: the config file, checkpoint, watch and
results directories are bind-mounted at their own absolute paths and the host's
working directory is the container's, so every path means the same inside.
``--gpus`` names host GPUs (``1``, ``0,2``, a UUID, or ``all``); only those are
requested, so evaluation never lands on the training GPU, and inside they are
``cuda:0``, ``cuda:1``, ... Logs stream to this terminal; SIGTERM or Ctrl-C stops
the container (the launcher inside abandons its round, nothing partial is
written), which is then removed; the container's exit code is returned.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from simeval.launch.config import ConfigError, LaunchConfig

# Flags that steer the container itself; they are not forwarded into it.
CONTAINER_FLAGS = ("--launcher", "--image", "--gpus", "--network")
STOP_GRACE_S = 60  # SIGTERM first; SIGKILL only if the launcher inside has not exited by then
SHM_SIZE = "1g"  # torch and the process backend stage tensors in /dev/shm (64 MB by default)
PASS_ENV = re.compile(r"^(WANDB_|MLFLOW_|MUJOCO_GL$|MUJOCO_EGL_DEVICE_ID$|HF_HUB_OFFLINE$)")
LABEL = "simeval.launcher"


def gpu_device_requests(gpus: str | None) -> list[dict[str, Any]]:
    """The engine's DeviceRequests for ``--gpus``: ``all`` or comma-separated host GPU ids / UUIDs."""
    if not gpus:
        return []
    if gpus.strip() == "all":
        return [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]
    ids = [g.strip() for g in gpus.split(",")]
    if not all(re.fullmatch(r"\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-fA-F/-]+", g) for g in ids):
        raise ConfigError(f"--gpus {gpus!r}: give host GPU indices or UUIDs separated by commas (0,2), or all.")
    return [{"Driver": "", "Count": 0, "DeviceIDs": ids, "Capabilities": [["gpu"]], "Options": {}}]


def strip_flags(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """argv without ``flags`` (``--flag value`` and ``--flag=value`` forms)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not any(arg.startswith(f + "=") for f in flags):
            out.append(arg)
    return out


@dataclass
class ContainerSpec:
    """Everything the engine is asked for: plain data, built without touching the engine."""

    image: str
    command: list[str]
    volumes: dict[str, dict[str, str]]
    working_dir: str
    device_requests: list[dict[str, Any]] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    network_mode: str | None = None
    out: str = ""

    def create_kwargs(self, user: str) -> dict[str, Any]:
        kwargs = {
            "image": self.image,
            "command": self.command,
            "volumes": self.volumes,
            "working_dir": self.working_dir,
            "hostname": socket.gethostname(),  # results record the machine, not a container id
            "environment": self.environment,
            "user": user,
            "init": True,  # reaps the worker processes the launcher starts; forwards SIGTERM
            "shm_size": SHM_SIZE,
            "labels": {LABEL: "1"},
            "detach": True,
        }
        if self.device_requests:
            kwargs["device_requests"] = self.device_requests  # the SDK takes the engine's field names
        if self.network_mode:
            kwargs["network_mode"] = self.network_mode
        return kwargs


def plan(cfg: LaunchConfig, argv: list[str], config_path: str | None, cwd: str | None = None) -> ContainerSpec:
    """Mounts, GPU requests and the command line for the launcher inside the container."""
    cwd = cwd or os.getcwd()

    def absolute(path: str) -> str:
        return os.path.normpath(os.path.join(cwd, path))

    out = absolute(cfg.out or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S")))
    volumes: dict[str, dict[str, str]] = {}

    def mount(path: str, mode: str) -> None:
        if volumes.get(path, {}).get("mode") != "rw":
            volumes[path] = {"bind": path, "mode": mode}

    if config_path:
        mount(absolute(config_path), "ro")
    if cfg.checkpoint:
        mount(os.path.dirname(absolute(cfg.checkpoint)), "ro")
    if cfg.watch:
        mount(absolute(cfg.watch), "ro")
    mount(out, "rw")

    requests = gpu_device_requests(cfg.gpus)
    command = strip_flags(argv, CONTAINER_FLAGS) + ["--launcher", "local", "--out", out]
    if cfg.device:
        command += ["--device", cfg.device]  # also when it came from the host's SIMEVAL_DEFAULT_DEVICE
    elif requests:
        command += ["--device", "cuda:0"]  # the requested GPUs are renumbered from 0 inside
    if cfg.device and cfg.device.startswith("cuda:") and requests and requests[0]["DeviceIDs"]:
        index = cfg.device.split(":", 1)[1]
        if not index.isdigit() or int(index) >= len(requests[0]["DeviceIDs"]):
            raise ConfigError(
                f"--device {cfg.device}: the container sees only the {len(requests[0]['DeviceIDs'])} GPU(s) of "
                f"--gpus {cfg.gpus}, as cuda:0..; leave --device out or use cuda:0."
            )
    environment = {k: v for k, v in os.environ.items() if PASS_ENV.match(k)}
    environment["PYTHONUNBUFFERED"] = "1"
    return ContainerSpec(
        image=cfg.image,
        command=command,
        volumes=volumes,
        working_dir=cwd,
        device_requests=requests,
        environment=environment,
        network_mode=cfg.network,
        out=out,
    )


def _client():
    try:
        import docker
    except ImportError:
        raise ConfigError("--launcher docker needs the Docker SDK for Python: pip install 'simeval[docker]'.") from None
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "the default socket")
        raise ConfigError(
            f"cannot reach the Docker engine at {where} ({_first_line(exc)}); start dockerd or set DOCKER_HOST."
        ) from None
    return client


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _numeric_ids(client, image: str, user: str) -> tuple[int, int]:
    """uid, gid of ``user`` in ``image`` (asks the image when the user is a name)."""
    m = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    if m:
        return int(m.group(1)), int(m.group(2) or m.group(1))
    ids = client.containers.run(
        image, entrypoint=["sh", "-c"], command=["id -u; id -g"], user=user, network_mode="none", remove=True
    )
    uid, gid = ids.decode().split()
    return int(uid), int(gid)


def _readable_by(path: str, uid: int, gid: int) -> bool:
    st = os.stat(path)
    need = 0o5 if stat.S_ISDIR(st.st_mode) else 0o4
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & need == need


def _user_for(client, spec: ContainerSpec) -> tuple[str, dict[str, str]]:
    """Who the container runs as (never root), and environment that goes with it.

    A non-root caller's own uid:gid, so results belong to them; as root, the
    image's non-root user, and the results directory is handed to that user.
    """
    image_user = client.images.get(spec.image).attrs["Config"].get("User") or ""
    if os.geteuid() != 0:
        user = f"{os.getuid()}:{os.getgid()}"
        return user, ({} if user == image_user else {"HOME": "/tmp"})
    if image_user.split(":")[0] in ("", "root", "0"):
        image_user = "1000:1000"
    uid, gid = _numeric_ids(client, spec.image, image_user)
    for path, mount in spec.volumes.items():
        if mount["mode"] == "ro" and not _readable_by(path, uid, gid):
            raise ConfigError(
                f"{path} is not readable by the container's user {uid}:{gid} (mode {os.stat(path).st_mode & 0o777:o}): "
                "make it readable (chmod o+rX) or run the launcher as a non-root user, whom the container then runs as."
            )
    for root, dirs, files in os.walk(spec.out):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(name, uid, gid)
    return image_user, {}


def _stream(container, stdout: bool, sink) -> None:
    try:
        for chunk in container.logs(stream=True, follow=True, stdout=stdout, stderr=not stdout):
            sink.write(chunk)
            sink.flush()
    except Exception:  # noqa: BLE001 - the engine closing the stream ends the copy
        pass


def _signal(container, name: str) -> None:
    import docker

    try:
        container.kill(signal=name)
    except docker.errors.APIError:
        pass  # it exited in the meantime


def run(spec: ContainerSpec) -> int:
    """Start the container, stream its logs, stop it on SIGTERM/SIGINT, remove it; its exit code."""
    client = _client()
    import docker

    try:
        client.images.get(spec.image)
    except docker.errors.ImageNotFound:
        raise ConfigError(
            f"image {spec.image!r} is not on this Docker engine: build it "
            f"(docker build -f containers/Dockerfile -t {spec.image} .) or docker pull it."
        ) from None
    for path in spec.volumes:
        if not os.path.exists(path):
            os.makedirs(path, exist_ok=True)  # --out, or a --watch directory training has not created yet
    user, extra_env = _user_for(client, spec)
    kwargs = spec.create_kwargs(user)
    kwargs["environment"] = {**kwargs["environment"], **extra_env}
    signals: list[int] = []
    try:
        container = client.containers.create(**kwargs)
    except docker.errors.APIError as exc:
        raise ConfigError(f"the Docker engine refused the container ({_first_line(exc)}).") from None
    previous = {s: signal.signal(s, lambda signum, _: signals.append(signum)) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"container {container.short_id} ({spec.image}) as {user}: results in {spec.out}", flush=True)
        streams = [
            threading.Thread(target=_stream, args=(container, True, sys.stdout.buffer), daemon=True),
            threading.Thread(target=_stream, args=(container, False, sys.stderr.buffer), daemon=True),
        ]
        try:
            container.start()
        except docker.errors.APIError as exc:
            hint = (
                "install the NVIDIA Container Toolkit on this host, or leave out --gpus"
                if spec.device_requests
                else "check the image and the engine's log"
            )
            reason = _first_line(exc)
            raise ConfigError(f"the Docker engine could not start the container ({reason}); {hint}.") from None
        for t in streams:
            t.start()
        status: dict[str, Any] = {}
        waiter = threading.Thread(target=lambda: status.update(container.wait()), daemon=True)
        waiter.start()
        term_sent, killed = None, False
        while waiter.is_alive():
            waiter.join(0.5)
            if signals and term_sent is None:
                term_sent = time.monotonic()
                print(
                    f"stopping container {container.short_id} (SIGTERM; a second signal or {STOP_GRACE_S} s kills it).",
                    flush=True,
                )
                _signal(container, "SIGTERM")
            elif term_sent is not None and not killed:
                if len(signals) > 1 or time.monotonic() - term_sent > STOP_GRACE_S:
                    killed = True
                    _signal(container, "SIGKILL")
        for t in streams:
            t.join(5)
        return int(status.get("StatusCode", 1))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass
