"""The results directory: ``OUT/results.jsonl`` (the source of truth), its attempts journal, a torchrl logger.

Lines are built and written by :mod:`simeval.records` (the same code a served
evaluator's worker uses); a watcher resumes from them. Metrics also go to a
torchrl logger (CSV by default) for dashboards.

``OUT/attempts.jsonl`` journals every evaluation started (its key and the launch
that started it), appended and fsync'd before the round runs, so a record says
how many times its evaluation was started (``attempts``: 1, or more where the
launcher was killed or stopped while it ran and a restart did it again).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from simeval.records import append_record, read_records

RESULTS = "results.jsonl"
ATTEMPTS = "attempts.jsonl"


class ResultsLog:
    """``OUT/results.jsonl`` plus an optional torchrl logger."""

    def __init__(self, out_dir: str, logger: str | None = "csv") -> None:
        self.out_dir = out_dir
        self.path = os.path.join(out_dir, RESULTS)
        self.attempts_path = os.path.join(out_dir, ATTEMPTS)
        os.makedirs(out_dir, exist_ok=True)
        _repair_tail(self.path, "its evaluation runs again")
        _repair_tail(self.attempts_path, "")
        self._attempts: dict[str, int] = {}
        launches = 0
        for entry in read_records(self.attempts_path):
            self._attempts[entry["key"]] = self._attempts.get(entry["key"], 0) + 1
            launches = max(launches, int(entry.get("launch", 0)))
        self.launch = launches + 1  # this launcher's number among those that wrote to OUT
        self._logger = _make_logger(logger, out_dir) if logger else None

    def attempt(self, key: list[Any]) -> int:
        """Journal (durably) that evaluation ``key`` starts now; the times it was started, this one included."""
        name = json.dumps(key)
        append_record(self.attempts_path, {"key": name, "launch": self.launch})
        self._attempts[name] = self._attempts.get(name, 0) + 1
        return self._attempts[name]

    def records(self) -> Iterator[dict[str, Any]]:
        """The records already in results.jsonl, in file order."""
        return read_records(self.path)

    def append(self, record: dict[str, Any], publish: bool = True) -> None:
        """Write ``record`` to results.jsonl (durably); ``publish=False`` leaves the logger to :meth:`publish`."""
        append_record(self.path, record)
        if publish:
            self.publish(record)

    def publish(self, record: dict[str, Any]) -> None:
        """Send an ok record's metrics to the torchrl logger."""
        if self._logger is not None and record.get("status") == "ok":
            # a suite's cells share the step: each gets its own series, eval/<task>/<condition>/<metric>
            prefix = f"eval/{record['task']}/{record['condition']}" if "suite" in record else "eval"
            for name, value in record["metrics"].items():
                if value is not None:
                    self._logger.log_scalar(f"{prefix}/{name}", value, step=record["step"])


def _repair_tail(path: str, consequence: str) -> None:
    """Drop a partial last line left by a crash mid-append (it never was a record), and say so in one line."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
            if consequence:
                print(
                    f"{path}: dropped a partial last line ({len(data) - keep} bytes, a crash mid-append); "
                    f"{consequence}.",
                    flush=True,
                )


def _make_logger(kind: str, out_dir: str):
    from torchrl.record.loggers import get_logger

    try:
        return get_logger(kind, logger_name=os.path.join(out_dir, "logs"), experiment_name="simeval")
    except ImportError as exc:
        from simeval.launch.config import ConfigError

        raise ConfigError(f"--logger {kind} needs its package: {exc}. Install it or use --logger csv.") from None
