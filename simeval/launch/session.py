"""The run's evaluators: built once, for the first checkpoint's plan, and asked to evaluate checkpoints.

:class:`Session` is what :class:`~simeval.launch.sweep.Sweep` drives: ``start``
a checkpoint on an idle evaluator, ``poll`` it, turn its result into a
results.jsonl record.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

from simeval.launch.build import make_evaluator, record_context
from simeval.launch.cli import Parsed
from simeval.launch.plan import EvalPlan, plan_for
from simeval.launch.sources import checkpoint_name

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.evaluator import Evaluator


class Session:
    """The run's evaluators, built for the first checkpoint's plan; a checkpoint needing another plan is refused.

    ``slots`` evaluators run side by side: ``--workers K`` with ``--watch``
    makes K one-worker evaluators (K checkpoints at once); with
    ``--checkpoint`` one evaluator whose rounds are split over K Ray workers.
    """

    def __init__(self, parsed: Parsed, out: str, stop: threading.Event) -> None:
        self.parsed = parsed
        self.cfg = parsed.cfg
        self.out = out
        self.stop = stop
        self.slots = self.cfg.workers if self.cfg.source == "watch" else 1
        self.evaluators: list = []
        self.plan: EvalPlan | None = None
        self.env_backend: str | None = None

    def evaluator_for(self, plan: EvalPlan, index: int = 0) -> Evaluator:
        """Evaluator ``index``, building all of them for ``plan`` the first time; CheckpointError for another plan."""
        if self.evaluators:
            if plan != self.plan:
                from simeval.checkpoints import CheckpointError

                raise CheckpointError(
                    f"needs {plan.describe()}, but this run evaluates {self.plan.describe()}; use a separate run."
                )
            return self.evaluators[index]
        from simeval.envs import check_env
        from simeval.launch.config import ConfigError

        cfg = self.cfg
        split = cfg.workers if self.slots == 1 else 1
        try:
            self.env_backend = check_env(plan.env, cfg.env_backend)
            if cfg.backend == "ray":
                from simeval.backends.ray_slots import check_capacity, ensure_ray

                check_capacity(ensure_ray(), cfg.workers, cfg.num_gpus, {"num_cpus": cfg.num_cpus})
            for _ in range(self.slots):  # all at once, so that K Ray workers start side by side
                self.evaluators.append(
                    make_evaluator(cfg, plan, self.parsed.extra, self.out, self.env_backend, num_workers=split)
                )
        except ValueError as exc:  # the run's settings, not this checkpoint: no checkpoint can be evaluated
            raise ConfigError(str(exc)) from exc
        self.plan = plan
        install_stop_handlers(self.stop)  # ray.init installs its own SIGTERM handler: ours comes last
        return self.evaluators[index]

    def start(self, ck: Checkpoint, index: int = 0) -> None:
        """Begin evaluating ``ck`` on evaluator ``index`` (which must be idle)."""
        plan = plan_for(self.cfg, self.parsed.explicit, ck)
        ev = self.evaluator_for(plan, index)
        weights = dict(ck.weights_dict) if plan.obs_norm else {"policy": ck.policy}
        ev.trigger_eval(weights_dict=weights, step=ck.step)

    def poll(self, index: int) -> dict | None:
        """Evaluator ``index``'s result if it finished (its EvalError if it failed), else None."""
        return self.evaluators[index].poll()

    def record_of(self, ck: Checkpoint, result: dict, seconds: float) -> dict:
        """The results.jsonl record of ``ck``'s evaluation ``result``, which took ``seconds``."""
        from simeval.records import make_record

        return make_record(
            result,
            checkpoint=ck.path,
            checkpoint_name=checkpoint_name(ck.path, self.cfg.watch),
            checkpoint_sha256=ck.sha256,
            checkpoint_format=ck.meta.get("format", "simeval"),
            **({"architecture": ck.meta["architecture"]} if "architecture" in ck.meta else {}),
            wall_time=round(seconds, 3),
            **record_context(self.cfg, self.plan, self.env_backend),
        )

    def close(self) -> None:
        """Shut every evaluator down."""
        for ev in self.evaluators:
            ev.shutdown(timeout=10.0)


def install_stop_handlers(stop: threading.Event) -> None:
    """Make SIGTERM and SIGINT set ``stop`` (and say so on stderr) instead of killing the launcher."""

    def handler(signum: int, frame: FrameType | None) -> None:
        print(f"received {signal.Signals(signum).name}: stopping cleanly.", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
