"""The contract between the front (``RequestQueue``) and a backend, and what builds one."""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from simeval.errors import EvalError
from simeval.settings import EvalSettings, RoundOverrides

# Per thread: the completions held back while this thread runs a backend's start() under its gate.
_held = threading.local()


@dataclass
class WorkerRecipe:
    """What a worker is built from: settings, env (instance or factory), policy or its factory."""

    settings: EvalSettings
    env: Any
    policy: Any = None
    policy_factory: Callable[..., Any] | None = None
    init_fn: Callable[[], None] | str | None = None

    def require_factories(self, backend: str, where: str) -> None:
        """A worker in another process needs an env factory and a policy factory (one-line errors)."""
        if not callable(self.env) or is_env_instance(self.env):
            raise ValueError(
                f"The {backend} backend requires `env` to be a callable (factory function) "
                f"because the env is created inside {where}."
            )
        if self.policy_factory is None:
            raise ValueError(
                f"The {backend} backend requires `policy_factory` (a callable `(env) -> policy`) "
                f"because the policy is created inside {where}."
            )


@dataclass
class BackendOptions:
    """Placement settings; each backend reads those that concern it."""

    start_timeout: float = 120.0
    num_gpus: float = 1
    ray_kwargs: Mapping[str, Any] | None = None
    num_workers: int = 1  # Ray: workers a round is split over
    max_restarts: int = 3  # Ray: re-runs of a shard whose worker died, per round
    info: Mapping[str, Any] | None = None  # front-end settings a connect() handle reads back
    progress: bool = False  # a caller reads progress (on_progress): Ray starts its progress sink


class Backend(abc.ABC):
    """Runs one evaluation at a time and completes its future.

    ``start`` must return quickly: it stages the weights (copying them, since
    training keeps changing its own tensors) and hands the request over. The
    future receives the raw metrics dict, or an EvalError. A backend never
    leaves a future pending: worker crashes, start-up failures and shutdown
    all complete it, and a request started after shutdown fails at once.
    Subclasses implement ``_start``, ``_shutdown`` and ``_replace_worker``, and complete futures
    with :func:`complete`: one completed inside ``_start`` (a start-up failure,
    a child already gone) is completed only once ``start`` released its lock,
    so its done-callbacks (the request queue launches the next request from
    there) may call ``start`` again.
    """

    name = "?"

    def __init__(self) -> None:
        self._gate = threading.Lock()
        self._closed = False

    @classmethod
    @abc.abstractmethod
    def create(cls, recipe: WorkerRecipe, options: BackendOptions) -> Backend:
        """Check that ``recipe`` suits this backend (one-line ValueError otherwise) and build it."""

    def start(
        self, step: int, weights: Mapping[str, Any] | None, future: Future, overrides: RoundOverrides | None = None
    ) -> None:
        """Stage ``weights`` ({model_id: nn.Module | TensorDict}) and begin a round.

        Futures completed on this thread meanwhile are completed on the way out, after the lock is released.
        """
        held: list[tuple[Future, Any, BaseException | None]] = []
        try:
            with self._gate, _holding(held):
                if self._closed:
                    complete(future, exc=cancelled())
                    return
                self._start(step, weights, future, overrides)
        finally:
            for fut, result, exc in held:
                complete(fut, result, exc)  # callbacks run here, free to call start()

    def shutdown(self, timeout: float) -> None:
        """Stop any running round within ``timeout`` seconds and free every resource."""
        with self._gate:
            self._closed = True
        self._shutdown(timeout)

    def time_out(self, future: Future, error: EvalError) -> bool:
        """Fail the running round ``future`` with ``error`` and replace its worker, unless the round already ended.

        Called when a round overran its deadline (``round_timeout_s``). The worker is replaced before the
        future completes, so a request started from the future's callbacks runs on the fresh worker; the
        old worker's own answer, should it ever come, completes nothing. True if ``error`` completed it.
        """
        with self._gate:
            if self._closed or future.done():
                return False
            self._replace_worker(error)
        return complete(future, exc=error)

    def progress(self) -> tuple[int, int, int] | None:
        """``(episodes done, episodes total, env steps)`` of the running round as its worker(s) last reported it.

        None when no round runs, or none reported yet (or the backend has no progress channel). Cheap: it reads
        what the worker already sent or counted, never waits on it.
        """
        return None

    def want_progress(self) -> None:
        """Make :meth:`progress` report from the next round on, where the backend needs to prepare for it."""
        return  # the thread and process backends always report

    @abc.abstractmethod
    def _start(
        self, step: int, weights: Mapping[str, Any] | None, future: Future, overrides: RoundOverrides | None
    ) -> None: ...

    @abc.abstractmethod
    def _shutdown(self, timeout: float) -> None: ...

    @abc.abstractmethod
    def _replace_worker(self, error: EvalError) -> None:
        """Give up the running round's worker (killed where it can be) and make way for a fresh one (gate held).

        ``error`` is what the round fails with; an answer the old worker still gives must not complete it.
        """


@contextlib.contextmanager
def _holding(held: list) -> Iterator[None]:
    """While the block runs, :func:`complete` on this thread appends to ``held`` instead of completing."""
    outer = getattr(_held, "completions", None)
    _held.completions = held
    try:
        yield
    finally:
        _held.completions = outer


def complete(future: Future, result: Any = None, exc: BaseException | None = None) -> bool:
    """Complete ``future`` unless something already did; True if this call did.

    Inside a backend's ``start`` (same thread, lock held) the completion is
    held back until ``start`` releases its lock; True then means it will be done.
    """
    held = getattr(_held, "completions", None)
    if held is not None:
        if future.done() or any(f is future for f, _, _ in held):
            return False
        held.append((future, result, exc))
        return True
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except InvalidStateError:
        return False
    return True


def cancelled() -> EvalError:
    """The error a round stopped by ``shutdown()`` completes with."""
    return EvalError("evaluation cancelled by shutdown()")


def is_env_instance(env: Any) -> bool:
    """Whether ``env`` is a built torchrl env (not a factory)."""
    from torchrl.envs import EnvBase

    return isinstance(env, EnvBase)
