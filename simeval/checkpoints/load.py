"""Read a checkpoint of any known format: bytes read once, ``weights_only``, hashed.

The format is recognised by content (:mod:`simeval.checkpoints.formats`); every
failure is a :class:`~simeval.checkpoints.base.CheckpointError` whose one line
names the file.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
from collections.abc import Callable
from typing import Any, TypeVar

from simeval.checkpoints import formats
from simeval.checkpoints.base import Checkpoint, CheckpointError

_T = TypeVar("_T")


def _refusal(path: str, exc: BaseException, raw: bytes) -> CheckpointError:
    """One line saying why torch refused or failed to load ``path`` (``raw``: its bytes)."""
    if not raw:
        return CheckpointError(f"{path}: empty file (0 bytes): a checkpoint that was never written.")
    if b"PK\x03\x04".startswith(raw[:4]) and _zip_names(raw) is None or isinstance(exc, EOFError):
        # torch's files are zip archives: a cut or damaged one fails in its zip reader, or ends early.
        return CheckpointError(
            f"{path}: truncated or corrupt file: its archive does not check out (cut short, or changed after it "
            "was written); copy it again from where training wrote it."
        )
    if isinstance(exc, pickle.UnpicklingError):
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        what = f"it references {found.group(1)}" if found else "it holds objects other than tensors and plain data"
        return CheckpointError(f"{path}: refused to load: {what} (only tensors and plain data are allowed).")
    return CheckpointError(
        f"{path}: not a readable checkpoint: torch cannot load it as a file torch.save or a training library "
        "writes (--debug shows torch's error)."
    )


def load_checkpoint(path: str | os.PathLike, format: str | None = None) -> Checkpoint:
    """Read a checkpoint of any format simeval knows, without unpickling arbitrary objects.

    The format is recognised by content (``format`` names it instead: one of
    ``simeval.checkpoints.formats.names()``). The file is read once: its sha256
    (``Checkpoint.sha256``) is that of the bytes loaded, so a file replaced
    afterwards cannot be recorded with the wrong hash. Raises CheckpointError
    (one line, naming the file) for a missing, truncated, corrupt, foreign or
    code-carrying file.
    """
    path = os.fspath(path)
    _check_format(format)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file.") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: a directory, not a checkpoint file (--watch takes a run directory).") from None
    data, err = formats.torch_data(raw)
    name = _format_of(path, raw, data, err, format)
    ck = _reading(path, name, lambda: formats.module(name).read(path, raw, data))
    ck.sha256 = hashlib.sha256(raw).hexdigest()
    return ck


def _format_of(path: str, raw: bytes | None, data: Any, err: BaseException | None, format: str | None) -> str:
    """The format that reads ``path``, or the CheckpointError saying why none can.

    ``raw`` is the file's bytes, or None where only the step is wanted (read from
    disk then only to word an error); ``data``/``err`` are torch's load of it.
    """
    if isinstance(err, pickle.UnpicklingError) and formats.detect(path, raw, None) is None:
        # A torch file that carries code: refused, whatever --format says. Files of a format read without
        # torch (ONNX: the weights-only unpickler fails on its first byte) go to that format's reader.
        raise _refusal(path, err, _bytes(path, raw)) from err
    name = format or formats.detect(path, raw, data)
    if name is None:
        raw = _bytes(path, raw)
        names = _zip_names(raw)
        of_another_kind = names is not None and not any(n.endswith("data.pkl") for n in names)  # not a torch zip
        raise (_refusal(path, err, raw) if err is not None and not of_another_kind else _unknown(path)) from err
    return name


def _bytes(path: str, raw: bytes | None) -> bytes:
    if raw is not None:
        return raw
    with open(path, "rb") as f:
        return f.read()


def _reading(path: str, name: str, call: Callable[[], _T]) -> _T:
    """``call()``, a reader's work on ``path``; whatever a damaged file makes it trip on becomes one line."""
    try:
        return call()
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the file, whatever the reader tripped on
        raise _malformed(path, name) from exc  # the reader's own error stays on the chain, for --debug


def _zip_names(raw: bytes) -> list[str] | None:
    """The member names of a sound zip archive (directory lists, CRCs check out); None for a damaged or no zip."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            return z.namelist() if z.testzip() is None else None
    except Exception:  # noqa: BLE001 - BadZipFile, an undecodable name, a cut member: all damage
        return None


def _malformed(path: str, name: str) -> CheckpointError:
    """What a file gets whose contents a reader tripped on: not what the library writes, in one line."""
    return CheckpointError(
        f"{path}: malformed {name} checkpoint: a field is missing, or of the wrong type or shape, for what {name} "
        "writes; check that the file is whole and is the library's own save (--debug shows where it failed)."
    )


def _check_format(format: str | None) -> None:
    if format is not None and format not in formats.names():
        raise CheckpointError(f"unknown checkpoint format {format!r}: one of {', '.join(formats.names())}.")


def _unknown(path: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: not a checkpoint format simeval knows ({', '.join(formats.names())}); "
        "name one with --format if the file is one."
    )


def peek_step(path: str | os.PathLike, format: str | None = None) -> int:
    """A checkpoint's step, without reading its tensors (memory-mapped, weights_only).

    The watcher orders a backlog by step with this and loads each checkpoint
    in full only when its turn comes. Raises like :func:`load_checkpoint`.
    """
    import torch

    path = os.fspath(path)
    _check_format(format)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such checkpoint file.")
    try:
        data, err = torch.load(path, map_location="cpu", weights_only=True, mmap=True), None
    except Exception as exc:  # noqa: BLE001 - not a torch file (a zip, ONNX), or one that is refused
        data, err = None, exc
    name = _format_of(path, None, data, err, format)
    return _reading(path, name, lambda: int(formats.module(name).step_of(path, data)))


def file_hash(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (recorded with each result)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
