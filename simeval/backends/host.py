"""A worker in a process of its own (child process or Ray actor): set up, then serve rounds.

The parent packs a :class:`~simeval.backends.base.WorkerRecipe` with
:func:`make_setup` (factories cloudpickled, ``init_fn`` kept as a
``module:function`` string or pickled bytes). In the worker process,
:class:`WorkerHost` does the steps in an order Isaac Lab needs:

1. sys.path and cwd like the parent's (multiprocessing's resource tracker started first, never from
the working directory: :mod:`~simeval.backends.bootstrap`), 2. run ``init_fn`` (e.g. AppLauncher),
3. only then unpickle the factories (unpickling may import torch), 4. build
the env and policy. A failure in any step is kept as the host's ``fatal``
error: the process is of no further use and is replaced. Each round's reply
is a plain tuple: ``("result", raw)``, ``("error", message, traceback)`` or
``("fatal", message, traceback)``.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from simeval.backends.base import WorkerRecipe
from simeval.backends.bootstrap import start_resource_tracker
from simeval.refs import resolve_callable


def make_setup(recipe: WorkerRecipe) -> dict[str, Any]:
    """Plain data (and pickled bytes) that a worker process starts from."""
    import cloudpickle

    init_fn = recipe.init_fn
    return {
        "sys_path": list(sys.path),
        "cwd": os.getcwd(),
        "init_fn": init_fn if init_fn is None or isinstance(init_fn, str) else cloudpickle.dumps(init_fn),
        "payload": cloudpickle.dumps((recipe.settings, recipe.env, recipe.policy_factory)),
    }


def describe(exc: BaseException) -> tuple[str, str]:
    """(``Type: message``, formatted traceback) of an exception, for the parent."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return f"{type(exc).__name__}: {exc}", tb


def run_init_fn(init_fn: str | bytes | None) -> None:
    """Call ``init_fn``: a ``"module:function"`` reference or a pickled callable; None does nothing."""
    if init_fn is None:
        return
    if isinstance(init_fn, bytes):
        import pickle

        import cloudpickle  # noqa: F401  (cloudpickle's loader is plain pickle)

        init_fn = pickle.loads(init_fn)  # noqa: S301 - the parent process's own pickle, over its private pipe

    resolve_callable(init_fn, "init_fn")()


class WorkerHost:
    """Everything a worker process runs: start-up in the right order, then one round per call."""

    def __init__(self, setup: dict[str, Any]) -> None:
        self.setup = setup
        self.worker = None
        self.fatal: tuple[str, str] | None = None

    def start(self) -> bool:
        """Run init_fn, unpickle the factories, build env and policy; False (and ``fatal``) on failure."""
        setup = self.setup
        start_resource_tracker()  # before a multiprocessing lock (torchrl's VecNorm) starts one from the cwd
        for entry in setup.get("sys_path", []):
            if entry not in sys.path:
                sys.path.append(entry)
        try:
            os.chdir(setup["cwd"])
        except (KeyError, OSError):
            pass
        try:
            run_init_fn(setup["init_fn"])
            import pickle

            settings, env_factory, policy_factory = pickle.loads(setup["payload"])  # noqa: S301 - the parent's
            from simeval.worker.eval_worker import EvalWorker

            self.worker = EvalWorker(settings, env_factory=env_factory, policy_factory=policy_factory)
            self.worker.owns_process = True
            self.worker.build()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            self.fatal = describe(exc)
            return False
        return True

    def run(self, step: int, weights: Any, overrides: Any = None, shard: Any = None) -> tuple:
        """One round (or ``shard``'s part): ``("result", raw)``, or ``("error" | "fatal", message, traceback)``."""
        if self.fatal is not None:
            return ("fatal", *self.fatal)
        try:
            return ("result", self.worker.run(weights, step, overrides, shard))
        except BaseException as exc:  # noqa: BLE001 - the worker stays up for the next request
            return ("error", *describe(exc))

    def close(self) -> None:
        """Close the worker, if one was built."""
        if self.worker is not None:
            self.worker.close()


class Reporting:
    """While a round runs (the ``with`` block), a thread sends ``("progress", counts)`` through ``send``.

    ``counts`` is the host's worker's ``(episodes, total, env_steps)``
    (:class:`~simeval.worker.rollout.RoundCounter`), sent every ``interval`` seconds when it changed. The
    thread has stopped when the block ends, so every progress message of a round is sent before its reply.
    A failing ``send`` ends the reporting, never the round.
    """

    def __init__(self, host: WorkerHost, send: Callable[[tuple], Any], interval: float) -> None:
        self.host, self.send, self.interval = host, send, interval
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._report, name="simeval-progress", daemon=True)

    def __enter__(self) -> None:
        if self.host.worker is not None:
            self.thread.start()

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def _report(self) -> None:
        counter, last = self.host.worker.counter, None
        while not self.done.wait(self.interval):
            now = counter.snapshot()
            if now is not None and now != last:
                try:
                    self.send(("progress", now))
                except Exception:  # noqa: BLE001 - progress is best effort: the round goes on
                    return
                last = now
