"""Durable results: one JSON line per evaluation, appended, flushed and fsync'd.

``results.jsonl`` is the source of truth (a watcher resumes from it); metrics
also go to a torchrl logger (CSV by default) for dashboards.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

RESULTS = "results.jsonl"
_LIST_KEYS = ("episode_returns", "episode_lengths")


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; keep the file strict
    return value


def metrics_of(result: Mapping[str, Any], prefix: str = "eval") -> dict[str, Any]:
    """The scalar metrics of a formatted result, without the prefix."""
    out = {}
    for key, value in result.items():
        name = key.split("/", 1)[1] if key.startswith(prefix + "/") else key
        if name in ("step", "video", *_LIST_KEYS):
            continue
        value = _plain(value)
        if value is None or isinstance(value, (int, float)):
            out[name] = value
    return out


def make_record(result: Mapping[str, Any], prefix: str = "eval", **context: Any) -> dict[str, Any]:
    """A results.jsonl line for a formatted Evaluator result (``keep_episodes=True``)."""
    record = {
        "status": "ok",
        "step": int(_plain(result[f"{prefix}/step"])),
        "metrics": metrics_of(result, prefix),
        "episode_returns": _plain(result.get(f"{prefix}/episode_returns", [])),
        "episode_lengths": _plain(result.get(f"{prefix}/episode_lengths", [])),
    }
    record.update(host=socket.gethostname(), time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **context)
    return record


def record_from_raw(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A results.jsonl line written by a worker from its raw (unprefixed) metrics."""
    metrics = {k: _plain(v) for k, v in raw.items() if isinstance(v, (int, float)) and k != "step"}
    metrics.update({k: _plain(v) for k, v in (raw.get("custom") or {}).items() if isinstance(v, (int, float))})
    return {
        "status": "ok",
        "step": int(raw["step"]),
        "metrics": metrics,
        "episode_returns": list(raw["episode_returns"]),
        "episode_lengths": list(raw["episode_lengths"]),
        "host": socket.gethostname(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


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
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            for line in f:
                line = line.strip()
                if line:
                    yield json.loads(line)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, allow_nan=False) + "\n"
        with open(self.path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        if self._logger is not None and record.get("status") == "ok":
            for name, value in record["metrics"].items():
                if value is not None:
                    self._logger.log_scalar(f"eval/{name}", value, step=record["step"])


def _make_logger(kind: str, out_dir: str):
    from torchrl.record.loggers import get_logger

    try:
        return get_logger(kind, logger_name=os.path.join(out_dir, "logs"), experiment_name="simeval")
    except ImportError as exc:
        from simeval.config import ConfigError

        raise ConfigError(f"--logger {kind} needs its package: {exc}. Install it or use --logger csv.") from None


def append_jsonl(path: str, record: dict[str, Any]) -> None:
    """Append one record to a results file (used by a served Ray actor)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
