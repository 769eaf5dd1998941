"""The Ray actor class. No torch at module level: ``init_fn`` runs first in the actor."""

from __future__ import annotations

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

    def run(self, step: int, weights, overrides: Any = None) -> tuple:
        return self.host.run(step, weights, overrides)

    def close(self) -> None:
        self.host.close()
