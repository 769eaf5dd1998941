"""``--watch DIR``: evaluate each checkpoint training writes, once, in step order.

Restart-safe: the checkpoints already in ``results.jsonl`` (evaluated or
failed) are never evaluated again, and none is skipped. SIGTERM (Slurm
preemption) abandons a running round without writing a partial result.
Stops after ``--until-step`` or when a ``DONE`` file appears.
"""

from __future__ import annotations

import os

from simeval.checkpoint import CheckpointError, load_checkpoint
from simeval.errors import EvalError

DONE_FILE = "DONE"


def candidates(directory: str, seen: set[str]) -> list[str]:
    """Checkpoint files not yet seen (temporary files of atomic writes start with '.')."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in names if n.endswith(".pt") and not n.startswith(".") and n not in seen]


class Watcher:
    def __init__(self, launcher, log) -> None:
        self.launcher = launcher
        self.log = log
        self.cfg = launcher.cfg
        self.directory = self.cfg.watch
        records = list(log.records())
        self.seen = {r["checkpoint_name"] for r in records if "checkpoint_name" in r}
        self.max_step = max((r["step"] for r in records if r.get("status") == "ok"), default=None)

    def reached_until(self) -> bool:
        until = self.cfg.until_step
        return until is not None and self.max_step is not None and self.max_step >= until

    def run(self) -> int:
        stop = self.launcher.stop
        if self.seen:
            print(f"resuming: {len(self.seen)} checkpoint(s) already in {self.log.path}", flush=True)
        while not stop.is_set():
            if self.reached_until():
                print(f"reached --until-step {self.cfg.until_step}; done.", flush=True)
                return 0
            pending = self._load_pending()
            if not pending:
                if os.path.exists(os.path.join(self.directory, DONE_FILE)):
                    print(f"{DONE_FILE} found and every checkpoint evaluated; done.", flush=True)
                    return 0
                stop.wait(self.cfg.poll_interval)
                continue
            ck = pending[0]
            if not self._evaluate(ck):
                break
        print("stopped by signal; results so far are in " + self.log.path, flush=True)
        return 0

    def _load_pending(self) -> list:
        """Readable new checkpoints in step order; unreadable ones are recorded as failed."""
        loaded = []
        for path in candidates(self.directory, self.seen):
            try:
                loaded.append(load_checkpoint(path))
            except CheckpointError as exc:
                self._fail(path, str(exc))
        return sorted(loaded, key=lambda ck: (ck.step, os.path.basename(ck.path)))

    def _evaluate(self, ck) -> bool:
        """Evaluate and record one checkpoint; False if a signal interrupted it."""
        try:
            result = self.launcher.evaluate(ck)
        except (CheckpointError, EvalError, ValueError) as exc:
            self._fail(ck.path, str(exc).strip().splitlines()[0], step=ck.step)
            return True
        if result is None:
            return False
        self.launcher.record(self.log, ck, result)
        self.seen.add(os.path.basename(ck.path))
        self.max_step = ck.step if self.max_step is None else max(self.max_step, ck.step)
        return True

    def _fail(self, path: str, message: str, step: int | None = None) -> None:
        name = os.path.basename(path)
        print(f"checkpoint {name} failed: {message}", flush=True)
        record = {"status": "failed", "checkpoint": path, "checkpoint_name": name, "error": message}
        if step is not None:
            record["step"] = step
        self.log.append(record)
        self.seen.add(name)
