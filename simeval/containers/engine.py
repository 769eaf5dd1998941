"""``--launcher docker``, the engine side: start the planned container, stream its logs, stop and remove it.

Talks to the Docker engine through the Docker SDK for Python. Who the
container runs as: a non-root caller's own uid:gid; as root, the image's
non-root user, to whom simeval hands only the directories it creates for
``--out`` (an ``--out`` that already exists must be writable by that user: one
line says what to chown). SIGTERM or Ctrl-C sends SIGTERM to the container; a
second signal, or ``STOP_GRACE_S``, kills it. The container is always removed.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, BinaryIO

from simeval.containers.plan import ContainerError, ContainerSpec, PolicyPair
from simeval.extras import require_extra

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

STOP_GRACE_S = 60  # SIGTERM first; SIGKILL only if the launcher inside has not exited by then
STREAM_END_GRACE_S = 2.0  # a log stream that broke is the container's end only if it stops within this
STOPPED = ("exited", "dead", "removing")
SERVER_STOP_S = 10  # the policy server stops at SIGTERM (printing what it served); SIGKILL after this
# serve_policy's ready line: "serving CHECKPOINT (ENV, step N) on ws://HOST:PORT"
READY = re.compile(rb"^serving .* \((?P<env>[^(),\s]+), step -?\d+\) on ws://\S+:\d+\s*$", re.M)


def _client() -> DockerClient:
    require_extra(("docker", "requests", "urllib3"), "docker", "--launcher docker")
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "the default socket")
        raise ContainerError(
            f"cannot reach the Docker engine at {where} ({_first_line(exc)}); start dockerd or set DOCKER_HOST."
        ) from None
    return client


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _numeric_ids(client: DockerClient, image: str, user: str) -> tuple[int, int]:
    """uid, gid of ``user`` in ``image`` (asks the image when the user is a name)."""
    m = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    if m:
        return int(m.group(1)), int(m.group(2) or m.group(1))
    ids = client.containers.run(
        image, entrypoint=["sh", "-c"], command=["id -u; id -g"], user=user, network_mode="none", remove=True
    )
    uid, gid = ids.decode().split()
    return int(uid), int(gid)


def _permits(path: str, uid: int, gid: int, need: int) -> bool:
    """Whether ``uid:gid`` (no supplementary groups) has the ``need`` bits (rwx as 0o7) on ``path``."""
    st = os.stat(path)
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return (st.st_mode >> shift) & need == need


def _readable_by(path: str, uid: int, gid: int) -> bool:
    return _permits(path, uid, gid, 0o5 if os.path.isdir(path) else 0o4)


def _make_dirs(path: str) -> list[str]:
    """Create ``path`` and its missing parents; the directories this call created, outermost first."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    created = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue  # made in the meantime by someone else: not ours
        created.append(directory)
    return created


def _make_mount_dirs(spec: ContainerSpec) -> list[str]:
    """Create the mounted directories that are missing; the directories created for ``--out``.

    ``--out`` first, so the parents it needed count as its own; then e.g. a
    ``--watch`` directory training has not created yet. Mounted files are never
    made: the plan mounts only files that exist.
    """
    created = _make_dirs(spec.out)
    for path in spec.directories:
        _make_dirs(path)
    return created


def _user_for(
    client: DockerClient, spec: ContainerSpec, created: list[str] | tuple[str, ...] = ()
) -> tuple[str, dict[str, str]]:
    """Who the container runs as (never root), and environment that goes with it.

    A non-root caller's own uid:gid, so results belong to them; as root, the
    image's non-root user. Then only the directories ``created`` for ``--out``
    by this launch are handed to that user: an existing ``--out`` (and its
    ``results.jsonl``) must be writable by that user already, it is never
    chowned (it may be big or shared).
    """
    image_user = client.images.get(spec.image).attrs["Config"].get("User") or ""
    if os.geteuid() != 0:
        user = f"{os.getuid()}:{os.getgid()}"
        return user, ({} if user == image_user else {"HOME": "/tmp"})  # noqa: S108 - the container's own /tmp
    if image_user.split(":")[0] in ("", "root", "0"):
        image_user = "1000:1000"
    uid, gid = _numeric_ids(client, spec.image, image_user)
    for directory in created:  # first: a refused launch must not leave a --out the next one cannot use
        os.chown(directory, uid, gid)
    for path, mount in spec.volumes.items():
        if mount["mode"] == "ro" and not _readable_by(path, uid, gid):
            raise ContainerError(
                f"{path} is not readable by the container's user {uid}:{gid} (mode {os.stat(path).st_mode & 0o777:o}): "
                "make it readable (chmod o+rX) or run the launcher as a non-root user, whom the container then runs as."
            )
    results = os.path.join(spec.out, "results.jsonl")
    unwritable = [
        path
        for path, need in ((spec.out, 0o3), (results, 0o6))  # a directory: write + search; results: read + write
        if os.path.exists(path) and not _permits(path, uid, gid, need)
    ]
    if unwritable:
        owners = ", ".join(f"{p} (owner {_owner(p)}, mode {os.stat(p).st_mode & 0o777:o})" for p in unwritable)
        paths = " ".join(shlex.quote(p) for p in unwritable)
        raise ContainerError(
            f"{owners} {'is' if len(unwritable) == 1 else 'are'} not writable by the container's user {uid}:{gid}: "
            f"chown {uid}:{gid} {paths}, or run the launcher as that non-root user."
        )
    return image_user, {}


def _owner(path: str) -> str:
    st = os.stat(path)
    return f"{st.st_uid}:{st.st_gid}"


_WARN_LOCK = threading.Lock()  # both log streams may fail at once: one whole line each


def _warn(message: str) -> None:
    with _WARN_LOCK:
        try:
            sys.stderr.write(f"simeval-launch: warning: {message}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # stderr itself is gone: nowhere left to say it


def _stopped(container: Container) -> bool:
    """Whether the container has exited or is gone, waiting up to STREAM_END_GRACE_S for it to get there."""
    import docker

    deadline = time.monotonic() + STREAM_END_GRACE_S
    while True:
        try:
            container.reload()
        except docker.errors.NotFound:
            return True
        except Exception:  # noqa: BLE001 - the engine cannot say: not known to have stopped
            return False
        if container.status in STOPPED:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _end_of_stream(container: Container, exc: BaseException) -> bool:
    """Whether ``exc`` is only the engine ending a log stream because the container exited or was removed."""
    import docker
    import requests
    import urllib3

    if isinstance(exc, docker.errors.NotFound):
        return True  # removed: its logs are over
    broken = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)
    return isinstance(exc, (*broken, urllib3.exceptions.ProtocolError)) and _stopped(container)


def _stream(container: Container, stdout: bool, sink: BinaryIO) -> None:
    """Copy the container's stdout (or stderr) log to ``sink`` until the engine ends it.

    The engine ends the stream when the container exits; that end may also come
    as a broken connection or a removed container, and then the copy stops
    silently. Any other failure is one line on stderr, never lost.
    """
    try:
        for chunk in container.logs(stream=True, follow=True, stdout=stdout, stderr=not stdout):
            sink.write(chunk)
            sink.flush()
    except Exception as exc:  # noqa: BLE001 - reported below unless it is the stream's end
        if not _end_of_stream(container, exc):
            _warn(
                f"stopped copying the {'stdout' if stdout else 'stderr'} log of container {container.short_id} "
                f"({type(exc).__name__}: {_first_line(exc)}); its output from here on is not shown."
            )


def _signal(container: Container, name: str) -> None:
    import docker

    try:
        container.kill(signal=name)
    except docker.errors.APIError:
        pass  # it exited in the meantime


def run(spec: ContainerSpec) -> int:
    """Start the container, stream its logs, stop it on SIGTERM/SIGINT, remove it; its exit code."""
    client = _client()
    _check_image(client, spec)
    user, extra_env = _user_for(client, spec, _make_mount_dirs(spec))
    signals: list[int] = []
    container = _create(client, spec, user, extra_env)
    previous = _catch_signals(signals)
    try:
        print(f"container {container.short_id} ({spec.image}) as {user}: results in {spec.out}", flush=True)
        streams = _log_streams(container)
        _start(container, spec)
        for t in streams:
            t.start()
        status = _wait(container, signals)
        for t in streams:
            t.join(5)
        return int(status.get("StatusCode", 1))
    finally:
        _restore_signals(previous)
        _remove(container)


def run_pair(pair: PolicyPair) -> int:
    """``--policy-image``: start the policy server's container, wait until it listens, run the simulators' container
    in its network namespace (their shared loopback), then stop and remove both; the simulators' exit code."""
    client = _client()
    _check_image(client, pair.server)
    _check_image(client, pair.simulators)
    server_user, server_env = _user_for(client, pair.server)
    sim_user, sim_env = _user_for(client, pair.simulators, _make_mount_dirs(pair.simulators))
    signals: list[int] = []
    previous = _catch_signals(signals)
    server = sim = None
    try:
        server = _create(client, pair.server, server_user, server_env)
        print(f"policy container {server.short_id} ({pair.server.image}) as {server_user}", flush=True)
        ready: dict[str, str] = {}
        watcher = threading.Thread(target=_watch_ready, args=(server, ready), daemon=True)
        errors = threading.Thread(target=_stream, args=(server, False, sys.stderr.buffer), daemon=True)
        _start(server, pair.server)
        watcher.start()
        errors.start()
        try:
            if not _wait_ready(server, ready, signals, pair.start_timeout):
                return 128 + signals[0] if signals else 2
        except ContainerError:
            for t in (watcher, errors):  # the server's own error line first, then ours
                t.join(STREAM_END_GRACE_S)
            raise
        pair.simulators.network_mode = f"container:{server.id}"
        if pair.needs_env:
            pair.simulators.command += ["--env", ready["env"]]
        sim = _create(client, pair.simulators, sim_user, sim_env)
        print(
            f"container {sim.short_id} ({pair.simulators.image}) as {sim_user}: results in {pair.simulators.out}",
            flush=True,
        )
        streams = _log_streams(sim)
        _start(sim, pair.simulators)
        for t in streams:
            t.start()
        status = _wait(sim, signals)
        for t in streams:
            t.join(5)
        return int(status.get("StatusCode", 1))
    finally:
        _restore_signals(previous)
        if server is not None:
            _stop_server(server)
        for container in (sim, server):
            if container is not None:
                _remove(container)


def _watch_ready(server: Container, ready: dict[str, str]) -> None:
    """Copy the server's stdout log here; note the env of its ready line (``serving ... on ws://...``) in ``ready``."""
    seen = b""
    try:
        for chunk in server.logs(stream=True, follow=True, stdout=True, stderr=False):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            if "env" not in ready:
                seen = (seen + chunk)[-4096:]
                m = READY.search(seen)
                if m:
                    ready["env"] = m["env"].decode()
    except Exception as exc:  # noqa: BLE001 - the stream's end, or one line
        if not _end_of_stream(server, exc):
            _warn(f"stopped copying the policy container's log ({type(exc).__name__}: {_first_line(exc)}).")


def _wait_ready(server: Container, ready: dict[str, str], signals: list[int], timeout: float) -> bool:
    """Whether the policy server listens within ``timeout`` s; False after a signal. ContainerError when it exits
    first or does not answer in time."""
    import docker

    deadline = time.monotonic() + timeout
    while "env" not in ready:
        if signals:
            print(f"stopping policy container {server.short_id}.", flush=True)
            return False
        try:
            server.reload()
        except docker.errors.NotFound:
            raise ContainerError("the policy container was removed before its server listened.") from None
        if server.status in STOPPED:
            code = server.attrs.get("State", {}).get("ExitCode")
            raise ContainerError(
                f"the policy container exited (code {code}) before its server listened: its error is above."
            )
        if time.monotonic() > deadline:
            raise ContainerError(
                f"the policy container's server did not listen within {timeout:g} s (--start-timeout)."
            )
        time.sleep(0.2)
    return True


def _stop_server(server: Container) -> None:
    """SIGTERM the policy server (it prints what it served), SIGKILL if it is still running after SERVER_STOP_S."""
    _signal(server, "SIGTERM")
    try:
        server.wait(timeout=SERVER_STOP_S)
    except Exception:  # noqa: BLE001 - a timeout (requests' or urllib3's) or a lost engine: kill and move on
        _signal(server, "SIGKILL")


def _check_image(client: DockerClient, spec: ContainerSpec) -> None:
    """A ContainerError unless ``spec.image`` is on the engine (simeval neither builds nor pulls it)."""
    import docker

    try:
        client.images.get(spec.image)
    except docker.errors.ImageNotFound:
        raise ContainerError(
            f"image {spec.image!r} is not on this Docker engine: build it "
            f"(docker build -f containers/Dockerfile -t {spec.image} .) or docker pull it."
        ) from None


def _create(client: DockerClient, spec: ContainerSpec, user: str, extra_env: dict[str, str]) -> Container:
    """Create (not start) the planned container, run as ``user`` with ``extra_env`` added to its environment."""
    import docker

    kwargs = spec.create_kwargs(user)
    kwargs["environment"] = {**kwargs["environment"], **extra_env}
    try:
        return client.containers.create(**kwargs)
    except docker.errors.APIError as exc:
        raise ContainerError(f"the Docker engine refused the container ({_first_line(exc)}).") from None


def _catch_signals(signals: list[int]) -> dict:
    """Record SIGTERM and SIGINT in ``signals`` instead of dying of them; the handlers they replace."""
    return {s: signal.signal(s, lambda signum, _: signals.append(signum)) for s in (signal.SIGTERM, signal.SIGINT)}


def _restore_signals(previous: dict) -> None:
    """Put back the signal handlers ``_catch_signals`` replaced."""
    for s, handler in previous.items():
        signal.signal(s, handler)


def _log_streams(container: Container) -> list[threading.Thread]:
    """Daemon threads (not started) that copy the container's stdout and stderr logs to the launcher's own."""
    return [
        threading.Thread(target=_stream, args=(container, True, sys.stdout.buffer), daemon=True),
        threading.Thread(target=_stream, args=(container, False, sys.stderr.buffer), daemon=True),
    ]


def _start(container: Container, spec: ContainerSpec) -> None:
    """Start the container; a ContainerError with a hint (the NVIDIA toolkit when GPUs were asked for) if it cannot."""
    import docker

    try:
        container.start()
    except docker.errors.APIError as exc:
        hint = (
            "install the NVIDIA Container Toolkit on this host, or leave out --gpus"
            if spec.device_requests
            else "check the image and the engine's log"
        )
        reason = _first_line(exc)
        raise ContainerError(f"the Docker engine could not start the container ({reason}); {hint}.") from None


def _wait(container: Container, signals: list[int]) -> dict[str, Any]:
    """The engine's wait() status once the container exits, stopping it on ``signals`` meanwhile.

    The wait runs on a thread, so that signals are acted on while it blocks; a
    wait the engine breaks off is a ContainerError.
    """
    status: dict[str, Any] = {}
    lost: list[Exception] = []

    def wait() -> None:
        try:
            status.update(container.wait())
        except Exception as exc:  # noqa: BLE001 - raised by run() in the main thread
            lost.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    _stop_on_signals(container, waiter, signals)
    if lost:
        raise ContainerError(
            f"the launcher lost contact with the Docker engine while waiting for container {container.short_id} "
            f"({type(lost[0]).__name__}: {_first_line(lost[0])})."
        )
    return status


def _stop_on_signals(container: Container, waiter: threading.Thread, signals: list[int]) -> None:
    """While ``waiter`` runs: SIGTERM the container at the first signal, SIGKILL at a second or after STOP_GRACE_S."""
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


def _remove(container: Container) -> None:
    import docker
    import requests

    try:
        container.remove(force=True)
    except docker.errors.APIError:
        pass  # gone already, or its removal is under way
    except requests.exceptions.RequestException as exc:
        _warn(
            f"could not remove container {container.short_id} ({_first_line(exc)}); "
            f"remove it with: docker rm -f {container.id}"
        )
