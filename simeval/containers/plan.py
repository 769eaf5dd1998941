"""``--launcher docker``: plan the container the launcher runs in, on chosen GPUs.

    python -m simeval.launch --launcher docker --image simeval --gpus 1 --watch runs/exp1/ckpt

This module plans the container (plain data, no engine); :mod:`simeval.containers.engine`
runs it. It reads the launcher's settings through :class:`LaunchSettings` (the
fields it needs, declared here) and never imports the launcher. The host checks
the arguments first (the same one-line errors as a local run), then starts
the launcher (IMAGE's entrypoint: ``simeval-launch`` in simeval's images) through the Docker SDK
for Python with the other arguments. ``--gpus`` names host GPUs (``1``, ``0,2``, a UUID,
or ``all``); only those are requested, so evaluation never lands on the training GPU,
and inside they are ``cuda:0``, ``cuda:1``, ... Logs stream to this terminal; SIGTERM
or Ctrl-C stops the container (the launcher inside abandons its round, nothing
partial is written), which is then removed; the container's exit code is returned.

The container is a trust boundary: what it sees of the host is only what the
evaluation reads or writes, each at its own absolute path (the host's working
directory is the container's, so every path means the same inside):

- read-only: the ``--checkpoint`` file itself and what its format reads beside it
  (a training run's ``params/agent.yaml`` and ``params/env.yaml``, SB3's VecNormalize
  statistics), the ``--config`` and ``--suite`` files, the ``--watch`` directory (and
  its run's ``params/`` files when it is a ``checkpoints`` or ``nn`` subdirectory);
- read-write: ``--out``.

Paths are resolved (symlinks too) before anything is decided: the filesystem root, a
system directory (``/etc``, ``/usr``, ``/proc``, ... and whatever is under them), a
directory shared by everything (``/home``, ``/tmp``, ``/var``, ...) and the user's home
directory (or one above it) are refused in one line naming the flag. No environment
variable of the host passes in except simeval's rendering settings (``MUJOCO_GL``,
``MUJOCO_EGL_DEVICE_ID``, ``HF_HUB_OFFLINE``), a logger's own (``WANDB_*`` for
``--logger wandb``, ``MLFLOW_*`` for ``--logger mlflow``) and those named with
``--pass-env``. The network is ``none`` unless ``--network`` names one or a logger
needs one (then the engine's default).

Run as root, the container runs as the image's non-root user: simeval hands to
that user only the directories it creates for ``--out``; an ``--out`` that
already exists must be writable by that user (one line says what to chown).
"""

from __future__ import annotations

import glob
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from simeval.envs.simulators import registered

# Flags that steer the container itself; they are not forwarded into it. MULTI_FLAGS take several values.
CONTAINER_FLAGS = ("--launcher", "--image", "--gpus", "--network", "--pass-env", "--policy-image", "--policy-gpus")
# With --policy-image: the flags that say how the policy is built go to the policy's container, not the simulators'.
POLICY_FLAGS = ("--checkpoint", "--policy", "--format")
SERVER_PORT = 8000  # the policy server's port on the pair's own loopback (a private namespace unless --network host)
MULTI_FLAGS = ("--pass-env",)
SHM_SIZE = "1g"  # torch and the process backend stage tensors in /dev/shm (64 MB by default)
# Harmless settings that pass in when set: how each simulator renders (Simulator.settings_env), whether
# the HF hub is offline.
SETTINGS_ENV = (*dict.fromkeys(name for sim in registered() for name in sim.settings_env), "HF_HUB_OFFLINE")
# What a logger needs: its variables pass in, and the container gets a network (the engine's default).
LOGGER_ENV = {"wandb": "WANDB_", "mlflow": "MLFLOW_"}


class ContainerError(ValueError):
    """The container cannot be planned or run as asked; the message says what to change (one line)."""


class LaunchSettings(Protocol):
    """What the Docker launcher reads of the launcher's settings (``simeval.launch.config.LaunchConfig``)."""

    checkpoint: str | None
    watch: str | None
    suite: str | None
    serve: str | None
    out: str | None
    device: str | None
    logger: str
    image: str | None
    gpus: str | None
    network: str | None
    pass_env: list[str]
    policy_image: str | None
    policy_gpus: str | None
    policy: str | None
    policy_kwargs: dict
    format: str | None
    env: str | None
    cameras: list
    image_size: int
    frame_stack: int
    obs_norm: bool
    start_timeout: float


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SB3_VECNORMALIZE_ENV = "SIMEVAL_SB3_VECNORMALIZE"  # a statistics file named for SB3 zips (sb3_vecnormalize.find)
LABEL = "simeval.launcher"
# Never mounted, nor anything under them.
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr",
    "/var/run", "/var/lib/docker",
)  # fmt: skip
# Never mounted themselves (they hold far more than one run); a directory of its own under them is fine.
SHARED_DIRS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var", "/var/lib", "/var/tmp")  # noqa: S108 - refused, not used
# Where the training libraries' readers look beside a checkpoint (yaml_params.run_params): the run directory's
# params/, the checkpoint's own directory or, for skrl's checkpoints/ and rl_games' nn/, the one above it.
RUN_SUBDIRS = ("checkpoints", "nn")
PARAMS_FILES = ("agent.yaml", "env.yaml")


def gpu_device_requests(gpus: str | None) -> list[dict[str, Any]]:
    """The engine's DeviceRequests for ``--gpus``: ``all`` or comma-separated host GPU ids / UUIDs."""
    if not gpus:
        return []
    if gpus.strip() == "all":
        return [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]
    ids = [g.strip() for g in gpus.split(",")]
    if not all(re.fullmatch(r"\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-fA-F/-]+", g) for g in ids):
        raise ContainerError(f"--gpus {gpus!r}: give host GPU indices or UUIDs separated by commas (0,2), or all.")
    return [{"Driver": "", "Count": 0, "DeviceIDs": ids, "Capabilities": [["gpu"]], "Options": {}}]


def strip_flags(argv: list[str], flags: tuple[str, ...], multi: tuple[str, ...] = MULTI_FLAGS) -> list[str]:
    """argv without ``flags`` (``--flag value`` and ``--flag=value`` forms; ``multi`` flags take every value given)."""
    out, skip, many = [], False, False
    for arg in argv:
        if many and not arg.startswith("-"):
            continue
        many = False
        if skip:
            skip = False
        elif arg in flags:
            skip, many = arg not in multi, arg in multi
        elif not any(arg.startswith(f + "=") for f in flags):
            out.append(arg)
    return out


@dataclass
class ContainerSpec:
    """Everything the engine is asked for: plain data, built without touching the engine.

    ``volumes`` maps each host path (resolved) to where it appears inside (the path
    as given, made absolute) and its mode; ``directories`` are the mounted host
    directories to create when missing (``--watch``; ``--out`` is ``out``).
    """

    image: str
    command: list[str]
    volumes: dict[str, dict[str, str]]
    working_dir: str
    device_requests: list[dict[str, Any]] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    network_mode: str | None = None
    out: str = ""
    directories: list[str] = field(default_factory=list)
    entrypoint: list[str] | None = None

    def create_kwargs(self, user: str) -> dict[str, Any]:
        """The Docker SDK's ``containers.create`` arguments for a container run as ``user``."""
        kwargs = {
            "image": self.image,
            "command": self.command,
            "volumes": self.volumes,
            "working_dir": self.working_dir,
            "environment": self.environment,
            "user": user,
            "init": True,  # reaps the worker processes the launcher starts; forwards SIGTERM
            "shm_size": SHM_SIZE,
            "labels": {LABEL: "1"},
            "detach": True,
        }
        if self.entrypoint:
            kwargs["entrypoint"] = self.entrypoint
        if self.device_requests:
            kwargs["device_requests"] = self.device_requests  # the SDK takes the engine's field names
        if self.network_mode:
            kwargs["network_mode"] = self.network_mode
        if not (self.network_mode or "").startswith("container:"):  # a joined namespace has its container's name
            kwargs["hostname"] = socket.gethostname()  # results record the machine, not a container id
        return kwargs


def mount_refusal(real: str) -> str | None:
    """Why the resolved host path ``real`` must never be mounted into a container, or None when it may be.

    The words go in parentheses after the path; ``""`` for a shared directory, which needs none.
    """
    for tree in SYSTEM_TREES:
        if real == tree or real.startswith(tree + "/"):
            return f"under {tree}, a system directory"
    if real in SHARED_DIRS:
        return ""
    home = os.path.realpath(os.path.expanduser("~"))
    if home != "/" and real == home:
        return "your home directory"
    if home != "/" and home.startswith(real.rstrip("/") + "/"):
        return f"your home directory {home} is inside it"
    return None


class _Mounts:
    """The volumes of one plan: host paths checked, resolved, and mounted at the path given."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.volumes: dict[str, dict[str, str]] = {}

    def absolute(self, path: str) -> str:
        """``path`` made absolute against the working directory (not resolved: the container sees this path)."""
        return os.path.normpath(os.path.join(self.cwd, path))

    def add(self, flag: str, given: str, mode: str, is_file: bool, path: str | None = None) -> str:
        """Mount ``path`` (default: ``given``) for ``flag``; its absolute path. ContainerError if it may not be mounted.

        A file must exist and be a regular file; the host side of the mount is the
        resolved path, so a symlink cannot lead the decision astray.
        """
        inside = self.absolute(path or given)
        real = os.path.realpath(inside)
        why = mount_refusal(real)
        if why is not None:
            what = "copy the file to a directory of its own" if is_file else "give a directory of its own"
            shown = f"{real} ({why})" if why else real
            raise ContainerError(f"{flag} {given}: refuses to mount {shown} into the container: {what}.")
        if is_file and not os.path.isfile(real):
            problem = "no such file" if not os.path.lexists(inside) else "not a regular file"
            hint = (
                "give the checkpoint file itself (a directory is --watch)" if flag == "--checkpoint" else "fix the path"
            )
            raise ContainerError(f"{flag} {given}: {problem}; {hint}.")
        known = self.volumes.get(real)
        if known and known["bind"] != inside:
            raise ContainerError(
                f"{flag} {given}: its host path {real} is mounted at {known['bind']} already: give one path for both."
            )
        if not known or known["mode"] != "rw":
            self.volumes[real] = {"bind": inside, "mode": mode}
        return inside


def beside_checkpoint(path: str) -> list[str]:
    """The files a checkpoint's reader may open beside ``path`` that exist (as seen at ``path``, not resolved).

    A training run's ``params/agent.yaml`` and ``params/env.yaml`` (in the
    checkpoint's directory or, below ``checkpoints/`` or ``nn/``, the one above),
    and SB3's VecNormalize statistics for a zip (:func:`sb3_beside`).
    """
    here = os.path.dirname(path)
    runs = [os.path.dirname(here), here] if os.path.basename(here) in RUN_SUBDIRS else [here]
    found = [f for run in runs for f in params_files(run)]
    return found + (sb3_beside(path) if path.endswith(".zip") else [])


def params_files(run: str) -> list[str]:
    """The run directory ``run``'s ``params/agent.yaml`` and ``params/env.yaml`` that exist."""
    return [f for f in (os.path.join(run, "params", name) for name in PARAMS_FILES) if os.path.isfile(f)]


def sb3_beside(path: str) -> list[str]:
    """The VecNormalize files that ``sb3_vecnormalize.find`` may pick, or name in its refusal, for the zip ``path``.

    This step's ``<prefix>_vecnormalize_<step>_steps.{npz,pkl}`` (or, when the run
    saved others but not this one, the first other: the reader's refusal names it),
    then ``vecnormalize``/``vec_normalize`` ``.npz``/``.pkl`` beside the zip or in
    the folder named like it.
    """
    directory, name = os.path.split(path)
    found: list[str] = []
    steps = re.match(r"^(?P<prefix>.*)_(?P<step>\d+)_steps\.zip$", name)  # sb3_vecnormalize.CALLBACK_STEPS
    if steps:
        stem = os.path.join(directory, f"{steps['prefix']}_vecnormalize_{steps['step']}_steps")
        found = [stem + ext for ext in (".npz", ".pkl") if os.path.isfile(stem + ext)]
        siblings = glob.escape(steps["prefix"]) + "_vecnormalize_*_steps.*"
        others = sorted(glob.glob(os.path.join(glob.escape(directory), siblings)))
        found += others[:1] if not found else []
    for folder in (directory, os.path.join(directory, os.path.splitext(name)[0])):
        found += [
            os.path.join(folder, base + ext)
            for base in ("vecnormalize", "vec_normalize")
            for ext in (".npz", ".pkl")
            if os.path.isfile(os.path.join(folder, base + ext))
        ]
    return found


def environment(cfg: LaunchSettings, host: Mapping[str, str] | None = None) -> dict[str, str]:
    """The container's environment from the ``host``'s (default: this process's).

    simeval's own settings, the logger's variables and those ``--pass-env`` names; nothing else.
    """
    host = os.environ if host is None else host
    env = {name: host[name] for name in SETTINGS_ENV if name in host}
    prefix = LOGGER_ENV.get(cfg.logger)
    if prefix:
        env.update({k: v for k, v in host.items() if k.startswith(prefix)})
    for name in cfg.pass_env:
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise ContainerError(
                f"--pass-env {name!r}: give variable names (letters, digits, _), set to their values in this "
                "environment."
            )
        if name not in host:
            raise ContainerError(f"--pass-env {name}: it is not set in this environment: set it, or leave it out.")
        env[name] = host[name]
    env["PYTHONUNBUFFERED"] = "1"
    return env


def network_mode(cfg: LaunchSettings) -> str | None:
    """``--network``; else ``none``, or None (the engine's default network) when the logger needs one."""
    if cfg.network:
        return cfg.network
    if cfg.serve:
        raise ContainerError(
            "--serve in a container: training reaches it over the network, and the container has none by default: "
            "give --network (e.g. --network host)."
        )
    return None if cfg.logger in LOGGER_ENV else "none"


def _mount_inputs(cfg: LaunchSettings, mounts: _Mounts, config_path: str | None, env: dict[str, str]) -> list[str]:
    """Mount what the launcher inside reads (read-only); the mounted directories to create when missing."""
    if config_path:
        mounts.add("--config", config_path, "ro", is_file=True)
    if cfg.suite:
        mounts.add("--suite", cfg.suite, "ro", is_file=True)
    if SB3_VECNORMALIZE_ENV in env:
        mounts.add(f"${SB3_VECNORMALIZE_ENV}", env[SB3_VECNORMALIZE_ENV], "ro", is_file=True)
    if cfg.checkpoint:
        checkpoint = mounts.add("--checkpoint", cfg.checkpoint, "ro", is_file=True)
        for path in beside_checkpoint(checkpoint):
            mounts.add("--checkpoint", cfg.checkpoint, "ro", is_file=True, path=path)
    if not cfg.watch:
        return []
    watch = mounts.add("--watch", cfg.watch, "ro", is_file=False)
    if os.path.basename(watch) in RUN_SUBDIRS:  # the run's params/ are above its checkpoints/ or nn/
        for path in params_files(os.path.dirname(watch)):
            mounts.add("--watch", cfg.watch, "ro", is_file=True, path=path)
    return [watch]


def plan(cfg: LaunchSettings, argv: list[str], config_path: str | None, cwd: str | None = None) -> ContainerSpec:
    """Mounts, environment, network, GPU requests and the command line for the launcher inside the container."""
    mounts = _Mounts(cwd or os.getcwd())
    env = environment(cfg)
    network = network_mode(cfg)
    directories = _mount_inputs(cfg, mounts, config_path, env)
    out = mounts.add("--out", cfg.out or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S")), "rw", is_file=False)

    requests = gpu_device_requests(cfg.gpus)
    command = strip_flags(argv, CONTAINER_FLAGS) + ["--launcher", "local", "--out", out]
    if cfg.device:
        command += ["--device", cfg.device]  # also when it came from the host's SIMEVAL_DEFAULT_DEVICE
    elif requests:
        command += ["--device", "cuda:0"]  # the requested GPUs are renumbered from 0 inside
    if cfg.device and cfg.device.startswith("cuda:") and requests and requests[0]["DeviceIDs"]:
        index = cfg.device.split(":", 1)[1]
        if not index.isdigit() or int(index) >= len(requests[0]["DeviceIDs"]):
            raise ContainerError(
                f"--device {cfg.device}: the container sees only the {len(requests[0]['DeviceIDs'])} GPU(s) of "
                f"--gpus {cfg.gpus}, as cuda:0..; leave --device out or use cuda:0."
            )
    return ContainerSpec(
        image=cfg.image,
        command=command,
        volumes=mounts.volumes,
        working_dir=mounts.cwd,
        device_requests=requests,
        environment=env,
        network_mode=network,
        out=out,
        directories=directories,
    )


@dataclass
class PolicyPair:
    """``--policy-image``: the policy server's container and the simulators' container, planned together.

    ``server`` runs ``python -m simeval.serve_policy CHECKPOINT`` on ``127.0.0.1:SERVER_PORT`` (the only one to
    mount the checkpoint); ``simulators`` runs the launcher with ``--policy-server ws://127.0.0.1:SERVER_PORT``
    and joins the server's network namespace when it starts (``network_mode: container:<server>``), so the two
    share one loopback and nothing else. ``token`` is a fresh random token both are given, in their
    environment only; ``start_timeout`` the seconds the server may take to listen.
    """

    server: ContainerSpec
    simulators: ContainerSpec
    token: str
    start_timeout: float
    needs_env: bool = False  # no --env given: the simulators get the env the server names when it is ready


def _given(argv: list[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def plan_pair(cfg: LaunchSettings, argv: list[str], config_path: str | None, cwd: str | None = None) -> PolicyPair:
    """The two containers of ``--policy-image``: the checkpoint's policy served in one, the simulators in the other.

    The simulators' container is :func:`plan`'s, without the checkpoint (it never sees the weights) and
    with ``--policy-server``; the server's mounts the checkpoint (and what its format reads beside it)
    read-only, gets ``--policy-gpus`` and the network the simulators would have had (``none`` by default:
    only the shared loopback). ContainerError in one line for what the pair cannot serve.
    """
    import secrets

    from simeval.policy_kinds.wire import TOKEN_ENV

    if not cfg.checkpoint or not _given(argv, "--checkpoint"):
        raise ContainerError("--policy-image serves one checkpoint: give --checkpoint FILE on the command line.")
    for flag, refused in (
        ("--policy-kwargs", bool(cfg.policy_kwargs)),
        ("--no-obs-norm", not cfg.obs_norm),
        ("--frame-stack", cfg.frame_stack > 1),
    ):
        if refused:
            raise ContainerError(f"{flag} is not served by the policy's container: leave it out with --policy-image.")
    mounts = _Mounts(cwd or os.getcwd())
    env = environment(cfg)
    network = network_mode(cfg)
    checkpoint = mounts.add("--checkpoint", cfg.checkpoint, "ro", is_file=True)
    for path in beside_checkpoint(checkpoint):
        mounts.add("--checkpoint", cfg.checkpoint, "ro", is_file=True, path=path)
    if SB3_VECNORMALIZE_ENV in env:
        mounts.add(f"${SB3_VECNORMALIZE_ENV}", env[SB3_VECNORMALIZE_ENV], "ro", is_file=True)
    requests = gpu_device_requests(cfg.policy_gpus)
    command = ["-m", "simeval.serve_policy", checkpoint, "--port", str(SERVER_PORT)]
    env_given = _given(argv, "--env")  # else the checkpoint's: the simulators get the env the server names
    for flag, value in (("--env", env_given and cfg.env), ("--policy", cfg.policy), ("--format", cfg.format)):
        command += [flag, value] if value else []
    if cfg.cameras:
        command += ["--cameras", *cfg.cameras, "--image-size", str(cfg.image_size)]
    if requests:
        command += ["--device", "cuda:0"]
    token = secrets.token_urlsafe(24)
    server = ContainerSpec(
        image=cfg.policy_image or "",
        command=command,
        volumes=mounts.volumes,
        working_dir=mounts.cwd,
        device_requests=requests,
        environment={**env, TOKEN_ENV: token},
        network_mode=network,
        entrypoint=["python"],
    )
    without = _Without(cfg)
    simulators = plan(without, strip_flags(argv, POLICY_FLAGS), config_path, cwd)
    simulators.command += ["--policy-server", f"ws://127.0.0.1:{SERVER_PORT}"]
    simulators.environment[TOKEN_ENV] = token
    simulators.network_mode = None  # set to the server's namespace once it runs
    return PolicyPair(server, simulators, token, float(cfg.start_timeout), needs_env=not env_given)


class _Without:
    """``cfg`` as the simulators' container sees it: no checkpoint (the policy's container has it)."""

    def __init__(self, cfg: LaunchSettings) -> None:
        self._cfg = cfg
        self.checkpoint = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)
