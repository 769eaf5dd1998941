"""results.jsonl lines: one builder, one durable writer, one reader.

The launcher and a served evaluator's worker write the same lines: the
launcher from each result it records, the worker (``Evaluator(results_path=
...)``) from each round it runs, so a served evaluator's results are durable
whoever triggered them. Lines are appended whole, flushed and fsync'd.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

_LIST_KEYS = ("episode_returns", "episode_lengths")
# Per-episode 0/1 lists written (as floats) where the result has them: an env with a per-step success key.
_SUCCESS_LISTS = ("episode_success_at_end", "episode_success_once")
# Per-episode lists of keep_episodes results that are not written (their means are metrics).
_EPISODE_ONLY = ("episode_terminated", "episode_truncated", "episode_info/", "episode_seeds", "episode_conditions/")


def plain(value: Any) -> Any:
    """A JSON-ready value: tensors and arrays as lists or numbers, NaN and inf as None."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; keep the file strict
    return value


def metrics_of(result: Mapping[str, Any], prefix: str = "eval") -> dict[str, Any]:
    """The scalar metrics of an Evaluator result, without the prefix (per-episode lists left out)."""
    out = {}
    for key, value in result.items():
        name = key.split("/", 1)[1] if key.startswith(prefix + "/") else key
        if name in ("step", "video", "workers", *_LIST_KEYS, *_SUCCESS_LISTS) or name.startswith(_EPISODE_ONLY):
            continue
        value = plain(value)
        if value is None or isinstance(value, (int, float)):
            out[name] = value
    return out


def make_record(result: Mapping[str, Any], prefix: str = "eval", **context: Any) -> dict[str, Any]:
    """A results.jsonl line for an Evaluator result (``keep_episodes=True``), plus ``context``.

    ``episode_success_at_end`` / ``episode_success_once`` (0.0 or 1.0 per episode, in
    ``episode_returns``' order) are written where the result has them.
    """
    record = {
        "status": "ok",
        "step": int(plain(result[f"{prefix}/step"])),
        "metrics": metrics_of(result, prefix),
        "episode_returns": plain(result.get(f"{prefix}/episode_returns", [])),
        "episode_lengths": plain(result.get(f"{prefix}/episode_lengths", [])),
        "host": socket.gethostname(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    for key in _SUCCESS_LISTS:
        values = result.get(f"{prefix}/{key}")
        if values is not None:
            record[key] = [float(v) for v in plain(values)]
    if result.get(f"{prefix}/episode_seeds") is not None:
        record["episode_seeds"] = [int(v) for v in plain(result[f"{prefix}/episode_seeds"])]
    drawn = {
        key.rsplit("/", 1)[1]: [float(v) for v in plain(values)]
        for key, values in result.items()
        if key.startswith(f"{prefix}/episode_conditions/")
    }
    if drawn:
        record["episode_conditions"] = drawn
    if result.get(f"{prefix}/workers"):
        record["workers"] = list(result[f"{prefix}/workers"])  # Ray: where each shard ran, and its re-runs
    record.update(context)
    return record


def failed_record(path: str, message: str, step: int | None = None, name: str | None = None) -> dict[str, Any]:
    """The line for a checkpoint that could not be evaluated (it is never tried again)."""
    name = name or os.path.basename(path)
    record = {"status": "failed", "checkpoint": path, "checkpoint_name": name, "error": message}
    if step is not None:
        record["step"] = int(step)
    return record


def append_record(path: str, record: Mapping[str, Any]) -> None:
    """Append one line, whole: a crash leaves at most a partial last line, which readers drop."""
    line = json.dumps(record, allow_nan=False) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_records(path: str) -> Iterator[dict[str, Any]]:
    """Every complete line of a results file (a partial last line from a crash is skipped)."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                return
            line = line.strip()
            if line:
                yield json.loads(line)
