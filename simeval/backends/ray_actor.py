"""The Ray actor class. No torch at module level: ``init_fn`` runs first in the actor."""

from __future__ import annotations

import os
import socket
from typing import Any

from simeval.backends.host import WorkerHost


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

    def run(self, step: int, weights: Any, overrides: Any = None, shard: Any = None) -> tuple:
        """One round, as :meth:`WorkerHost.run <simeval.backends.host.WorkerHost.run>`; a result says where it ran."""
        outcome = self.host.run(step, weights, overrides, shard)
        if outcome[0] == "result":
            outcome[1]["worker"] = self.where()
        return outcome

    def close(self) -> None:
        """Close the worker (its collector, and the env it built)."""
        self.host.close()
