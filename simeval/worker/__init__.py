"""The worker side: what runs where the eval env lives (a thread, a child process or a Ray actor).

:class:`EvalWorker` owns one eval env and policy, loads the weights of each
request and runs a round (:mod:`~simeval.worker.rollout` on torchrl's Collector,
or :mod:`~simeval.worker.direct_rollout` without it on the native env), reading
episode ends (:mod:`~simeval.worker.episode_ends`) and restoring what a round
changed (:mod:`~simeval.worker.round_scope`, :mod:`~simeval.worker.vecnorm`);
:mod:`~simeval.worker.frames` renders the first episode when asked. The caller
side (``simeval.Evaluator`` and its request queue) never imports this package:
a backend does, in the worker. Importing the package itself loads no torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EvalWorker"]


def __getattr__(name: str) -> Any:
    if name == "EvalWorker":
        from simeval.worker.eval_worker import EvalWorker

        return EvalWorker
    raise AttributeError(f"module 'simeval.worker' has no attribute {name!r}")
