"""The Ray actor classes, sent to the workers by value: they import simeval only once the path is safe.

Ray puts the driver's working directory (and its script's) first on every worker's ``sys.path`` before
the worker loads an actor class, so a class sent by reference (``simeval.backends.ray_actor``) would be
imported through it: a ``simeval/`` or stdlib-named module lying in the directory the launcher was
started from would run in the worker. :func:`remote` registers this module with Ray's cloudpickle to
be pickled by value; it imports nothing of simeval at module level, and :class:`EvalActor` takes the
driver's directory off the path (unless the driver's own ``sys.path`` has it) before it imports
:class:`~simeval.backends.host.WorkerHost`. No torch at module level either: ``init_fn`` runs first.
"""

from __future__ import annotations

import sys
from typing import Any

PROGRESS_S = 0.5
"""How often a running round's counts are sent to the backend's :class:`ProgressSink`, at most."""


def remote(ray: Any, cls: type, **options: Any) -> Any:
    """``ray.remote(**options)(cls)`` for a class of this module, pickled by value."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray.remote(**options)(cls)


def drop_driver_directory(setup: dict) -> None:
    """Take the driver's working directory (``setup["cwd"]``) off ``sys.path``, unless the driver's path has it."""
    cwd = setup.get("cwd")
    if cwd and cwd not in setup.get("sys_path", ()):
        sys.path[:] = [entry for entry in sys.path if entry != cwd]


class ProgressSink:
    """A small actor of a Ray backend's own: the latest counts each worker of a round sent, read by the caller."""

    def __init__(self) -> None:
        self.counts: dict[tuple, tuple] = {}

    def put(self, key: tuple, counts: tuple) -> None:
        """Keep ``counts`` (episodes, total, env_steps) of ``key`` (round token, shard index)."""
        self.counts[key] = counts

    def take(self, token: int) -> list[tuple]:
        """The counts of round ``token``'s workers (older rounds' are dropped)."""
        self.counts = {k: v for k, v in self.counts.items() if k[0] >= token}
        return [v for k, v in self.counts.items() if k[0] == token]


class EvalActor:
    """A :class:`~simeval.backends.host.WorkerHost` in a Ray actor; a start-up failure comes back from the first run.

    Catching it here (instead of failing the constructor) returns the user's
    full traceback rather than Ray's terse actor-creation error.
    """

    def __init__(self, setup: dict) -> None:
        drop_driver_directory(setup)
        from simeval.backends.host import WorkerHost

        self.info = setup.get("info", {})
        self.host = WorkerHost(setup)
        self.host.start()

    def describe(self) -> dict:
        """Front-end settings (log prefix, keep_episodes) for ``simeval.connect``."""
        return dict(self.info)

    def where(self) -> dict:
        """The Ray node, host and process this worker runs in (reported with each result)."""
        import os
        import socket

        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}

    def run(self, step: int, weights: Any, overrides: Any = None, shard: Any = None, progress: Any = None) -> tuple:
        """One round, as :meth:`WorkerHost.run <simeval.backends.host.WorkerHost.run>`; a result says where it ran.

        ``progress``: ``(sink, key)``: the round's counts go to the :class:`ProgressSink` ``sink`` under ``key``
        while it runs (fire and forget: never waited on).
        """
        if progress is None:
            outcome = self.host.run(step, weights, overrides, shard)
        else:
            from simeval.backends.host import Reporting

            sink, key = progress
            with Reporting(self.host, lambda msg: sink.put.remote(key, msg[1]), PROGRESS_S):
                outcome = self.host.run(step, weights, overrides, shard)
        if outcome[0] == "result":
            outcome[1]["worker"] = self.where()
        return outcome

    def close(self) -> None:
        """Close the worker (its collector, and the env it built)."""
        self.host.close()
