"""Where evaluation rounds run: a thread, a child process or a Ray actor.

Every backend runs :class:`simeval.worker.EvalWorker`, takes one request at a
time through ``start(step, weights, future)`` and completes the future with
the worker's raw metrics or an :class:`~simeval.errors.EvalError`. Queueing,
busy policies and result formatting live in :class:`simeval.Evaluator`.
"""

from __future__ import annotations

BACKENDS = ("thread", "process", "ray")
