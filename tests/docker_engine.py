"""A real Docker engine for the tests: dockerd on a private socket, a Debian base made locally.

No image registry is reachable from CI, so the base image is built with
debootstrap from the Debian mirror the machine's apt sources already name,
plus the machine's CA certificates (pip inside a build needs them). dockerd
runs with a private data root and no bridge network; it is stopped by the PID
it wrote. Needs root; installs docker.io and debootstrap when missing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

from root_services import apt_install

PACKAGES = ("docker.io", "debootstrap")
DOCKER = "/usr/bin/docker"  # the engine's own 20.10 client: its build path needs no buildx
BASE_TAG = "local/debian:bookworm"
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "simeval")


def ensure_installed() -> None:
    apt_install(("dockerd", "debootstrap", DOCKER), PACKAGES)


def debian_mirror() -> str:
    """The Debian mirror this machine's apt is configured with (never hard-coded)."""
    texts = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]:
        with contextlib.suppress(OSError):
            texts.append(open(path).read())
    for text in texts:
        for stanza in re.split(r"\n\s*\n", text):  # deb822: "URIs:" + "Suites: bookworm ..."
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:(.*)$", stanza, re.M)
            if uris and suites and "bookworm" in suites.group(1).split() and not uris.group(1).startswith("cdrom"):
                return uris.group(1)
        for line in text.splitlines():  # one-line format: deb URL bookworm main
            m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s", line)
            if m:
                return m.group(1)
    raise RuntimeError("no Debian bookworm mirror in /etc/apt/sources.list*: cannot debootstrap a base image")


@contextlib.contextmanager
def docker_engine(*extra_args: str) -> Iterator[dict]:
    """Start dockerd on a private socket; yield the environment (DOCKER_HOST) that reaches it.

    ``extra_args`` go to dockerd (e.g. ``--log-driver=none``, a host's choice the launcher must cope with).
    """
    ensure_installed()
    base = tempfile.mkdtemp(prefix="simeval-docker-")
    sock = f"unix://{base}/docker.sock"
    pidfile = os.path.join(base, "dockerd.pid")
    log = open(os.path.join(base, "dockerd.log"), "w")
    cmd = [
        "dockerd",
        f"--data-root={base}/data",
        f"--exec-root={base}/exec",
        f"--pidfile={pidfile}",
        f"--host={sock}",
        "--bridge=none",  # no network of its own: containers use none or host
        "--iptables=false",
        "--ip6tables=false",
        "--ip-masq=false",
        *extra_args,
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env = dict(os.environ, DOCKER_HOST=sock, DOCKER_BUILDKIT="0")
    try:
        deadline = time.time() + 60
        while subprocess.run([DOCKER, "info"], env=env, capture_output=True).returncode != 0:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"dockerd did not start; see {base}/dockerd.log")
            time.sleep(0.3)
        yield {"DOCKER_HOST": sock, "DOCKER_BUILDKIT": "0", "SIMEVAL_DOCKER_BASE": base}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        netns = os.path.join(base, "exec", "netns", "default")
        if os.path.ismount(netns):
            subprocess.run(["umount", netns], check=False)
        shutil.rmtree(base, ignore_errors=True)


def base_rootfs_tar() -> str:
    """A tarball of a minimal Debian bookworm with the machine's CA bundle, cached across runs."""
    tar = os.path.join(CACHE, "debian-bookworm-minbase.tar")
    if os.path.exists(tar):
        return tar
    os.makedirs(CACHE, exist_ok=True)
    rootfs = tempfile.mkdtemp(prefix="simeval-rootfs-")
    try:
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", rootfs, debian_mirror()],
            check=True,
            capture_output=True,
        )
        # Outbound TLS may be intercepted here: pip and apt inside a build need the machine's CA bundle.
        extra = glob.glob("/usr/local/share/ca-certificates/*.crt")
        os.makedirs(os.path.join(rootfs, "usr/local/share/ca-certificates"), exist_ok=True)
        for crt in extra:
            shutil.copy(crt, os.path.join(rootfs, "usr/local/share/ca-certificates"))
        if os.path.exists("/etc/ssl/certs/ca-certificates.crt"):
            os.makedirs(os.path.join(rootfs, "etc/ssl/certs"), exist_ok=True)
            shutil.copy("/etc/ssl/certs/ca-certificates.crt", os.path.join(rootfs, "etc/ssl/certs"))
        partial = tar + ".partial"
        subprocess.run(["tar", "-C", rootfs, "-cf", partial, "."], check=True)
        os.replace(partial, tar)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return tar


def import_base_image(env: dict, tag: str = BASE_TAG) -> str:
    """``docker import`` the debootstrapped rootfs as ``tag`` (skipped when the engine has it)."""
    if subprocess.run([DOCKER, "image", "inspect", tag], env=env, capture_output=True).returncode == 0:
        return tag
    tar = base_rootfs_tar()
    with open(tar, "rb") as f:
        subprocess.run(
            [
                DOCKER,
                "import",
                "--change",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--change",
                "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
                "-",
                tag,
            ],
            stdin=f,
            env=env,
            check=True,
            capture_output=True,
        )
    return tag


def torch_wheelhouse(directory: str, spec: str) -> None:
    """Put the torch wheel pip would install here (for the CI pin, a CPU wheel) into ``directory``.

    pip resolves it through this machine's own configuration (local wheel
    folders first), so the image build installs the same torch offline.
    """
    os.makedirs(directory, exist_ok=True)
    if glob.glob(os.path.join(directory, "torch-*.whl")):
        return
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", directory, spec],
        check=True,
        capture_output=True,
    )


class EngineProxy:
    """A unix socket in front of the engine whose open connections a test can drop.

    What a client sees when the engine restarts or the connection is lost: the
    requests under way break, new connections work again. Clients reach it at
    ``host`` (a DOCKER_HOST value); ``seen`` waits for a request, ``cut`` drops
    the connections whose latest request matches.
    """

    REQUEST = re.compile(rb"^(?:GET|POST|PUT|DELETE|HEAD) (\S+) HTTP/1", re.M)

    def __init__(self, engine_host: str, directory: str) -> None:
        self.target = engine_host.removeprefix("unix://")
        self.path = tempfile.mktemp(prefix="proxy-", suffix=".sock", dir=directory)  # a unix path: keep it short
        self.host = "unix://" + self.path
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(64)
        self._changed = threading.Condition()
        self._latest: dict[socket.socket, str] = {}  # client connection -> the last request path on it
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            with self._changed:
                self._pairs.append((client, upstream))
            pair = (client, upstream)
            threading.Thread(target=self._pump, args=(client, upstream, pair, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, pair, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair: tuple, requests: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if requests:
                paths = [m.decode() for m in self.REQUEST.findall(data)]
                if paths:
                    with self._changed:
                        self._latest[src] = paths[-1]
                        self._changed.notify_all()
            try:
                dst.sendall(data)
            except OSError:
                break
        self._drop(pair)

    def _drop(self, pair: tuple) -> None:
        """Close both ends of one proxied connection (the pump on the other side then ends too)."""
        with self._changed:
            if pair in self._pairs:
                self._pairs.remove(pair)
            self._latest.pop(pair[0], None)
        for s in pair:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def seen(self, pattern: str, timeout: float = 60) -> bool:
        """Wait until an open connection's latest request path matches ``pattern`` (a regex)."""
        with self._changed:
            return self._changed.wait_for(
                lambda: any(re.search(pattern, p) for p in self._latest.values()), timeout=timeout
            )

    def cut(self, pattern: str) -> int:
        """Drop the connections whose latest request path matches ``pattern``; how many."""
        with self._changed:
            doomed = [pair for pair in self._pairs if re.search(pattern, self._latest.get(pair[0], ""))]
        for pair in doomed:
            self._drop(pair)
        return len(doomed)

    def close(self) -> None:
        self._server.close()
        with self._changed:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)
