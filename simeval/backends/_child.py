"""Entry point of a process-backend worker: ``python -m simeval.backends._child FD``.

Started with subprocess rather than multiprocessing's spawn, because spawn
re-imports the user's ``__main__`` script in the child before anything else
runs, and a training script imports torch at its top: ``init_fn`` (Isaac
Lab's AppLauncher) must run before that. Here the order is explicit:

1. set sys.path / cwd like the parent's, 2. run ``init_fn``, 3. only then
unpickle the env / policy factories (unpickling may import torch), build the
worker and serve requests over the socket inherited as FD.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Connection


def _describe(exc: BaseException) -> tuple[str, str]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return f"{type(exc).__name__}: {exc}", tb


def _run_init_fn(init_fn) -> None:
    if init_fn is None:
        return
    if isinstance(init_fn, bytes):
        import pickle

        import cloudpickle  # noqa: F401  (cloudpickle's loader is plain pickle)

        init_fn = pickle.loads(init_fn)
    from simeval.spec import resolve_callable

    resolve_callable(init_fn, "init_fn")()


def serve(conn: Connection) -> None:
    kind, setup = conn.recv()
    assert kind == "init", kind
    sys.path[:] = setup["sys_path"]
    try:
        os.chdir(setup["cwd"])
    except OSError:
        pass
    try:
        _run_init_fn(setup["init_fn"])
        import pickle

        spec, env_factory, policy_factory = pickle.loads(setup["payload"])
        from simeval.backends.shm import SharedReader
        from simeval.worker import EvalWorker

        worker = EvalWorker(spec, env_factory=env_factory, policy_factory=policy_factory)
        worker.owns_process = True
        worker.build()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit
        conn.send(("fatal", *_describe(exc)))
        return
    conn.send(("ready",))
    reader = SharedReader()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg[0] == "close":
            break
        _, step, described = msg
        try:
            raw = worker.run(reader.read(described), step)
        except BaseException as exc:  # noqa: BLE001
            conn.send(("error", *_describe(exc)))
        else:
            conn.send(("result", raw))
    worker.close()


def main() -> None:
    conn = Connection(int(sys.argv[1]))
    try:
        serve(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
