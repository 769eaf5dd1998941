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

from simeval.checkpoints import formats
from simeval.checkpoints.base import Checkpoint, CheckpointError


def _refusal(path: str, exc: BaseException, raw: bytes | None = None) -> CheckpointError:
    """One line saying why torch refused or failed to load ``path`` (``raw``: its bytes, when at hand)."""
    if raw is not None and not raw:
        return CheckpointError(f"{path}: empty file (0 bytes): a checkpoint that was never written.")
    reason = str(exc).strip().split(". ")[0].splitlines()[0][:160] if str(exc).strip() else ""
    if raw is not None and b"PK\x03\x04".startswith(raw[:4]) and not _sound_zip(raw) or isinstance(exc, EOFError):
        # torch's files are zip archives: a cut or damaged one fails in its zip reader, or ends early.
        return CheckpointError(f"{path}: truncated or corrupt file ({type(exc).__name__}: {reason}).")
    if isinstance(exc, pickle.UnpicklingError):
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        what = f"it references {found.group(1)}" if found else "it holds objects other than tensors and plain data"
        return CheckpointError(f"{path}: refused to load: {what} (only tensors and plain data are allowed).")
    return CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {reason}).")


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
    if isinstance(err, pickle.UnpicklingError) and formats.detect(path, raw, None) is None:
        # A torch file that carries code: refused, whatever --format says. Files of a format read without
        # torch (ONNX: the weights-only unpickler fails on its first byte) go to that format's reader.
        raise _refusal(path, err, raw)
    name = format or formats.detect(path, raw, data)
    if name is None:
        raise _unreadable(path, err, raw)
    try:
        ck = formats.module(name).read(path, raw, data)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes a reader trip on: one line naming it
        raise _malformed(path, name, exc) from None
    ck.sha256 = hashlib.sha256(raw).hexdigest()
    return ck


def _unreadable(path: str, err: BaseException | None, raw: bytes) -> CheckpointError:
    """Why no format recognises ``path``: torch could not read it (damaged, refused), or it is of no known kind."""
    if err is not None and not _zip_of_another_kind(raw):
        return _refusal(path, err, raw)
    return _unknown(path)


def _zip_of_another_kind(raw: bytes) -> bool:
    """A sound zip that is no torch file (an SB3 zip of another layout), rather than a damaged torch file."""
    import zipfile

    if not _sound_zip(raw):
        return False
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        return not any(name.endswith("data.pkl") for name in z.namelist())


def _sound_zip(raw: bytes) -> bool:
    """A zip archive whose directory lists and whose members' CRCs check out."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            return z.testzip() is None
    except Exception:  # noqa: BLE001 - BadZipFile, an undecodable name, a cut member: all damage
        return False


def _malformed(path: str, name: str, exc: BaseException) -> CheckpointError:
    text = str(exc).strip()
    reason = text.splitlines()[0][:200] if text else ""
    return CheckpointError(f"{path}: malformed {name} checkpoint ({type(exc).__name__}: {reason}).")


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
    if isinstance(err, pickle.UnpicklingError) and formats.detect(path, None, None) is None:
        with open(path, "rb") as f:
            raise _refusal(path, err, f.read())
    name = format or formats.detect(path, None, data)
    if name is None:
        with open(path, "rb") as f:
            raise _unreadable(path, err, f.read())
    try:
        return int(formats.module(name).step_of(path, data))
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes a reader trip on: one line naming it
        raise _malformed(path, name, exc) from None


def file_hash(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (recorded with each result)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
