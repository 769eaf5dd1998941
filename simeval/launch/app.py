"""The launcher as a one-way pipeline: a source of checkpoints -> evaluate -> record.

``--checkpoint`` is a source of one checkpoint, ``--watch`` a
:class:`~simeval.launch.watch.Watcher`; :class:`Session` holds the
evaluators (built for the first checkpoint's plan), and
:class:`~simeval.launch.sweep.Sweep` hands checkpoints to idle ones and
appends every outcome to ``OUT/results.jsonl``. ``--serve`` starts a named
Ray evaluator whose worker writes the same lines itself. SIGTERM/SIGINT set a
stop flag: running rounds are abandoned (nothing partial is written) and the
process exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from simeval.launch.cli import Parsed
from simeval.launch.plan import EvalPlan, check_env, make_evaluator, plan_for, record_context


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

    def evaluator_for(self, plan: EvalPlan, index: int = 0):
        if self.evaluators:
            if plan != self.plan:
                from simeval.launch.checkpoint import CheckpointError

                raise CheckpointError(
                    f"needs {plan.describe()}, but this run evaluates {self.plan.describe()}; use a separate run."
                )
            return self.evaluators[index]
        from simeval.launch.config import ConfigError

        cfg = self.cfg
        self.env_backend = check_env(plan.env, cfg.env_backend)
        split = cfg.workers if self.slots == 1 else 1
        try:
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

    def start(self, ck, index: int = 0) -> None:
        """Begin evaluating ``ck`` on evaluator ``index`` (which must be idle)."""
        plan = plan_for(self.cfg, self.parsed.explicit, ck)
        ev = self.evaluator_for(plan, index)
        weights = dict(ck.weights_dict) if plan.obs_norm else {"policy": ck.policy}
        ev.trigger_eval(weights_dict=weights, step=ck.step)

    def poll(self, index: int) -> dict | None:
        """Evaluator ``index``'s result if it finished (its EvalError if it failed), else None."""
        return self.evaluators[index].poll()

    def record_of(self, ck, result: dict, seconds: float) -> dict:
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
        for ev in self.evaluators:
            ev.shutdown(timeout=10.0)


def run(parsed: Parsed, out: str) -> int:
    """Run the mode the config asks for; every result goes to OUT/results.jsonl."""
    from simeval.launch.results import ResultsLog
    from simeval.launch.sweep import One, Sweep

    cfg = parsed.cfg
    stop = threading.Event()
    install_stop_handlers(stop)
    if "env" in parsed.explicit:
        check_env(cfg.env, cfg.env_backend)  # before waiting for checkpoints that may never come
    log = ResultsLog(out, cfg.logger if cfg.source != "serve" else None)
    print(f"results: {log.path}", flush=True)
    session = Session(parsed, out, stop)
    try:
        if cfg.source == "serve":
            return serve(session)
        if cfg.source == "checkpoint":
            from simeval.launch.checkpoint import load_checkpoint

            source = One(load_checkpoint(cfg.checkpoint, cfg.format))
            return Sweep(session, log, keep_going=False).run(source)
        return watch(session, log)
    finally:
        session.close()


def watch(session: Session, log) -> int:
    from simeval.launch.sweep import Sweep, reached
    from simeval.launch.watch import Watcher

    records = list(log.records())
    seen = {r["checkpoint_name"] for r in records if "checkpoint_name" in r}
    if seen:
        print(f"resuming: {len(seen)} checkpoint(s) already in {log.path}", flush=True)
    done_steps = [r["step"] for r in records if r.get("status") == "ok"]
    if reached(session.cfg.until_step, done_steps):
        print(f"reached --until-step {session.cfg.until_step}; done.", flush=True)
        return 0
    cfg = session.cfg
    watcher = Watcher(cfg.watch, seen, session.stop, cfg.poll_interval, cfg.format)
    return Sweep(session, log, keep_going=True).run(watcher)


def checkpoint_name(path: str, watch_dir: str | None) -> str:
    """How results.jsonl names a checkpoint: its path inside the watched directory, else its file name."""
    return os.path.relpath(path, watch_dir) if watch_dir else os.path.basename(path)


def serve(session: Session) -> int:
    cfg = session.cfg
    session.evaluator_for(plan_for(cfg, session.parsed.explicit))
    print(
        f"serving Ray evaluator {cfg.serve!r}: connect with simeval.connect({cfg.serve!r}); "
        "SIGTERM or Ctrl-C stops it.",
        flush=True,
    )
    while not session.stop.wait(1.0):
        pass
    print("stopping the served evaluator.", flush=True)
    return 0


def install_stop_handlers(stop: threading.Event) -> None:
    def handler(signum, frame):
        print(f"received {signal.Signals(signum).name}: stopping cleanly.", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
