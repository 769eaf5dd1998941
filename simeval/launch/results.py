"""The results directory: ``OUT/results.jsonl`` (the source of truth) and a torchrl logger.

Lines are built and written by :mod:`simeval.records` (the same code a served
evaluator's worker uses); a watcher resumes from them. Metrics also go to a
torchrl logger (CSV by default) for dashboards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from simeval.records import append_record, read_records

RESULTS = "results.jsonl"


class ResultsLog:
    """``OUT/results.jsonl`` plus an optional torchrl logger."""

    def __init__(self, out_dir: str, logger: str | None = "csv") -> None:
        self.out_dir = out_dir
        self.path = os.path.join(out_dir, RESULTS)
        os.makedirs(out_dir, exist_ok=True)
        self._repair_tail()
        self._logger = _make_logger(logger, out_dir) if logger else None

    def _repair_tail(self) -> None:
        """Drop a partial last line left by a crash mid-write: it never was a result."""
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

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


def _make_logger(kind: str, out_dir: str):
    from torchrl.record.loggers import get_logger

    try:
        return get_logger(kind, logger_name=os.path.join(out_dir, "logs"), experiment_name="simeval")
    except ImportError as exc:
        from simeval.launch.config import ConfigError

        raise ConfigError(f"--logger {kind} needs its package: {exc}. Install it or use --logger csv.") from None
