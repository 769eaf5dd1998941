"""results.jsonl lines: one builder, one durable writer, one reader.

The launcher and a served evaluator's worker write the same lines: the
launcher from each result it records, the worker (``Evaluator(results_path=
...)``) from each round it runs, so a served evaluator's results are durable
whoever triggered them. Lines are appended whole, flushed and fsync'd.

A results file is opened only in place: never through a symbolic link, and
only when it is a regular file (:func:`open_regular`); a line longer than
:data:`MAX_LINE_BYTES` is refused rather than read, so no file can exhaust memory.

A failed line says why (``error_kind``) and whether a resume evaluates it
again by itself (``retry``: ``"resume"``) or only with ``--retry-failed``
(:data:`ERROR_KINDS`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import stat
import time
from collections.abc import Iterator, Mapping
from typing import Any

_LIST_KEYS = ("episode_returns", "episode_lengths")
# Per-episode 0/1 lists written (as floats) where the result has them: an env with a per-step success key.
_SUCCESS_LISTS = ("episode_success_at_end", "episode_success_once")
# Per-episode lists of keep_episodes results that are not written (their means are metrics).
_EPISODE_ONLY = ("episode_terminated", "episode_truncated", "episode_info/", "episode_seeds", "episode_env_seeds",
    "episode_conditions/", "episode_sub_envs", "episode_ordinals")
# Keys of a result that are no metric: what the round was and where it ran, and per-episode lists.
_NOT_METRICS = ("step", "video", "workers", "round", *_LIST_KEYS, *_SUCCESS_LISTS)
# Per-episode whole numbers written where the result has them: seeds, and where each episode ran in its round.
_INT_LISTS = ("episode_seeds", "episode_env_seeds", "episode_sub_envs", "episode_ordinals")

SCHEMA_VERSION = 2
"""The ``schema`` every line is written with. 2: lines say ``schema``, and ok lines the method of their
interval (``ci_method``, :data:`simeval.metrics.ROUND_CI_METHOD`); a line without ``schema`` is version 1."""

MAX_LINE_BYTES = 64 << 20
"""The longest results line read (64 MiB: a million episodes' returns fit many times over)."""

RETRY_ON_RESUME = "resume"
RETRY_WITH_FLAG = "--retry-failed"
ERROR_KINDS = {
    "plan": RETRY_ON_RESUME,  # it needs another env or policy than the run evaluates, or other settings
    "worker": RETRY_ON_RESUME,  # the worker died, did not start in time, or was lost with its node
    "checkpoint": RETRY_WITH_FLAG,  # the file could not be read, or was refused
    "unsettled": RETRY_ON_RESUME,  # a watched file still being written when the run ended
    "evaluation": RETRY_WITH_FLAG,  # building its policy or running its round raised (weights that do not fit)
}
"""A failed line's ``error_kind`` -> its ``retry``: who evaluates it again (a resume by itself, or the flag)."""


class ResultsFileError(ValueError):
    """A results file simeval will not open (a link, not a regular file) or read (a line too long, not JSON).

    The message is one line naming the file and what to do.
    """


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
        if name in _NOT_METRICS or name.startswith(_EPISODE_ONLY):
            continue
        value = plain(value)
        if value is None or isinstance(value, (int, float)):
            out[name] = value
    return out


def schema_of(record: Mapping[str, Any]) -> int:
    """The schema version a line was written with: its ``schema``, 1 for a line that has none."""
    return int(record.get("schema") or 1)


def make_record(result: Mapping[str, Any], prefix: str = "eval", **context: Any) -> dict[str, Any]:
    """A results.jsonl line for an Evaluator result (``keep_episodes=True``), plus ``context``.

    ``episode_success_at_end`` / ``episode_success_once`` (0.0 or 1.0 per episode, in
    ``episode_returns``' order) are written where the result has them; ``schema`` and ``ci_method``
    (the method of ``reward_ci_low`` / ``reward_ci_high``) always. ``episode_sub_envs`` / ``episode_ordinals``
    (where each episode ran: its global sub-env and its ordinal there) and ``round`` (the round's shape:
    ``num_envs``, ``quotas``, ``seed``, ``shards``, ``device``) say how to re-run any episode of the line
    (``python -m simeval.launch --replay``).
    """
    from simeval.metrics import ROUND_CI_METHOD

    record = {
        "schema": SCHEMA_VERSION,
        "ci_method": ROUND_CI_METHOD,
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
    for key in _INT_LISTS:
        if result.get(f"{prefix}/{key}") is not None:
            record[key] = [int(v) for v in plain(result[f"{prefix}/{key}"])]
    drawn = {
        key.rsplit("/", 1)[1]: [float(v) for v in plain(values)]
        for key, values in result.items()
        if key.startswith(f"{prefix}/episode_conditions/")
    }
    if drawn:
        record["episode_conditions"] = drawn
    if result.get(f"{prefix}/round") is not None:
        record["round"] = dict(result[f"{prefix}/round"])
    if result.get(f"{prefix}/workers"):
        record["workers"] = list(result[f"{prefix}/workers"])  # Ray: where each shard ran, and its re-runs
    record.update(context)
    return record


def failed_record(
    path: str, message: str, step: int | None = None, name: str | None = None, kind: str = "checkpoint"
) -> dict[str, Any]:
    """The line for a checkpoint that could not be evaluated, with why (``kind``) and who retries it.

    ``kind`` is a key of :data:`ERROR_KINDS`; the line's ``retry`` says whether a
    resume evaluates the checkpoint again by itself (``"resume"``) or only
    ``--retry-failed`` does.
    """
    if kind not in ERROR_KINDS:
        raise ValueError(f"unknown error kind {kind!r}: one of {', '.join(ERROR_KINDS)}.")
    name = name or os.path.basename(path)
    record = {"schema": SCHEMA_VERSION, "status": "failed", "checkpoint": path, "checkpoint_name": name}
    record["error"] = message
    if step is not None:
        record["step"] = int(step)
    record.update(error_kind=kind, retry=ERROR_KINDS[kind])
    return record


def retried_on_resume(record: Mapping[str, Any], retry_failed: bool = False) -> bool:
    """Whether a resume evaluates this line's checkpoint (or cell) again.

    Yes for a failed line whose ``retry`` is ``"resume"``, and for every failed line
    when ``retry_failed`` (``--retry-failed``); never for an ok line. A failed line
    written before lines said ``retry`` is retried only with ``retry_failed``.
    """
    if record.get("status") != "failed":
        return False
    return retry_failed or record.get("retry") == RETRY_ON_RESUME


def open_regular(
    path: str,
    flags: int,
    fix: str = "move it aside or use another directory",
    *,
    follow: bool = False,
    error: type[ValueError] = ResultsFileError,
    what: str = "results files",
) -> int:
    """``os.open(path, flags)`` for a regular file only, checked on the open descriptor; the descriptor.

    Every read of a data file goes through this one function (results files here, checkpoints and the
    files beside them through :func:`simeval.checkpoints.bounds.open_data`, YAML through
    :func:`simeval.yaml_files.read_yaml`). ``O_NONBLOCK`` keeps a FIFO from blocking the open, ``fstat``
    on the descriptor says what was opened (no race between check and use), and the descriptor is
    returned blocking and close-on-exec. Without ``follow`` the last component of ``path`` must not be
    a symbolic link (``O_NOFOLLOW``). Created files get mode 0666 less the umask.

    Raises:
        ValueError: of class ``error``, one line naming ``path`` and ``fix``: a symbolic link (without
            ``follow``), or anything but a regular file (a FIFO, a directory, a device, a socket).
        FileNotFoundError: there is no file (and ``flags`` do not create one).
    """
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | nofollow | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if not follow and (exc.errno == errno.ELOOP or (exc.errno != errno.ENOENT and os.path.islink(path))):
            raise error(f"{path} is a symbolic link; simeval opens {what} only in place: {fix}.") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader, a directory
            raise error(f"{path} is not a regular file: {fix}.") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{path} is not a regular file ({_kind_of(mode)}): {fix}.")
    os.set_blocking(fd, True)
    return fd


def _kind_of(mode: int) -> str:
    """A file type in words: a directory, a FIFO, a socket, a device."""
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def append_record(path: str, record: Mapping[str, Any]) -> None:
    """Append one line, whole: a crash leaves at most a partial last line, which readers drop.

    The file is created (mode 0666 less the umask) or appended to in place: a symbolic link or
    a file that is not regular is a :class:`ResultsFileError`.
    """
    data = (json.dumps(record, allow_nan=False) + "\n").encode()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(
    path: str, max_line: int = MAX_LINE_BYTES, fix: str = "put the results file itself there"
) -> Iterator[dict[str, Any]]:
    """Every complete line of a results file (a partial last line from a crash is skipped).

    Raises:
        ResultsFileError: one line naming the file (and ``fix`` where it is a link or not a regular
            file): a symbolic link, not a regular file, a line over ``max_line`` bytes (refused
            before it is read whole), or a line that is not a JSON object.
    """
    for _, record in numbered_records(path, max_line, fix):
        yield record


def numbered_records(
    path: str, max_line: int = MAX_LINE_BYTES, fix: str = "put the results file itself there"
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for every complete line of a results file, numbered from 1 as an editor
    numbers them (blank lines count, and hold no record); as :func:`read_records`, which it reads for."""
    try:
        fd = open_regular(path, os.O_RDONLY, fix=fix)
    except FileNotFoundError:
        return
    with os.fdopen(fd, "rb") as f:
        number = 0
        while True:
            line = f.readline(max_line + 1)
            number += 1
            if not line.endswith(b"\n"):
                if len(line) > max_line:
                    raise ResultsFileError(
                        f"{path}: line {number} is over {max_line >> 20} MiB, which no results line is: "
                        "the file is damaged or not a results file; move it aside."
                    )
                return  # the end, or a partial last line from a crash
            if line.strip():
                yield number, _parse(line, path, number)


def _parse(line: bytes, path: str, number: int) -> dict[str, Any]:
    """A results line as a dict; ResultsFileError naming the file and line when it is not a JSON object."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ResultsFileError(f"{path}: line {number} is not JSON ({exc}): the file is damaged.") from None
    if not isinstance(record, dict):
        raise ResultsFileError(f"{path}: line {number} is not a JSON object: the file is damaged.")
    return record
