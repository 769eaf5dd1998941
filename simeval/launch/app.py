"""The launcher as a one-way pipeline: a source of checkpoints -> evaluate -> record.

``--checkpoint`` is a source of one checkpoint, ``--watch`` a
:class:`~simeval.launch.watch.Watcher`; :class:`Session` evaluates each with
one Evaluator (built for the first checkpoint's plan) and every outcome is
appended to ``OUT/results.jsonl``. ``--serve`` starts a named Ray evaluator
whose worker writes the same lines itself. SIGTERM/SIGINT set a stop flag: a
running round is abandoned (nothing partial is written) and the process exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from simeval.launch.cli import Parsed
from simeval.launch.plan import EvalPlan, check_env, make_evaluator, plan_for, record_context


@dataclass
class Evaluation:
    result: dict[str, Any]
    seconds: float


class Session:
    """One Evaluator for a run: built for the first checkpoint, refused for a checkpoint that needs another."""

    def __init__(self, parsed: Parsed, out: str, stop: threading.Event) -> None:
        self.parsed = parsed
        self.cfg = parsed.cfg
        self.out = out
        self.stop = stop
        self.evaluator = None
        self.plan: EvalPlan | None = None
        self.env_backend: str | None = None

    def evaluator_for(self, plan: EvalPlan):
        if self.evaluator is not None:
            if plan != self.plan:
                from simeval.launch.checkpoint import CheckpointError

                raise CheckpointError(
                    f"needs {plan.describe()}, but this run evaluates {self.plan.describe()}; use a separate run."
                )
            return self.evaluator
        self.env_backend = check_env(plan.env, self.cfg.env_backend)
        self.evaluator = make_evaluator(self.cfg, plan, self.parsed.extra, self.out, self.env_backend)
        self.plan = plan
        install_stop_handlers(self.stop)  # ray.init installs its own SIGTERM handler: ours comes last
        return self.evaluator

    def evaluate(self, ck) -> Evaluation | None:
        """One round for one checkpoint; None when stopped by a signal (nothing is written)."""
        plan = plan_for(self.cfg, self.parsed.explicit, ck)
        ev = self.evaluator_for(plan)
        weights = dict(ck.weights_dict) if plan.obs_norm else {"policy": ck.policy}
        ev.trigger_eval(weights_dict=weights, step=ck.step)
        start = time.monotonic()
        with _progress(f"step {ck.step}", f"evaluating {ck.path} (step {ck.step}) ...") as tick:
            while True:
                result = ev.poll(timeout=0.5)
                if result is not None:
                    return Evaluation(result, time.monotonic() - start)
                if self.stop.is_set():
                    return None
                tick()

    def record_of(self, ck, evaluation: Evaluation) -> dict:
        from simeval.records import make_record

        return make_record(
            evaluation.result,
            checkpoint=ck.path,
            checkpoint_name=checkpoint_name(ck.path, self.cfg.watch),
            checkpoint_sha256=ck.sha256,
            checkpoint_format=ck.meta.get("format", "simeval"),
            **({"architecture": ck.meta["architecture"]} if "architecture" in ck.meta else {}),
            wall_time=round(evaluation.seconds, 3),
            **record_context(self.cfg, self.plan, self.env_backend),
        )

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.shutdown(timeout=10.0)


class _progress:
    """A tqdm elapsed-time line on a terminal, one printed line otherwise."""

    def __init__(self, desc: str, line: str) -> None:
        self.desc, self.line, self.bar = desc, line, None

    def __enter__(self):
        if sys.stdout.isatty():
            from tqdm import tqdm

            self.bar = tqdm(desc=self.desc, unit="s", bar_format="{desc}: {elapsed} elapsed")
            return lambda: self.bar.update(0)
        print(self.line, flush=True)
        return lambda: None

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.close()


def run(parsed: Parsed, out: str) -> int:
    """Run the mode the config asks for; every result goes to OUT/results.jsonl."""
    from simeval.launch.results import ResultsLog

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

            return evaluate_all([load_checkpoint(cfg.checkpoint, cfg.format)], session, log, keep_going=False)
        return watch(session, log)
    finally:
        session.close()


def watch(session: Session, log) -> int:
    from simeval.launch.watch import Watcher

    records = list(log.records())
    seen = {r["checkpoint_name"] for r in records if "checkpoint_name" in r}
    if seen:
        print(f"resuming: {len(seen)} checkpoint(s) already in {log.path}", flush=True)
    done_steps = [r["step"] for r in records if r.get("status") == "ok"]
    if _reached(session.cfg.until_step, done_steps):
        print(f"reached --until-step {session.cfg.until_step}; done.", flush=True)
        return 0
    cfg = session.cfg
    watcher = Watcher(cfg.watch, seen, session.stop, cfg.poll_interval, cfg.format)
    return evaluate_all(watcher, session, log, keep_going=True)


def checkpoint_name(path: str, watch_dir: str | None) -> str:
    """How results.jsonl names a checkpoint: its path inside the watched directory, else its file name."""
    return os.path.relpath(path, watch_dir) if watch_dir else os.path.basename(path)


def _reached(until: int | None, steps: list[int]) -> bool:
    return until is not None and any(step >= until for step in steps)


def evaluate_all(source: Iterable, session: Session, log, *, keep_going: bool) -> int:
    """Evaluate and record each checkpoint of ``source``; with ``keep_going`` a failure is recorded, not raised."""
    from simeval.errors import EvalError
    from simeval.launch.checkpoint import CheckpointError
    from simeval.launch.watch import Unreadable
    from simeval.records import failed_record

    def fail(path: str, message: str, step: int | None = None) -> None:
        name = checkpoint_name(path, session.cfg.watch)
        print(f"checkpoint {name} failed: {message}", flush=True)
        log.append(failed_record(path, message, step, name))

    for ck in source:
        if isinstance(ck, Unreadable):
            fail(ck.path, ck.error, ck.step)
            continue
        try:
            evaluation = session.evaluate(ck)
        except (CheckpointError, EvalError, ValueError) as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if not keep_going:
                if ck.path in message:
                    raise
                raise CheckpointError(f"{ck.path}: {message}") from exc  # the one line names the file
            fail(ck.path, message, ck.step)
            continue
        if evaluation is None:
            print(
                "stopped by signal before the evaluation finished; nothing partial written; results so far "
                f"are in {log.path}",
                flush=True,
            )
            return 0
        log.append(session.record_of(ck, evaluation))
        print(summary(evaluation.result, ck), flush=True)
        if _reached(session.cfg.until_step, [ck.step]):
            print(f"reached --until-step {session.cfg.until_step}; done.", flush=True)
            return 0
    if session.stop.is_set():
        print(f"stopped by signal; results so far are in {log.path}", flush=True)
    return 0


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


def summary(result: dict, ck) -> str:
    """The terminal table of one evaluation."""
    keys = ("reward", "reward_ci_low", "reward_ci_high", "reward_std", "episode_length", "num_episodes", "fps")
    keys += ("success_rate",)  # only when info_keys or the env's log entries give one
    rows = [f"{'checkpoint':<16}{os.path.basename(ck.path)} (step {ck.step})"]
    rows += [f"{k:<16}{float(result[f'eval/{k}']):.2f}" for k in keys if result.get(f"eval/{k}") is not None]
    return "\n".join(rows)


def install_stop_handlers(stop: threading.Event) -> None:
    def handler(signum, frame):
        print(f"received {signal.Signals(signum).name}: stopping cleanly.", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
