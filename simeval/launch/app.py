"""The launcher's stages, one way: a source of weights x cells -> evaluate -> record.

``--checkpoint`` is a source of one checkpoint, ``--watch`` a
:class:`~simeval.launch.sources.Watcher` (both
:class:`~simeval.launch.sources.CheckpointSource`). A plain run evaluates each
checkpoint on one nominal cell, a suite run (``--suite``) on the suite's cells;
both go through the one :class:`~simeval.launch.pipeline.Pipeline`, whose
:class:`~simeval.launch.session.Session` holds the evaluator slots. An adaptive
run (``--until-decided``, ``--until-precise``) evaluates a suite's cells look by
look on the same session (:mod:`simeval.launch.adaptive`). ``--serve``
starts a named Ray evaluator whose worker writes the same lines itself.
SIGTERM/SIGINT set a stop flag: running rounds are abandoned (nothing partial is
written) and the process exits 0.
"""

from __future__ import annotations

import threading

from simeval.backends.ray_slots import check_capacity, ensure_ray
from simeval.checkpoints import load_checkpoint
from simeval.envs import check_env
from simeval.launch.cells import nominal
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.pipeline import Jobs, Pipeline, resume
from simeval.launch.plan import plan_for
from simeval.launch.results import ResultsLog
from simeval.launch.session import Session, install_stop_handlers
from simeval.launch.sources import CheckpointSource, One, Watcher, check_watch_dir


def run(parsed: Parsed, out: str) -> int:
    """Run the mode the config asks for; every result goes to OUT/results.jsonl."""
    cfg = parsed.cfg
    stop = threading.Event()
    install_stop_handlers(stop)
    if "env" in parsed.explicit:
        try:
            check_env(cfg.env, cfg.env_backend)  # before waiting for checkpoints that may never come
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.source == "watch" and not cfg.suite:
        check_watch_dir(cfg.watch)
    log = None
    if not cfg.adaptive:  # an adaptive run writes OUT/a and OUT/b (or OUT) itself
        log = ResultsLog(out, cfg.logger if cfg.source != "serve" else None)
        print(f"results: {log.path}", flush=True)
    suite = None
    if cfg.suite:
        from simeval.launch.suite_run import check_suite  # suites load NumPy (conditions): only a suite run does

        suite = check_suite(parsed)
    if cfg.backend == "ray":  # the one capacity check: before any worker is asked for
        check_capacity(ensure_ray(), cfg.workers, cfg.num_gpus, {"num_cpus": cfg.num_cpus})
        install_stop_handlers(stop)  # ray.init installs its own SIGTERM handler: ours comes last
    session = Session(parsed, out, stop)
    try:
        if cfg.source == "serve":
            return serve(session)
        if cfg.adaptive:
            from simeval.launch.adaptive import run_adaptive  # sequential statistics: NumPy

            return run_adaptive(session, suite, out)
        if suite is not None:
            from simeval.launch.suite_run import run_suite

            return run_suite(session, log, suite, lambda seen: source_of(cfg, seen, stop))
        if cfg.source == "checkpoint":  # one job: its failure is the run's error, nothing to resume
            return Pipeline(session, log, Jobs(nominal, keep_going=False)).run(source_of(cfg, set(), stop))
        return run_watch(session, log)
    finally:
        session.close()


def source_of(cfg: LaunchConfig, seen: set[str], stop: threading.Event) -> CheckpointSource:
    """The run's source of weights: ``--checkpoint``'s file, loaded now, or a watcher skipping ``seen`` names."""
    if cfg.source == "checkpoint":
        return One(load_checkpoint(cfg.checkpoint, cfg.format, max_bytes=cfg.max_checkpoint_bytes))
    check_watch_dir(cfg.watch)
    return Watcher(cfg.watch, seen, stop, cfg.poll_interval, cfg.format, max_bytes=cfg.max_checkpoint_bytes)


def run_watch(session: Session, log: ResultsLog) -> int:
    """``--watch DIR``: every checkpoint there, once each, resuming after those already in results.jsonl.

    The newest line of each checkpoint decides: ok, or failed for a reason a resume does not retry
    (``retry: "--retry-failed"``, unless that flag is given), and it is skipped; else it is evaluated again.
    The plan of the newest ok line is held, so a resume evaluates what the run evaluated.
    """
    cfg = session.cfg
    found = resume(log, cfg.retry_failed, cfg.until_step)
    for record in reversed(list(log.records())):  # the newest ok line that states its plan
        if record.get("status") == "ok" and session.hold(record.get("plan")):
            break
    jobs = Jobs(nominal, found.done, closing=found.closing)
    return Pipeline(session, log, jobs).run(source_of(cfg, found.seen, session.stop))


def serve(session: Session) -> int:
    """``--serve NAME``: a named Ray evaluator that training processes connect to, until SIGTERM."""
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
