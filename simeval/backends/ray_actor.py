"""The Ray actor class. No torch at module level: ``init_fn`` runs first in the actor."""

from __future__ import annotations

import os
import socket
from typing import Any

from simeval.backends.host import Reporting, WorkerHost

PROGRESS_S = 0.5
"""How often a running round's counts are sent to the backend's :class:`ProgressSink`, at most."""


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
    """A :class:`WorkerHost` in a Ray actor; a start-up failure comes back from the first ``run``.

    Catching it here (instead of failing the constructor) returns the user's
    full traceback rather than Ray's terse actor-creation error.
    """

    def __init__(self, setup: dict) -> None:
        self.info = setup.get("info", {})
        self.host = WorkerHost(setup)
        self.host.start()

    def describe(self) -> dict:
        """Front-end settings (log prefix, keep_episodes) for ``simeval.connect``."""
        return dict(self.info)

    def where(self) -> dict:
        """The Ray node, host and process this worker runs in (reported with each result)."""
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
            sink, key = progress
            with Reporting(self.host, lambda msg: sink.put.remote(key, msg[1]), PROGRESS_S):
                outcome = self.host.run(step, weights, overrides, shard)
        if outcome[0] == "result":
            outcome[1]["worker"] = self.where()
        return outcome

    def close(self) -> None:
        """Close the worker (its collector, and the env it built)."""
        self.host.close()
