"""The one exception a failed evaluation raises, on every backend."""

from __future__ import annotations

import traceback


class EvalError(RuntimeError):
    """An evaluation failed in its worker (thread, child process or Ray actor).

    The message holds the original exception's type and message; the worker's
    formatted traceback is in :attr:`remote_traceback` because the original
    exception object may not survive the trip between processes.
    """

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.remote_traceback = remote_traceback

    @classmethod
    def from_exception(cls, exc: BaseException, where: str = "eval worker") -> EvalError:
        """An EvalError saying ``where`` failed with ``exc``, carrying its formatted traceback."""
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(f"{where} failed: {type(exc).__name__}: {exc}", tb)

    def __reduce__(self):
        return (type(self), (str(self), self.remote_traceback))


class WorkerLost(EvalError):
    """The round failed because its worker was lost, not because the evaluation raised.

    The worker died, did not start in time, or its Ray actor or node is gone (a
    round that overran its timeout, whose worker was replaced, is one too). The
    same round may well pass when run again: the launcher's resume retries it.
    """


class EnvError(ValueError):
    """An env cannot be built as asked; the message names the problem and the fix in one line."""


class Cancelled(Exception):
    """Raised inside a worker when shutdown() stops an evaluation mid-round."""
