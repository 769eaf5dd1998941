"""The results directory: ``OUT/results.jsonl`` (the source of truth), its attempts journal, a torchrl logger.

Lines are built and written by :mod:`simeval.records` (the same code a served
evaluator's worker uses); a watcher resumes from them. Metrics also go to a
torchrl logger (CSV by default) for dashboards.

``OUT/attempts.jsonl`` journals every evaluation started (its key and the launch
that started it), appended and fsync'd before the round runs, so a record says
how many times its evaluation was started (``attempts``: 1, or more where the
launcher was killed or stopped while it ran and a restart did it again).

Nothing is created before the first write: the directory with the first line
(or journal entry), the logger's tree with the first metrics it gets, so a run
refused on a bad input leaves nothing behind.

Both files are opened in place only (never through a symbolic link, regular
files only), and so is every file already under ``OUT/logs`` (the logger's,
checked at start): anything else there is a :class:`ConfigError` naming it.

A resume reads the newest line of each checkpoint (or checkpoint x cell):
:func:`resume_from` says which are done, which failed lines it evaluates again
by itself (``retry: "resume"``) and which only with ``--retry-failed``.
:func:`other_settings` says which settings the lines already there were evaluated
with otherwise than a new run asks (a reused ``--out``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import stat
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from simeval.launch.config import ConfigError
from simeval.records import ResultsFileError, append_record, open_regular, read_records, retried_on_resume

RESULTS = "results.jsonl"
ATTEMPTS = "attempts.jsonl"
_FIX = "remove it, or give another --out"


class ResultsLog:
    """``OUT/results.jsonl`` plus an optional torchrl logger."""

    def __init__(self, out_dir: str, logger: str | None = "csv") -> None:
        self.out_dir = out_dir
        self.path = os.path.join(out_dir, RESULTS)
        self.attempts_path = os.path.join(out_dir, ATTEMPTS)
        with _config_errors():
            _repair_tail(self.path, "its evaluation runs again")
            _repair_tail(self.attempts_path, "")
            self._attempts: dict[str, int] = {}
            launches = 0
            for entry in read_records(self.attempts_path, fix=_FIX):
                self._attempts[entry["key"]] = self._attempts.get(entry["key"], 0) + 1
                launches = max(launches, int(entry.get("launch", 0)))
        self.launch = launches + 1  # this launcher's number among those that wrote to OUT
        if logger == "csv":  # torchrl's CSV logger appends to OUT/logs/simeval/scalars/*/*.csv
            check_tree(os.path.join(out_dir, "logs"), os.path.join(out_dir, "logs", "simeval"))
        if logger:
            _check_logger(logger)
        self._logger_kind = logger
        self._logger = None  # made with the first metrics it gets (torchrl's makes its tree at once)

    def _make_dir(self) -> None:
        """Create OUT at the first write (not before: a run refused at start leaves nothing)."""
        os.makedirs(self.out_dir, exist_ok=True)

    def attempt(self, key: list[Any]) -> int:
        """Journal (durably) that evaluation ``key`` starts now; the times it was started, this one included."""
        name = json.dumps(key)
        self._make_dir()
        with _config_errors():
            append_record(self.attempts_path, {"key": name, "launch": self.launch})
        self._attempts[name] = self._attempts.get(name, 0) + 1
        return self._attempts[name]

    def records(self) -> Iterator[dict[str, Any]]:
        """The records already in results.jsonl, in file order."""
        with _config_errors():
            yield from read_records(self.path, fix=_FIX)

    def append(self, record: dict[str, Any], publish: bool = True) -> None:
        """Write ``record`` to results.jsonl (durably); ``publish=False`` leaves the logger to :meth:`publish`."""
        self._make_dir()
        with _config_errors():
            append_record(self.path, record)
        if publish:
            self.publish(record)

    def publish(self, record: dict[str, Any]) -> None:
        """Send an ok record's metrics to the torchrl logger (made now, for the first)."""
        if self._logger_kind and record.get("status") == "ok":
            if self._logger is None:
                self._make_dir()
                self._logger = _make_logger(self._logger_kind, self.out_dir)
            # a suite's cells share the step: each gets its own series, eval/<task>/<condition>/<metric>
            prefix = f"eval/{record['task']}/{record['condition']}" if "suite" in record else "eval"
            for name, value in record["metrics"].items():
                if value is not None:
                    self._logger.log_scalar(f"{prefix}/{name}", value, step=record["step"])


@contextlib.contextmanager
def _config_errors() -> Iterator[None]:
    """Turn a :class:`ResultsFileError` (a link or a non-regular file in OUT) into the launcher's ConfigError."""
    try:
        yield
    except ResultsFileError as exc:
        raise ConfigError(str(exc)) from None


def _repair_tail(path: str, consequence: str) -> None:
    """Drop a partial last line left by a crash mid-append (it never was a record), and say so in one line."""
    try:
        fd = open_regular(path, os.O_RDWR, fix=_FIX)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        keep = _after_last_newline(fd, size)
        if keep == size:
            return
        os.ftruncate(fd, keep)
        os.fsync(fd)
    finally:
        os.close(fd)
    if consequence:
        print(
            f"{path}: dropped a partial last line ({size - keep} bytes, a crash mid-append); {consequence}.",
            flush=True,
        )


def _after_last_newline(fd: int, size: int, chunk: int = 1 << 16) -> int:
    """The offset just past the file's last newline (0 without one), read backwards a chunk at a time."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        data = os.pread(fd, end - start, start)
        found = data.rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def check_tree(*roots: str) -> None:
    """Refuse a symbolic link or anything but a directory or regular file at ``roots`` or under the last one.

    torchrl's CSV logger opens its files itself, following links; this check at
    start keeps it from appending to a file elsewhere through a link planted in OUT.
    """
    for root in roots:
        _check_entry(root)
    for folder, dirs, files in os.walk(roots[-1]):
        for name in [*dirs, *files]:
            _check_entry(os.path.join(folder, name))


def _check_entry(path: str) -> None:
    """A ConfigError naming ``path`` when it is a symbolic link, or neither a directory nor a regular file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise ConfigError(f"{path} is a symbolic link; the launcher writes its logs only in place: {_FIX}.")
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise ConfigError(f"{path} is not a regular file: {_FIX}.")


@dataclass
class Resume:
    """What a restart finds in results.jsonl, by key (a checkpoint name, or checkpoint x cell): newest line wins."""

    done: set = field(default_factory=set)
    """Keys not evaluated again: their newest line is ok, or failed and is not retried."""
    retried: set = field(default_factory=set)
    """Failed keys evaluated again now (``retry: "resume"``, or every failed one with ``--retry-failed``)."""
    left: set = field(default_factory=set)
    """Failed keys left as they are (only ``--retry-failed`` evaluates them again)."""
    steps: list = field(default_factory=list)
    """The steps of the done keys' newest lines (what ``--until-step`` has reached)."""
    newest: dict = field(default_factory=dict)
    """Key -> its newest line."""


def resume_from(
    records: Iterable[dict[str, Any]], key_of: Callable[[dict[str, Any]], Hashable | None], retry_failed: bool
) -> Resume:
    """Sort each key's newest line (``key_of(record)``, None: not a line of this run) into done, retried or left."""
    out = Resume()
    for record in records:
        key = key_of(record)
        if key is not None:
            out.newest[key] = record  # file order is time order: the later line wins
    for key, record in out.newest.items():
        if retried_on_resume(record, retry_failed):
            out.retried.add(key)
            continue
        out.done.add(key)
        if record.get("status") == "failed":
            out.left.add(key)
        if record.get("step") is not None:
            out.steps.append(int(record["step"]))
    return out


_ON_RESUME = "a plan mismatch, a lost worker or a file still being written"


def failures_line(noun: str, retried: int, left: int, retry_failed: bool) -> str | None:
    """The one line a resume prints about earlier failures: how many, which it retries, and how to retry the rest."""
    failed = retried + left
    if not failed:
        return None
    head = f"{failed} {noun} failed before: "
    if retry_failed:
        return head + "evaluating them again (--retry-failed)."
    if not left:
        return head + f"evaluating them again ({_ON_RESUME})."
    again = f"{retried} evaluated again now ({_ON_RESUME}), " if retried else ""
    return (
        head + again + f"{left} left as failed (the file was unreadable or refused, or its evaluation raised): "
        "add --retry-failed to evaluate them again."
    )


# The package each torchrl logger needs, checked at start: the logger itself is made with the first metrics.
_LOGGER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def _check_logger(kind: str) -> None:
    """A ConfigError at start when ``--logger kind`` needs a package this Python does not have."""
    package = _LOGGER_PACKAGES.get(kind)
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(
            f"--logger {kind} needs its package: No module named {package!r}. Install it or use --logger csv."
        )


def _make_logger(kind: str, out_dir: str):
    from torchrl.record.loggers import get_logger

    try:
        return get_logger(kind, logger_name=os.path.join(out_dir, "logs"), experiment_name="simeval")
    except ImportError as exc:
        raise ConfigError(f"--logger {kind} needs its package: {exc}. Install it or use --logger csv.") from None


def recorded_settings(record: dict[str, Any]) -> dict[str, Any]:
    """What a results line says it was evaluated with, setting -> value; a setting it does not say is left out.

    Its ``settings`` (lines written since they carry them), its ``env`` and ``env_backend``, its ``suite`` (None:
    a plain run's line; plain lines never carried one), whether it is an adaptive run's look (``adaptive``: its
    rule, None for a fixed run's line) and, for a suite cell's line, the cell's ``seed``, ``num_envs``,
    ``max_steps`` and ``condition_settings``, and (lines with ``settings``) its ``bounds`` and ``reference``.
    """
    view = dict(record.get("settings") or {})
    view["suite"] = record.get("suite")
    view["adaptive"] = (record.get("sequential") or {}).get("rule", "adaptive") if "look" in record else None
    for key in ("env", "env_backend"):
        if key in record:
            view[key] = record[key]
    if "task" in record:
        for key in ("seed", "num_envs", "max_steps", "condition_settings"):
            if key in record:
                view[key] = record[key]
        if "settings" in record:  # written since lines say their settings: no bounds written means none declared
            view["bounds"] = record.get("bounds")
            view["reference"] = record.get("reference")
    return view


def other_settings(
    records: Iterable[dict[str, Any]], now_of: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> dict[str, tuple[Any, Any]]:
    """Setting -> (what a line recorded, what this run asks) for each setting some line recorded otherwise.

    Only ok lines count: a failed line holds no numbers to mix with (a run with fixed settings may evaluate it
    again). ``now_of(record)`` is what this run would evaluate that line's evaluation with (setting -> value), or
    None where the line is not this run's concern. A setting the line does not record is unknown, never
    different. The newest line that differs names the recorded value.
    """
    found: dict[str, tuple[Any, Any]] = {}
    for record in records:
        if record.get("status") != "ok":
            continue
        now = now_of(record)
        if now is None:
            continue
        then = recorded_settings(record)
        for key, value in now.items():
            if key in then and _as_read(then[key]) != _as_read(value):
                found[key] = (then[key], value)
    return found


def reuse_refusal(out_dir: str, found: dict[str, tuple[Any, Any]]) -> str:
    """The one line refusing a run into ``out_dir`` whose lines were evaluated with other settings (``found``)."""
    differ = ", ".join(f"{key} {_shown(then)} (now {_shown(now)})" for key, (then, now) in found.items())
    return (
        f"--out {out_dir} holds results evaluated with other settings: {differ}; give another --out, "
        "or add --append to write this run's lines beside them."
    )


def _as_read(value: Any) -> Any:
    """``value`` as it reads back from a results line (tuples as lists)."""
    return json.loads(json.dumps(value, default=str))


def _shown(value: Any) -> str:
    """A setting's value in a message: None as ``none``, text as it is, the rest as JSON."""
    if value is None:
        return "none"
    return value if isinstance(value, str) else json.dumps(value, default=str)
