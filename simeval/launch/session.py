"""The run's evaluators, built for one plan, and asked to evaluate checkpoints.

:class:`Session` is what :class:`~simeval.launch.sweep.Sweep` drives: ``start``
a checkpoint on an idle evaluator, ``poll`` it, turn its result into a
results.jsonl record.

A run evaluates one plan (:class:`~simeval.launch.plan.EvalPlan`: env, policy
factory, VecNorm use). The plan is *held* once a checkpoint evaluated with it
succeeded (on a resume: the plan the ok lines of results.jsonl name); a
checkpoint that needs another one after that is a :class:`PlanError`, recorded
for that checkpoint alone. Until then a checkpoint that fails fixes nothing:
the evaluators were built for its plan, and the next checkpoint, if it needs
another plan, has them rebuilt once they are idle (:class:`PlanBusy` until
then). So one bad file can never poison a watched run.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from simeval.backends.ray_slots import check_capacity, ensure_ray
from simeval.checkpoints import CheckpointError
from simeval.envs import check_env
from simeval.errors import EvalError, WorkerLost
from simeval.launch.build import checkpoint_fields, make_evaluator, record_context
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError
from simeval.launch.plan import EvalPlan, plan_for
from simeval.records import make_record

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.evaluator import Evaluator

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


class Session:
    """The run's evaluators and its plan (see the module docstring); ``slots`` evaluators side by side.

    ``--workers K`` with ``--watch`` makes K one-worker evaluators (K checkpoints
    at once); with ``--checkpoint`` one evaluator whose rounds are split over K Ray workers.
    """

    def __init__(self, parsed: Parsed, out: str, stop: threading.Event) -> None:
        self.parsed = parsed
        self.cfg = parsed.cfg
        self.out = out
        self.stop = stop
        self.slots = self.cfg.workers if self.cfg.source == "watch" else 1
        self.evaluators: list = []
        self.plan: EvalPlan | None = None  # what the evaluators are built for
        self.plan_key: dict[str, Any] | None = None  # its plan_record (a resume's, before any evaluator is built)
        self.held = False  # a checkpoint succeeded with plan_key: checkpoints needing another are PlanErrors
        self.busy: set[int] = set()
        self.env_backend: str | None = None

    def hold(self, record: Any) -> bool:
        """Hold the plan ``record`` (the ``plan`` of an ok line, on a resume); False when it is no plan record."""
        if not isinstance(record, dict) or set(record) != set(PLAN_KEYS):
            return False
        self.plan_key, self.held = json.loads(json.dumps(record)), True
        return True

    def evaluator_for(self, plan: EvalPlan, index: int = 0) -> Evaluator:
        """Evaluator ``index``, built for ``plan``.

        Raises:
            PlanError: the run holds another plan.
            PlanBusy: the current plan is not held yet and evaluations of it still run: ask again once idle.
            ConfigError: the run's settings cannot build any evaluator.
        """
        key = plan_record(plan)
        if self.plan_key is not None and key != self.plan_key:
            if self.held:
                raise PlanError(
                    f"needs {describe(key)}, but this run evaluates {describe(self.plan_key)} (the plan of its "
                    "evaluated checkpoints); evaluate it in a separate run (another --out)."
                )
            if self.busy:
                raise PlanBusy(describe(key))
            self.close()  # the plan of checkpoints that all failed: this one's replaces it
            self.plan_key = None
        if not self.evaluators:
            self._build(plan)
        return self.evaluators[index]

    def _build(self, plan: EvalPlan) -> None:
        """Build every evaluator for ``plan``; on any failure shut down those built and keep none."""
        cfg = self.cfg
        try:
            env_backend = check_env(plan.env, cfg.env_backend)
        except ValueError as exc:  # an --env was checked at start: this env is the checkpoint's
            raise PlanError(f"needs env {plan.env}, which this launcher cannot build: {exc}") from None
        split = cfg.workers if self.slots == 1 else 1
        built: list = []
        try:
            if cfg.backend == "ray":
                check_capacity(ensure_ray(), cfg.workers, cfg.num_gpus, {"num_cpus": cfg.num_cpus})
            for _ in range(self.slots):  # all at once, so that K Ray workers start side by side
                built.append(make_evaluator(cfg, plan, self.parsed.extra, self.out, env_backend, num_workers=split))
        except ValueError as exc:  # the run's settings, not this checkpoint: no checkpoint can be evaluated
            _shut_down(built)
            raise ConfigError(str(exc)) from exc
        except BaseException:
            _shut_down(built)
            raise
        self.evaluators, self.plan, self.plan_key, self.env_backend = built, plan, plan_record(plan), env_backend
        install_stop_handlers(self.stop)  # ray.init installs its own SIGTERM handler: ours comes last

    def start(self, ck: Checkpoint, index: int = 0, journal: Callable[[], int] | None = None) -> int:
        """Begin evaluating ``ck`` on evaluator ``index`` (which must be idle); the attempt ``journal()`` returns.

        ``journal`` runs once the evaluator is ready, just before the round is triggered.

        Raises:
            PlanError, PlanBusy: see :meth:`evaluator_for`; PlanError also where ``--env`` contradicts ``ck``.
            CheckpointError: ``ck`` names what cannot be evaluated (an unregistered policy factory, ...).
        """
        try:
            plan = plan_for(self.cfg, self.parsed.explicit, ck)
        except CheckpointError as exc:
            if _contradicts_settings(self.cfg, self.parsed.explicit, ck):
                raise PlanError(str(exc)) from None  # another --env may fit it: a resume tries again
            raise
        ev = self.evaluator_for(plan, index)
        attempt = journal() if journal is not None else 1
        weights = dict(ck.weights_dict) if plan.obs_norm else {"policy": ck.policy}
        ev.trigger_eval(weights_dict=weights, step=ck.step)
        self.busy.add(index)
        return attempt

    def poll(self, index: int) -> dict | None:
        """Evaluator ``index``'s result if it finished (its EvalError if it failed), else None.

        A result holds the run's plan: from then on a checkpoint needing another one is a PlanError.
        """
        try:
            result = self.evaluators[index].poll()
        except BaseException:
            self.busy.discard(index)
            raise
        if result is not None:
            self.busy.discard(index)
            self.held = True
        return result

    def record_of(self, ck: Checkpoint, result: dict, seconds: float) -> dict:
        """The results.jsonl record of ``ck``'s evaluation ``result``, which took ``seconds``."""
        return make_record(
            result,
            **checkpoint_fields(ck, self.cfg.watch),
            wall_time=round(seconds, 3),
            plan=plan_record(self.plan),
            **record_context(self.cfg, self.plan, self.env_backend),
        )

    def close(self) -> None:
        """Shut every evaluator down (a later checkpoint builds them again)."""
        evaluators, self.evaluators = self.evaluators, []
        self.busy.clear()
        _shut_down(evaluators)


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
    if isinstance(exc, EvalError):
        return "evaluation"
    return "checkpoint"


def install_stop_handlers(stop: threading.Event) -> None:
    """Make SIGTERM and SIGINT set ``stop`` (and say so on stderr) instead of killing the launcher."""

    def handler(signum: int, frame: FrameType | None) -> None:
        print(f"received {signal.Signals(signum).name}: stopping cleanly.", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
