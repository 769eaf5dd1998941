"""Entry point of a process-backend worker: :func:`main`, called by the bootstrap ``python -c CODE FD PATH...``.

The bootstrap (:mod:`simeval.backends.bootstrap`) sets ``sys.path`` to the parent's before this module
is imported: never ``python -m simeval.backends.child``, which would put the working directory (a run
directory, with whatever files lie in it) first on ``sys.path`` for every import below.

Started with subprocess rather than multiprocessing's spawn, because spawn re-imports the user's
``__main__`` script in the child before anything else runs, and a training script imports torch at
its top: ``init_fn`` (Isaac Lab's AppLauncher) must run before that.
:class:`~simeval.backends.host.WorkerHost` does the start-up in that order; this module only speaks
the socket protocol:

parent -> child: ``("init", setup)``, then ``("eval", step, weights, overrides)`` or ``("close",)``
child -> parent: ``("ready",)`` or ``("fatal", message, traceback)``, then one reply per eval, preceded
by ``("progress", (episodes, total, env_steps))`` messages while the round runs (at most every
:data:`PROGRESS_S` seconds, only when the counts changed).
"""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from simeval.backends.host import Reporting, WorkerHost
from simeval.backends.shm import SharedReader

PROGRESS_S = 0.5
"""How often a running round's counts are sent to the parent, at most."""


def serve(conn: Connection) -> None:
    """Start a worker from the parent's ``init`` message on ``conn``, then answer its rounds until ``close``."""
    kind, setup = conn.recv()
    if kind != "init":
        raise RuntimeError(f"a worker's first message must be init, got {kind!r}")
    sys.path[:] = setup["sys_path"]  # exactly the parent's (a Ray actor only adds the missing entries)
    host = WorkerHost(setup)
    if not host.start():
        conn.send(("fatal", *host.fatal))
        return
    conn.send(("ready",))

    reader = SharedReader()
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg[0] == "close":
                break
            _, step, described, overrides = msg
            with Reporting(host, conn.send, PROGRESS_S):
                reply = host.run(step, reader.read(described), overrides)
            conn.send(reply)
    finally:
        reader.close()
        host.close()


def exit_with_parent(interval: float = 0.5) -> None:
    """End this process within ``interval`` seconds of its parent's death (a SIGKILLed launcher or training script).

    A round in progress would otherwise run to its end, on the CPU or GPU, for nobody:
    the socket says the parent is gone only when the worker next speaks to it.
    """
    import os
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(interval)
        os._exit(1)  # no cleanup to wait for: the OS frees the process's memory, GPU context and files

    threading.Thread(target=watch, name="simeval-exit-with-parent", daemon=True).start()


def main() -> None:
    """Serve the parent on the socket whose file descriptor is ``sys.argv[1]``."""
    exit_with_parent()
    conn = Connection(int(sys.argv[1]))
    try:
        serve(conn)
    finally:
        conn.close()
