"""``--launcher docker``: run the eval worker as a container on chosen GPUs.

    python -m simeval.launch --launcher docker --image simeval --gpus 1 --watch runs/exp1/ckpt

This module plans the container (plain data, no engine); ``container_engine``
runs it. The host checks the arguments first (the same one-line errors as a local run),
then starts ``python -m simeval.launch`` inside IMAGE through the Docker SDK for
Python with the other arguments: the config file, checkpoint, watch and
results directories are bind-mounted at their own absolute paths and the host's
working directory is the container's, so every path means the same inside.
``--gpus`` names host GPUs (``1``, ``0,2``, a UUID, or ``all``); only those are
requested, so evaluation never lands on the training GPU, and inside they are
``cuda:0``, ``cuda:1``, ... Logs stream to this terminal; SIGTERM or Ctrl-C stops
the container (the launcher inside abandons its round, nothing partial is
written), which is then removed; the container's exit code is returned.

Run as root, the container runs as the image's non-root user: simeval hands to
that user only the directories it creates for ``--out``; an ``--out`` that
already exists must be writable by that user (one line says what to chown).
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from simeval.launch.config import ConfigError, LaunchConfig

# Flags that steer the container itself; they are not forwarded into it.
CONTAINER_FLAGS = ("--launcher", "--image", "--gpus", "--network")
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
        """The Docker SDK's ``containers.create`` arguments for a container run as ``user``."""
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
