"""Whole-file writes: a temporary file beside the target, fsync, rename, fsync the directory.

A reader (the watcher, a user's script) never sees half a file, and a crash
leaves the old file or the new one. The temporary name starts with '.', which
no ``--watch`` pattern matches.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> str:
    """Call ``write(f)`` on a temporary file, then move it to ``path`` (mode 0644); returns ``path``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; evaluators may run as another user
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path
