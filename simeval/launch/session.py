"""The run's evaluators: slots, each built for one (cell, plan), asked to evaluate jobs.

:class:`Session` is what :class:`~simeval.launch.pipeline.Pipeline` drives:
``start`` a job (checkpoint x cell) on an idle slot, ``poll`` it. A slot's
evaluator is built for the job's cell (its condition, its settings) and plan
(:class:`~simeval.launch.plan.EvalPlan`: env, policy factory, VecNorm use), and
kept while the jobs it takes need the same; another cell or plan rebuilds it. A cell
may name what its evaluator is built for apart from its own key (``slot_key``: an
adaptive run's looks of one cell share one, each round given its look's seed through
``start(seed=...)``).
``--workers K`` gives K slots where a run has several jobs (``--watch``, a
suite's cells); a single job (``--checkpoint`` alone) gets one slot whose rounds
are split over the K Ray workers.

A plain run (``one_plan``) evaluates one plan. The plan is *held* once a
checkpoint evaluated with it succeeded (on a resume: the plan the ok lines of
results.jsonl name); a checkpoint that needs another one after that is a
:class:`PlanError`, recorded for that checkpoint alone. Until then a checkpoint
that fails fixes nothing: the next checkpoint, if it needs another plan, has the
slots rebuilt once they are idle (:class:`PlanBusy` until then). So one bad file
can never poison a watched run. A suite's cells each have their own plan.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from simeval.checkpoints import CheckpointError
from simeval.envs import check_env
from simeval.errors import EvalError, WorkerLost
from simeval.launch.build import make_evaluator
from simeval.launch.cells import BoundsError, JobCell, Nominal
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError
from simeval.launch.plan import EvalPlan, plan_for

if TYPE_CHECKING:
    from simeval.caller.evaluator import Evaluator
    from simeval.checkpoints import Checkpoint
    from simeval.launch.progress import ProgressBoard

J = TypeVar("J")  # a loop's job: what it dispatched to a slot
PLAN_KEYS = ("env", "obs_norm", "policy_factory", "policy_kwargs")


class PlanError(Exception):
    """A checkpoint needs a plan this run cannot give it: another env or policy than the run's held plan,
    an env this launcher cannot build, or settings (``--env``) that contradict it.

    Recorded for that checkpoint alone (``error_kind: "plan"``); a resume tries it again.
    """


class PlanBusy(Exception):
    """A checkpoint needs another plan while evaluations of the current, not yet held, plan still run."""


def plan_record(plan: EvalPlan) -> dict[str, Any]:
    """The plan as results.jsonl states it (``plan``): env, obs_norm, policy_factory, policy_kwargs."""
    record = {key: getattr(plan, key) for key in PLAN_KEYS}
    return json.loads(json.dumps(record, default=str))  # plain JSON data: the same as it reads back


def describe(record: dict[str, Any]) -> str:
    """``env with factory(kwargs)`` for a :func:`plan_record`, for messages."""
    return f"{record['env']} with {record['policy_factory']}({record['policy_kwargs'] or ''})"


def slot_key(cell: JobCell) -> tuple:
    """What a slot's evaluator is built for when it evaluates ``cell``: its ``slot_key`` if it has one, else its key.

    An adaptive run's look (:class:`simeval.launch.adaptive.LookCell`) answers its cell's key,
    whatever the look: the looks of a cell differ only in their seed, which each round is given.
    """
    return getattr(cell, "slot_key", cell.key)


@dataclass
class Slot:
    """One evaluator and what it is built for."""

    evaluator: Any = None
    cell_key: tuple | None = None
    """:func:`slot_key` of the cell it was built for."""
    plan: EvalPlan | None = None
    env_backend: str | None = None


class Session:
    """The run's evaluator slots and, for a plain run, its plan (see the module docstring)."""

    def __init__(self, parsed: Parsed, out: str, stop: threading.Event) -> None:
        self.parsed = parsed
        self.cfg = parsed.cfg
        self.out = out
        self.stop = stop
        single = self.cfg.source != "watch" and not self.cfg.suite  # one job: its rounds split over the workers
        self.slots = [Slot() for _ in range(1 if single else max(1, self.cfg.workers))]
        self.split = self.cfg.workers if single else 1
        self.one_plan = not self.cfg.suite
        self.plan_key: dict[str, Any] | None = None  # one_plan: the run's plan_record (a resume's, before any build)
        self.held = False  # a checkpoint succeeded with plan_key: checkpoints needing another are PlanErrors
        self.busy: set[int] = set()

    def hold(self, record: Any) -> bool:
        """Hold the plan ``record`` (the ``plan`` of an ok line, on a resume); False when it is no plan record."""
        if not isinstance(record, dict) or set(record) != set(PLAN_KEYS):
            return False
        self.plan_key, self.held = json.loads(json.dumps(record)), True
        return True

    def evaluator_for(self, plan: EvalPlan, index: int = 0, cell: JobCell | None = None) -> Evaluator:
        """Slot ``index``'s evaluator, built for ``plan`` and ``cell`` (default: the nominal cell).

        Raises:
            PlanError: the run holds another plan, or cannot build the plan's env.
            PlanBusy: the current plan is not held yet and evaluations of it still run: ask again once idle.
            ConfigError: the run's settings cannot build any evaluator.
        """
        cell = cell or Nominal()
        if self.one_plan:
            self._check_plan(plan_record(plan))
        slot = self.slots[index]
        if slot.evaluator is None or slot.cell_key != slot_key(cell) or slot.plan != plan:
            self._close(slot)
            self._build(slot, plan, cell)
        return slot.evaluator

    def _check_plan(self, key: dict[str, Any]) -> None:
        """The one-plan rule: another plan than the held one is a PlanError; than a running one, PlanBusy."""
        if self.plan_key is None or key == self.plan_key:
            self.plan_key = key
            return
        if self.held:
            raise PlanError(
                f"needs {describe(key)}, but this run evaluates {describe(self.plan_key)} (the plan of its "
                "evaluated checkpoints); evaluate it in a separate run (another --out)."
            )
        if self.busy:
            raise PlanBusy(describe(key))
        self.close()  # the plan of checkpoints that all failed: this one's replaces it
        self.plan_key = key

    def _build(self, slot: Slot, plan: EvalPlan, cell: JobCell) -> None:
        """Build ``slot``'s evaluator for ``plan`` on ``cell``."""
        cfg = cell.config(self.cfg)
        try:
            env_backend = check_env(plan.env, cfg.env_backend)
        except ValueError as exc:  # the run's tasks and an --env were checked at start: this env is the checkpoint's
            raise PlanError(f"needs env {plan.env}, which this launcher cannot build: {exc}") from None
        try:
            evaluator = make_evaluator(
                cfg, plan, self.parsed.extra, self.out, env_backend, num_workers=self.split, condition=cell.condition
            )
        except ValueError as exc:  # the run's settings, not this checkpoint: no checkpoint can be evaluated
            raise ConfigError(str(exc)) from exc
        slot.evaluator, slot.cell_key, slot.plan, slot.env_backend = evaluator, slot_key(cell), plan, env_backend
        install_stop_handlers(self.stop)  # ray.init installs its own SIGTERM handler: ours comes last

    def start(
        self,
        ck: Checkpoint,
        index: int,
        cell: JobCell,
        journal: Callable[[], int] | None = None,
        *,
        seed: int | None = None,
    ) -> int:
        """Begin evaluating ``ck`` on ``cell`` in idle slot ``index``; the attempt number ``journal()`` returns.

        ``journal`` runs once the evaluator is ready, just before the round is triggered.
        ``seed`` is the round's own (``Evaluator.trigger_eval(seed=...)``; None: the evaluator's,
        the cell's ``seed`` setting): a slot kept across cells of one :func:`slot_key` gives
        each round its cell's seed this way.

        Raises:
            PlanError, PlanBusy: see :meth:`evaluator_for`; PlanError also where ``--env`` contradicts ``ck``.
            CheckpointError: ``ck`` names what cannot be evaluated (an unregistered policy factory, ...).
        """
        cfg, explicit = cell.config(self.cfg), cell.explicit(self.parsed.explicit)
        try:
            plan = plan_for(cfg, explicit, ck)
        except CheckpointError as exc:
            if _contradicts_settings(cfg, explicit, ck):
                raise PlanError(str(exc)) from None  # another --env may fit it: a resume tries again
            raise
        ev = self.evaluator_for(plan, index, cell)
        attempt = journal() if journal is not None else 1
        weights = dict(ck.weights_dict) if plan.obs_norm else {"policy": ck.policy}
        ev.trigger_eval(weights_dict=weights, step=ck.step, seed=seed)
        self.busy.add(index)
        return attempt

    def poll(self, index: int) -> dict | None:
        """Slot ``index``'s result if it finished (its EvalError if it failed), else None.

        A result holds the run's plan: from then on a checkpoint needing another one is a PlanError.
        """
        try:
            result = self.slots[index].evaluator.poll()
        except BaseException:
            self.busy.discard(index)
            raise
        if result is not None:
            self.busy.discard(index)
            self.held = True
        return result

    def finished(self, running: dict[int, J], board: ProgressBoard) -> Iterator[tuple[int, J, dict | EvalError]]:
        """Each of ``running``'s rounds (slot -> job) that has finished, taken off ``running`` and ``board``:
        ``(slot, job, its result or its EvalError)``."""
        for index, job in list(running.items()):
            try:
                result = self.poll(index)
            except EvalError as exc:
                result = exc
            if result is None:
                continue
            del running[index]
            board.finished(index)
            yield index, job, result

    def close(self) -> None:
        """Shut every evaluator down (a later job builds them again)."""
        self.busy.clear()
        for slot in self.slots:
            self._close(slot)

    def _close(self, slot: Slot) -> None:
        if slot.evaluator is not None:
            _shut_down([slot.evaluator])
        slot.evaluator, slot.cell_key, slot.plan, slot.env_backend = None, None, None, None


def _shut_down(evaluators: list) -> None:
    for ev in evaluators:
        ev.shutdown(timeout=10.0)


def _contradicts_settings(cfg: Any, explicit: set[str], ck: Checkpoint) -> bool:
    """Whether ``plan_for`` refused ``ck`` for the run's ``--env`` (given and different, or needed and missing)."""
    if ck.env:
        return "env" in explicit and ck.env != cfg.env
    return ck.meta.get("format", "simeval") != "simeval" and "env" not in explicit


def error_kind(exc: BaseException) -> str:
    """A failed line's ``error_kind`` for ``exc`` (see :data:`simeval.records.ERROR_KINDS`).

    ``plan`` for a :class:`PlanError`; ``worker`` for a worker lost (it died, did not
    start in time, its node is gone); ``evaluation`` for anything else the worker
    raised (a policy that cannot be built, weights that do not fit); ``checkpoint``
    for what was refused or failed before any worker saw it.
    """
    if isinstance(exc, PlanError):
        return "plan"
    if isinstance(exc, WorkerLost):
        return "worker"
    if isinstance(exc, (EvalError, BoundsError)):
        return "evaluation"
    return "checkpoint"


def install_stop_handlers(stop: threading.Event) -> None:
    """Make SIGTERM and SIGINT set ``stop`` (and say so on stderr) instead of killing the launcher."""

    def handler(signum: int, frame: FrameType | None) -> None:
        print(f"received {signal.Signals(signum).name}: stopping cleanly.", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
