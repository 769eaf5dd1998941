"""The launcher's stages, one way: a source of weights x cells -> evaluate -> record.

:func:`run` dispatches on a table of modes (:data:`MODES`, keyed by :func:`mode_of`).
``--checkpoint`` is a source of one checkpoint, ``--watch`` a
:class:`~simeval.launch.sources.Watcher` (both
:class:`~simeval.launch.sources.CheckpointSource`). A plain run evaluates each
checkpoint on one nominal cell, a suite run (``--suite``) on the suite's cells
(the fixed strategy, :class:`~simeval.strategies.FixedStrategy`); an adaptive run
(``--until-decided``, ``--until-precise``) evaluates a suite's cells look by look
(:class:`~simeval.strategies.LookStrategy`, :mod:`simeval.launch.adaptive`). Every
strategy runs on the one :class:`~simeval.launch.scheduler.Scheduler`, whose
:class:`~simeval.launch.session.Session` holds the evaluator slots. ``--serve``
starts a named Ray evaluator whose worker writes the same lines itself. ``--replay`` re-runs one recorded
episode (:mod:`simeval.launch.replay`) before any of this is built.
SIGTERM/SIGINT set a stop flag: running rounds are abandoned (nothing partial is
written) and the process exits 0.

Every input is checked before anything is created (the env, the watched
directory, the suite, the checkpoint, the settings of the lines already in a
reused ``--out``): ``OUT`` and the metrics logger's tree appear with the first
write. A run into an ``--out`` whose lines were evaluated with other settings is
refused in one line unless ``--append`` (:func:`check_reuse`); a ``--checkpoint`` whose result it already
holds, with these settings, is not evaluated again unless ``--again`` (:func:`evaluated_before`). Known third-party
noise (Ray's start-up lines) is hidden unless ``--verbose`` (:func:`third_party_output`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.backends.ray_slots import check_capacity, ensure_ray
from simeval.checkpoints import load_checkpoint
from simeval.envs import check_env
from simeval.launch.cells import nominal
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.lines import run_settings
from simeval.launch.plan import plan_for
from simeval.launch.remote import remote_checkpoint
from simeval.launch.results import ResultsLog, other_settings, reuse_refusal
from simeval.launch.scheduler import Scheduler, resume
from simeval.launch.session import Session, install_stop_handlers
from simeval.launch.sources import CheckpointSource, One, Watcher, check_watch_dir
from simeval.strategies import FixedStrategy

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.suite import Suite


def run(parsed: Parsed, out: str) -> int:
    """Run the mode the config asks for; every result goes to OUT/results.jsonl."""
    with third_party_output(parsed.cfg.verbose):
        return _run(parsed, out)


def _run(parsed: Parsed, out: str) -> int:
    cfg = parsed.cfg
    if cfg.mode == "replay":  # one recorded episode: no results file of its own, no evaluator slots
        from simeval.launch.replay import replay  # the worker and the env: torch

        return replay(parsed)
    stop = threading.Event()
    install_stop_handlers(stop)
    if "env" in parsed.explicit:
        try:
            check_env(cfg.env, cfg.env_backend)  # before waiting for checkpoints that may never come
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.source == "watch" and not cfg.suite:
        check_watch_dir(cfg.watch)
    suite = None
    if cfg.suite:
        from simeval.launch.suite_run import check_suite  # suites load NumPy (conditions): only a suite run does

        suite = check_suite(parsed)
    log = ck = None
    if not cfg.adaptive:  # an adaptive run writes OUT/a and OUT/b (or OUT) itself, and checks their lines
        log = ResultsLog(out, cfg.logger if cfg.source != "serve" else None)  # creates nothing: checks OUT's files
        if cfg.source == "checkpoint":  # an adaptive run loads --checkpoint and --baseline itself
            ck = load_checkpoint(cfg.checkpoint, cfg.format, max_bytes=cfg.max_checkpoint_bytes)
        elif cfg.source == "policy_server":
            ck = remote_checkpoint(cfg)
        selecting = cfg.mode in ("select-best", "search")  # its runner checks the lines in OUT itself (its rounds)
        if not cfg.append and not selecting:
            check_reuse(parsed, log, suite, ck)
        before = evaluated_before(parsed, log, ck) if suite is None and not (parsed.again or selecting) else None
        if before is not None:
            print(
                f"{ck.path} (step {before.get('step')}) is already evaluated in {log.path} with these settings: "
                "nothing to do; add --again to evaluate it again (its line is appended).",
                flush=True,
            )
            return 0
    if cfg.backend == "ray":  # the one capacity check: before any worker is asked for
        check_capacity(ensure_ray(), cfg.workers, cfg.num_gpus, {"num_cpus": cfg.num_cpus})
        install_stop_handlers(stop)  # ray.init installs its own SIGTERM handler: ours comes last
    if log is not None:
        print(f"results: {log.path}", flush=True)
    session = Session(parsed, out, stop)
    try:
        return MODES[mode_of(cfg)](Run(session, log, suite, ck, out))
    finally:
        session.close()


def mode_of(cfg: LaunchConfig) -> str:
    """The run's mode (:attr:`LaunchConfig.mode`), a key of :data:`MODES`; a ConfigError for one with no runner."""
    mode = cfg.mode
    if mode not in MODES:
        raise ConfigError(f"{mode}: this launcher has no runner for it yet ({', '.join(MODES)} run).")
    return mode


@dataclass(frozen=True)
class Run:
    """What a mode's runner is given: the session, the results file (None: an adaptive run writes its own), the
    suite, ``--checkpoint``'s loaded checkpoint, and ``--out``."""

    session: Session
    log: ResultsLog | None
    suite: Suite | None
    ck: Checkpoint | None
    out: str


def _serve(run: Run) -> int:
    os.makedirs(run.out, exist_ok=True)  # the served worker appends to OUT/results.jsonl
    return serve(run.session)


def _looks(run: Run) -> int:
    from simeval.launch.adaptive import run_adaptive  # sequential statistics: NumPy

    return run_adaptive(run.session, run.suite, run.out)


def _suite(run: Run) -> int:
    """The suite's cells, then its tasks' ``search:`` blocks (:func:`simeval.launch.suite_run.run_searches`)."""
    from simeval.launch.suite_run import run_searches, run_suite, searched_tasks

    cfg, stop = run.session.cfg, run.session.stop
    code = 0
    if run.suite.cells():
        code = run_suite(run.session, run.log, run.suite, lambda seen: source_of(cfg, seen, stop, run.ck))
    if code or stop.is_set() or not searched_tasks(run.suite):
        return code
    return run_searches(run.session, run.suite, run.ck, run.out)  # check_suite: --checkpoint's, loaded


def _checkpoint(run: Run) -> int:
    """One job: its failure is the run's error, nothing to resume."""
    cfg, stop = run.session.cfg, run.session.stop
    fixed = FixedStrategy(nominal, keep_going=False)
    return Scheduler(run.session, {"": run.log}, fixed).run(source_of(cfg, set(), stop, run.ck))


def _watch(run: Run) -> int:
    return run_watch(run.session, run.log)


def _select_best(run: Run) -> int:
    from simeval.launch.select_best import run_select_best  # the selection's statistics: NumPy

    return run_select_best(run.session, run.log, run.suite)


def _search(run: Run) -> int:
    from simeval.launch.search import run_search  # the map's statistics: NumPy

    return run_search(run.session, run.log, run.ck)


MODES: dict[str, Callable[[Run], int]] = {
    "serve": _serve,
    "until-decided": _looks,
    "until-precise": _looks,
    "suite": _suite,
    "checkpoint": _checkpoint,
    "policy-server": _checkpoint,
    "watch": _watch,
    "select-best": _select_best,
    "search": _search,
}
"""The launcher's modes and their runners: a new mode adds its runner here (and its strategy's registration)."""


def source_of(
    cfg: LaunchConfig, seen: set[str], stop: threading.Event, ck: Checkpoint | None = None
) -> CheckpointSource:
    """The run's source of weights: ``--checkpoint``'s file (``ck``, or loaded now), or a watcher skipping ``seen``."""
    if cfg.source == "checkpoint":
        return One(ck or load_checkpoint(cfg.checkpoint, cfg.format, max_bytes=cfg.max_checkpoint_bytes))
    if cfg.source == "policy_server":
        return One(ck or remote_checkpoint(cfg))
    check_watch_dir(cfg.watch)
    return Watcher(cfg.watch, seen, stop, cfg.poll_interval, cfg.format, max_bytes=cfg.max_checkpoint_bytes)


def check_reuse(parsed: Parsed, log: ResultsLog, suite: Suite | None, ck: Checkpoint | None) -> None:
    """A ConfigError in one line when ``log``'s lines were evaluated with other settings than this run asks.

    Compared, where a line records them (a line written before lines said their ``settings`` is compared on
    what it says, the rest unknown): ``settings`` (episodes or time budget, num_envs, max_steps, seed, VecNorm
    statistics used, the policy asked for), plain run or which suite, fixed or adaptive, the env backend, the
    env (a plain run: ``--env`` given, or ``--checkpoint``'s plan) and a suite cell's settings, condition, bounds
    and reference. A suite's cells the suite no longer has are not compared. ``--append`` skips this check.
    """
    cfg, explicit = parsed.cfg, parsed.explicit
    backends: dict[str, Any] = {}

    def env_backend(env: Any) -> Any:
        """What this run's --env-backend makes of ``env`` (None: unknown here)."""
        if env not in backends:
            try:
                backends[env] = check_env(env, cfg.env_backend) if isinstance(env, str) else None
            except ValueError:
                backends[env] = None
        return backends[env]

    def with_backend(now: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
        backend = env_backend(record.get("env"))
        return {**now, "env_backend": backend} if backend is not None else now

    if suite is None:
        plain = {**run_settings(cfg), "suite": None, "adaptive": None}
        env = _env_of(cfg, explicit, ck)
        if env is not None:
            plain["env"] = env

        def now_of(record: dict[str, Any]) -> dict[str, Any] | None:
            return with_backend(plain, record)

    else:
        from simeval.launch.suite_run import SuiteCell

        cells = {c.key: SuiteCell(c, suite.name) for c in suite.cells()}
        keys = ("seed", "num_envs", "max_steps", "condition_settings", "bounds", "deterministic", "reference")

        def now_of(record: dict[str, Any]) -> dict[str, Any] | None:
            if record.get("suite") != suite.name or "look" in record or "task" not in record:
                return {"suite": suite.name, "adaptive": None}
            cell = cells.get((record["task"], record["condition"]))
            if cell is None:
                return None  # a cell the suite no longer has: no line of this run's cells
            context = cell.context()
            now = {**run_settings(cell.config(cfg)), **{k: context.get(k) for k in keys}, "adaptive": None}
            return with_backend(now, record)

    found = other_settings(log.records(), now_of)
    if found:
        raise ConfigError(reuse_refusal(log.out_dir, found))


def evaluated_before(parsed: Parsed, log: ResultsLog, ck: Checkpoint | None) -> dict[str, Any] | None:
    """The newest ok line of a plain run in ``log`` about ``ck``'s file (its SHA-256) with this run's settings
    and the metrics of its ``--info-keys``.

    None for a run that is not ``--checkpoint``'s, a checkpoint without a digest, or one not evaluated so.
    """
    cfg = parsed.cfg
    if cfg.source != "checkpoint" or ck is None or not ck.sha256:
        return None
    now = {**run_settings(cfg), "suite": None, "adaptive": None}
    env = _env_of(cfg, parsed.explicit, ck)
    if env is not None:
        now["env"] = env
    for record in reversed(list(log.records())):
        if record.get("checkpoint_sha256") != ck.sha256 or "task" in record or "look" in record:
            continue
        if record.get("status") == "ok" and not other_settings([record], lambda _: now) and _measures(record, cfg):
            return record
    return None


def _measures(record: dict[str, Any], cfg: LaunchConfig) -> bool:
    """Whether ``record`` has the metric of every ``--info-keys`` key this run asks for (``a/b`` for a nested one)."""
    metrics = record.get("metrics") or {}
    keys = [key if isinstance(key, str) else "/".join(key) for key in cfg.info_keys]
    return all(key in metrics for key in keys)


def _env_of(cfg: LaunchConfig, explicit: set[str], ck: Checkpoint | None) -> str | None:
    """The env this run evaluates (as :func:`plan_for` decides it, without its warning), None where not known yet.

    ``--env`` given; else ``--checkpoint``'s recorded env, or the default for a simeval checkpoint that records
    none (a foreign one then fails at its evaluation, in its own words); a watched run's come with its checkpoints.
    """
    if "env" in explicit:
        return cfg.env
    if ck is None:
        return None
    if ck.env:
        return ck.env
    return cfg.env if ck.meta.get("format", "simeval") == "simeval" else None


# Third-party lines a launcher run shows only with --verbose: (logger, what it drops).
_RAY_NOISE = (
    ("ray._private.worker", None),  # "Started a local Ray instance.", "Connected to Ray cluster.": its INFO lines
    ("ray._private.authentication.authentication_token_setup", "Token authentication is enabled for this Ray"),
)


class _Drop(logging.Filter):
    """Drop a logger's INFO and lower records (``text`` None), or its records that start with ``text``."""

    def __init__(self, text: str | None) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        if self.text is None:
            return record.levelno >= logging.WARNING
        return not str(record.msg).startswith(self.text)


@contextlib.contextmanager
def third_party_output(verbose: bool) -> Iterator[None]:
    """Quiet by default, for this run only: known third-party lines hidden unless ``verbose``.

    Without ``verbose``: Ray's start-up lines in this process (its INFO lines, the token-auth notice) are
    dropped by filters on those loggers alone; torchrl's VecNormV2 warning is filtered where envs are built
    (:func:`simeval.envs.layout.quiet_vecnorm`). With ``verbose``: every warning is shown (``-W default``, also
    in worker processes and Ray actors started by this run, through ``PYTHONWARNINGS``) and Ray logs at INFO.
    Everything is put back when the run ends: nothing is hidden for code outside the launcher.
    """
    if not verbose:
        filters = [(logging.getLogger(name), _Drop(text)) for name, text in _RAY_NOISE]
        for logger, drop in filters:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger, drop in filters:
                logger.removeFilter(drop)
        return
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "default"  # worker processes and a local Ray cluster's workers inherit it
    sys.warnoptions.append("default")  # quiet_vecnorm steps aside
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            yield
    finally:
        sys.warnoptions.remove("default")
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


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
    fixed = FixedStrategy(nominal, found.done, closing=found.closing)
    return Scheduler(session, {"": log}, fixed).run(source_of(cfg, found.seen, session.stop))


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
