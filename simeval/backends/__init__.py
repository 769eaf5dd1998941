"""Where evaluation rounds run: a thread, a child process or a Ray actor.

Every backend runs :class:`simeval.worker.EvalWorker`, takes one request at a
time through ``start(step, weights, future)`` and completes the future with
the worker's raw metrics or an :class:`~simeval.errors.EvalError`. Queueing,
busy policies and result formatting live in :mod:`simeval.caller.requests`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from simeval.backends.base import Backend, BackendOptions, WorkerRecipe

if TYPE_CHECKING:  # imported on use (the Ray backend needs ray); named here for the import graph
    from simeval.backends.process import ProcessBackend
    from simeval.backends.ray import RayBackend
    from simeval.backends.thread import ThreadBackend

NAMES = ("thread", "process", "ray")
_CLASSES = {
    "thread": "simeval.backends.thread:ThreadBackend",
    "process": "simeval.backends.process:ProcessBackend",
    "ray": "simeval.backends.ray:RayBackend",
}


def create(name: str, recipe: WorkerRecipe, options: BackendOptions) -> ThreadBackend | ProcessBackend | RayBackend:
    """The backend called ``name``, built (and its arguments checked) by its own class."""
    if name not in _CLASSES:
        raise ValueError(f"Unknown backend {name!r}. Choose 'thread', 'process', or 'ray'.")
    module, cls = _CLASSES[name].split(":")
    return getattr(importlib.import_module(module), cls).create(recipe, options)


__all__ = ["NAMES", "Backend", "BackendOptions", "WorkerRecipe", "create"]
