"""Whole-file writes: a temporary file beside the target, fsync, rename, fsync the directory.

A reader (the watcher, a user's script) never sees half a file, and a crash
leaves the old file or the new one. The temporary name starts with '.', which
no ``--watch`` pattern matches. The file gets the mode any new file of the
process gets: 0666 less the umask (0644 under the usual umask 022, 0600 under
077), applied by the kernel when the temporary file is created.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import BinaryIO

_TRIES = 100


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> str:
    """Call ``write(f)`` on a temporary file, then move it to ``path`` (mode 0666 less the umask); returns ``path``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = _create_temporary(directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def _create_temporary(directory: str) -> tuple[int, str]:
    """A new file ``.tmp-<random>.part`` in ``directory``, created exclusively (never through a link), and its fd.

    Created with mode 0666, so the kernel applies the umask (and a default ACL) as for
    any new file, without reading or changing the process-wide umask.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TRIES):
        tmp = os.path.join(directory, f".tmp-{secrets.token_hex(8)}.part")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no free temporary file name after {_TRIES} tries.")
