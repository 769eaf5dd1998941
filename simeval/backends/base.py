"""The contract between the Evaluator and a backend."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any


class Backend(abc.ABC):
    """Runs one evaluation at a time and completes its future.

    ``start`` must return quickly: it stages the weights (copying them, since
    training keeps changing its own tensors) and hands the request over. The
    future receives the raw metrics dict, or an EvalError. A backend never
    leaves a future pending: worker crashes, start-up failures and shutdown
    all complete it.
    """

    name = "?"

    @abc.abstractmethod
    def start(self, step: int, weights: Mapping[str, Any] | None, future: Future) -> None:
        """Stage ``weights`` ({model_id: nn.Module | TensorDict}) and begin a round."""

    @abc.abstractmethod
    def shutdown(self, timeout: float) -> None:
        """Stop any running round within ``timeout`` seconds and free every resource."""
