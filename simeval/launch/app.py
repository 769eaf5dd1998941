"""The launcher's stages, one way: a source of checkpoints -> evaluate -> record.

``--checkpoint`` is a source of one checkpoint, ``--watch`` a
:class:`~simeval.launch.sources.Watcher` (both
:class:`~simeval.launch.sources.CheckpointSource`); a
:class:`~simeval.launch.session.Session` holds the evaluators (built for the
plan of the first checkpoint that evaluates, see its module), and
:class:`~simeval.launch.sweep.Sweep` hands checkpoints to idle ones and
appends every outcome to ``OUT/results.jsonl``.
``--serve`` starts a named Ray evaluator whose worker writes the same lines
itself. SIGTERM/SIGINT set a stop flag: running rounds are abandoned (nothing
partial is written) and the process exits 0.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from simeval.checkpoints import load_checkpoint
from simeval.envs import check_env
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError
from simeval.launch.plan import plan_for
from simeval.launch.results import ResultsLog, failures_line, resume_from
from simeval.launch.session import Session, install_stop_handlers
from simeval.launch.sources import One, Watcher, check_watch_dir
from simeval.launch.sweep import Sweep, reached

if TYPE_CHECKING:
    from simeval.launch.results import ResultsLog


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
    log = ResultsLog(out, cfg.logger if cfg.source != "serve" else None)
    print(f"results: {log.path}", flush=True)
    if cfg.suite:
        from simeval.launch.suite_run import run_suite  # suites load NumPy (conditions): only a suite run does

        return run_suite(parsed, out, log, stop)
    session = Session(parsed, out, stop)
    try:
        if cfg.source == "serve":
            return serve(session)
        if cfg.source == "checkpoint":
            source = One(load_checkpoint(cfg.checkpoint, cfg.format, max_bytes=cfg.max_checkpoint_bytes))
            return Sweep(session, log, keep_going=False).run(source)
        return run_watch(session, log)
    finally:
        session.close()


def run_watch(session: Session, log: ResultsLog) -> int:
    """``--watch DIR``: every checkpoint there, once each, resuming after those already in results.jsonl.

    The newest line of each checkpoint decides: ok, or failed for a reason a resume does not retry
    (``retry: "--retry-failed"``, unless that flag is given), and it is skipped; else it is evaluated again.
    The plan of the newest ok line is held, so a resume evaluates what the run evaluated.
    """
    cfg = session.cfg
    records = list(log.records())
    resume = resume_from(records, lambda r: r.get("checkpoint_name"), cfg.retry_failed)
    if resume.done:
        print(f"resuming: {len(resume.done)} checkpoint(s) already in {log.path}", flush=True)
    line = failures_line("checkpoint(s)", len(resume.retried), len(resume.left), cfg.retry_failed)
    if line:
        print(line, flush=True)
    for record in reversed(records):  # the newest ok line that states its plan
        if record.get("status") == "ok" and session.hold(record.get("plan")):
            break
    closing = reached(cfg.until_step, resume.steps)
    watcher = Watcher(
        cfg.watch, resume.done, session.stop, cfg.poll_interval, cfg.format, max_bytes=cfg.max_checkpoint_bytes
    )
    return Sweep(session, log, keep_going=True).run(watcher, closing=closing)


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
