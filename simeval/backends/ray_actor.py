"""The Ray actor class. No torch at module level: ``init_fn`` runs first in the actor."""

from __future__ import annotations

import sys
import traceback


class EvalActor:
    """Runs ``init_fn``, then builds an EvalWorker from pickled factories."""

    def __init__(self, setup: dict) -> None:
        for entry in setup.get("sys_path", []):
            if entry not in sys.path:
                sys.path.append(entry)
        from simeval.backends._child import _run_init_fn

        _run_init_fn(setup["init_fn"])
        import pickle

        spec, env_factory, policy_factory = pickle.loads(setup["payload"])
        from simeval.worker import EvalWorker

        self.info = setup.get("info", {})
        self.worker = EvalWorker(spec, env_factory=env_factory, policy_factory=policy_factory)
        self.worker.owns_process = True
        # Env and policy are built by the first run(), where a failure comes back with
        # its full traceback instead of as Ray's terse actor-creation error.

    def describe(self) -> dict:
        """Front-end settings (log prefix, keep_episodes) for ``simeval.connect``."""
        return dict(self.info)

    def run(self, step: int, weights) -> tuple:
        try:
            return ("result", self.worker.run(weights, step))
        except BaseException as exc:  # noqa: BLE001 - the actor stays up for the next request
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            return ("error", f"{type(exc).__name__}: {exc}", tb)

    def close(self) -> None:
        self.worker.close()
