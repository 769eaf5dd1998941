"""What the root-only integration tests (a real Slurm, a real Docker engine) share."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest


def apt_install(binaries: tuple[str, ...], packages: tuple[str, ...]) -> None:
    """Install ``packages`` with apt-get unless every one of ``binaries`` is already there."""
    if all(shutil.which(b) or os.path.exists(b) for b in binaries):
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"{', '.join(packages)} not installed and installing needs root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        check=True,
        env=env,
        capture_output=True,
    )


@contextlib.contextmanager
def started_or_skip(service: Callable[[], contextlib.AbstractContextManager], what: str) -> Iterator[dict]:
    """Enter ``service()`` (root only) and yield what it yields; skip when it cannot start here.

    In CI (SIMEVAL_REQUIRE_ALL=1) a skip is a failure, so nothing silently goes untested.
    """
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root (CI runs as root)")
    cm = service()
    try:
        env = cm.__enter__()
    except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"could not start {what} here: {exc}")
    try:
        yield env
    finally:
        cm.__exit__(None, None, None)
