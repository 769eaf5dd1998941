"""How simeval starts a Python process of its own without the working directory on its ``sys.path``.

``python -m module`` puts the working directory first on ``sys.path`` (``python -c`` puts ``''``, the
same directory), so a ``textwrap.py`` in a run directory would be imported by the first module that
needs ``textwrap``. ``-P`` stops that only from Python 3.11, and ``-I`` also drops the ``PYTHON*``
variables (``PYTHONWARNINGS``, which the launcher sets for its workers, ``PYTHONHASHSEED``,
``PYTHONHOME``) and the user's site-packages. So simeval's own processes run a one-line ``-c``
bootstrap whose first statement, before anything is imported through ``sys.path``, replaces it:

- a process-backend worker (:func:`child_command`) gets exactly its parent's ``sys.path``, passed on
  its command line: the virtual environment, editable installs, ``PYTHONPATH`` and the directories of
  the user's own modules (a training script's directory) keep working in the child;
- an entry point (:func:`entry_code`, e.g. the launcher in Isaac Lab's image) drops the empty entry;
- the resource tracker that :mod:`multiprocessing.shared_memory` needs (:func:`start_resource_tracker`)
  is started the same way, where multiprocessing would start it with ``python -c`` in the working directory.

Only the interpreter's own start-up (``site``, ``.pth`` files of the site directories) runs before
the bootstrap, and Python adds the working directory only after it.
"""

from __future__ import annotations

import os
import signal
import sys

WITHOUT_CWD = "import sys; sys.path[:] = [p for p in sys.path if p]; "
"""The first statement of an entry point's ``-c`` code: ``''`` (the working directory) off ``sys.path``."""
TRACKER_CODE = WITHOUT_CWD + "from multiprocessing.resource_tracker import main; main({fd})"
"""``python -c TRACKER_CODE``: multiprocessing's resource tracker reading the pipe ``fd``."""
CHILD_CODE = "import sys; sys.path[:] = sys.argv[2:]; del sys.argv[2:]; from simeval.backends.child import main; main()"
"""``python -c CHILD_CODE FD PATH...``: the process backend's worker, on the parent's ``sys.path``."""


def child_command(fd: int, sys_path: list[str]) -> list[str]:
    """The command line of a process-backend worker serving the socket ``fd``, with ``sys_path`` as its path.

    Entries that are not strings are left out here (the import system skips them); the child sets its
    ``sys.path`` to the parent's list again when the ``init`` message arrives.
    """
    entries = [entry for entry in sys_path if isinstance(entry, str)]
    return [sys.executable, "-c", CHILD_CODE, str(fd), *entries]


def entry_code(module: str, function: str) -> str:
    """Source for ``python -c`` that calls ``module.function()`` with no working directory on ``sys.path``.

    ``python -c entry_code("simeval.serve_policy", "main_exit") ARGS`` runs as ``python -m
    simeval.serve_policy ARGS`` does, on any Python version, except that ``''`` (the working directory)
    is dropped from ``sys.path`` before ``module`` is imported.
    """
    return f"{WITHOUT_CWD}from {module} import {function}; {function}()"


def start_resource_tracker() -> None:
    """Start this process's multiprocessing resource tracker with no working directory on its path.

    A shared memory block is registered with a tracker process that unlinks what a killed process
    left behind. multiprocessing starts that process as ``python -c 'from multiprocessing.resource_tracker
    import main; main(FD)'`` in the working directory, where a ``multiprocessing.py`` lying there would
    be imported. This starts the same tracker, the same way, with :data:`TRACKER_CODE` (signals blocked
    until it ignores them, the interpreter's flags, stderr passed), and hands it to multiprocessing as a
    spawned child is handed its parent's tracker (``_fd``). A running tracker is kept. Where this cannot
    be done (not POSIX, a tracker without those attributes, a process that cannot be started)
    multiprocessing starts its own when it needs one, as before.
    """
    if os.name != "posix":
        return
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker  # noqa: SLF001 - multiprocessing's own child hand-over
    if not all(hasattr(tracker, name) for name in ("_lock", "_fd", "_pid")):
        return
    with tracker._lock:  # noqa: SLF001
        if tracker._fd is not None:  # noqa: SLF001
            return
        try:
            tracker._pid, tracker._fd = _spawn_tracker()  # noqa: SLF001
        except OSError:
            return


def _spawn_tracker() -> tuple[int, int]:
    """Start ``multiprocessing.resource_tracker.main`` reading a new pipe: (its pid, the pipe's write end)."""
    from multiprocessing import spawn, util

    read, write = os.pipe()
    fds = [read]
    try:
        fds.append(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        pass
    exe = spawn.get_executable()
    args = [exe, *util._args_from_interpreter_flags(), "-c", TRACKER_CODE.format(fd=read)]  # noqa: SLF001
    try:
        # Blocked until the tracker ignores them, so a ^C at start-up cannot end it (as multiprocessing does).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            pid = util.spawnv_passfds(exe, args, fds)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return pid, write
