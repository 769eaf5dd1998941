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
from typing import Any, BinaryIO, TypeVar

from simeval.checkpoints import formats
from simeval.checkpoints.base import Checkpoint, CheckpointError
from simeval.checkpoints.bounds import (
    DEFAULT_MAX_BYTES,
    HEADER_BYTES,
    check_kind,
    check_size,
    check_zip,
    kind_of,
    open_data,
    torch_load,
    watched,
)

_T = TypeVar("_T")


def _refusal(path: str, exc: BaseException | None, head: bytes, source: BinaryIO | bytes) -> CheckpointError:
    """One line saying why torch refused or failed to load ``path`` (``head``: its first bytes; ``source``: the
    open file or its bytes, looked at only to tell a damaged archive)."""
    if not head:
        return CheckpointError(f"{path}: empty file (0 bytes): a checkpoint that was never written.")
    names = _zip_names(source) if b"PK\x03\x04".startswith(head[:4]) else None
    damaged = b"PK\x03\x04".startswith(head[:4]) and names is None
    if names and any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
        return CheckpointError(
            f"{path}: a TorchScript export (torch.jit.save), not a checkpoint: simeval never runs TorchScript code "
            "from a file; evaluate the checkpoint it was exported from, or its ONNX export (python -m simeval.export)."
        )
    if damaged or isinstance(exc, EOFError):
        # torch's files are zip archives: a cut or damaged one fails in its zip reader, or ends early.
        return _truncated(path)
    if isinstance(exc, pickle.UnpicklingError) and kind_of(head) is not None:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        what = f"it references {found.group(1)}" if found else "it holds objects other than tensors and plain data"
        return CheckpointError(f"{path}: refused to load: {what} (only tensors and plain data are allowed).")
    return CheckpointError(
        f"{path}: not a readable checkpoint: torch cannot load it as a file torch.save or a training library "
        "writes (--debug shows torch's error)."
    )


def _truncated(path: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: truncated or corrupt file: its archive does not check out (cut short, or changed after it "
        "was written); copy it again from where training wrote it."
    )


def load_checkpoint(
    path: str | os.PathLike,
    format: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    within: str | None = None,
) -> Checkpoint:
    """Read a checkpoint of any format simeval knows, without unpickling arbitrary objects.

    The format is recognised by content (``format`` names it instead: one of
    ``simeval.checkpoints.formats.names()``). The file is read once: its sha256
    (``Checkpoint.sha256``) is that of the bytes loaded, so a file replaced
    afterwards cannot be recorded with the wrong hash. Reading is bounded
    (:mod:`simeval.checkpoints.bounds`): only a regular file is read (a FIFO or a
    device is refused without blocking, judged on the open descriptor); a file over
    ``max_bytes``, whose first bytes are no checkpoint's, a zip that would expand
    past ``max_bytes`` (or is a zip bomb) is refused before it is read, and tensors
    that are not compact (expanded views) are refused before any copy. ``within``
    (the watched directory) confines what names inside it lead to: a symlink out of it
    is refused. Raises CheckpointError (one line, naming the file) for a missing,
    oversized, truncated, corrupt, foreign or code-carrying file.
    """
    path = formats.directory_file(os.fspath(path))
    _check_format(format)
    with watched(within):
        with _open(path) as f:
            size = os.fstat(f.fileno()).st_size
            check_size(path, size, max_bytes)
            head = f.read(HEADER_BYTES)
            kind = kind_of(head)
            if kind is None:
                raise _refusal(path, None, head, head)
            check_kind(path, kind, size)
            f.seek(0)
            if kind == "zip" and not check_zip(path, f, max_bytes):
                raise _truncated(path)
            f.seek(0)
            raw = _read_bounded(path, f, size, max_bytes)
        data, err = formats.torch_data(raw, path, max_bytes)
        name = _format_of(path, raw, data, err, format)
        ck = _reading(path, name, lambda: formats.module(name).read(path, raw, data))
    ck.sha256 = hashlib.sha256(raw).hexdigest()
    return ck


def _open(path: str) -> BinaryIO:
    """The checkpoint file at ``path``, open as data (:func:`~simeval.checkpoints.bounds.open_data`); a missing
    one is a CheckpointError."""
    try:
        return open_data(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file.") from None
    except PermissionError:
        raise CheckpointError(f"{path}: not readable (permission denied).") from None


def _read_bounded(path: str, f: BinaryIO, size: int, max_bytes: int) -> bytes:
    """The rest of ``f`` (``size`` bytes when it was opened; a file still being written may have grown),
    never more than ``max_bytes``."""
    parts = [f.read(size)]
    total = len(parts[0])
    while chunk := f.read(1 << 20):
        total += len(chunk)
        check_size(path, total, max_bytes)
        parts.append(chunk)
    return b"".join(parts) if len(parts) > 1 else parts[0]


def _format_of(
    path: str, raw: bytes | None, data: Any, err: BaseException | None, format: str | None, f: BinaryIO | None = None
) -> str:
    """The format that reads ``path``, or the CheckpointError saying why none can.

    ``raw`` is the file's bytes, or None where only the step is wanted (the
    open file ``f`` is then looked at, a header and a zip directory, only to word
    an error); ``data``/``err`` are torch's load of it.
    """
    source: BinaryIO | bytes = raw if raw is not None else f
    head = raw[:HEADER_BYTES] if raw is not None else _head(f)
    if isinstance(err, pickle.UnpicklingError) and formats.detect(path, raw, None) is None:
        # A torch file that carries code: refused, whatever --format says. Files of a format read without
        # torch (ONNX: the weights-only unpickler fails on its first byte) go to that format's reader.
        raise _refusal(path, err, head, source) from err
    name = format or formats.detect(path, raw, data)
    if name is None:
        names = _zip_names(source)
        of_another_kind = names is not None and not any(n.endswith("data.pkl") for n in names)  # not a torch zip
        refused = err is not None and not of_another_kind
        raise (_refusal(path, err, head, source) if refused else _unknown(path)) from err
    return name


def _head(f: BinaryIO) -> bytes:
    """The first bytes of the open file ``f``."""
    f.seek(0)
    return f.read(HEADER_BYTES)


def _reading(path: str, name: str, call: Callable[[], _T]) -> _T:
    """``call()``, a reader's work on ``path``; whatever a damaged file makes it trip on becomes one line."""
    try:
        return call()
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the file, whatever the reader tripped on
        raise _malformed(path, name) from exc  # the reader's own error stays on the chain, for --debug


def _zip_names(source: BinaryIO | bytes) -> list[str] | None:
    """The member names of a sound zip archive (``source``: an open file or bytes; directory lists and CRCs check
    out, read a member at a time); None for a damaged or no zip."""
    import zipfile

    try:
        if not isinstance(source, bytes):
            source.seek(0)
        with zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source) as z:
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


def peek_step(
    path: str | os.PathLike,
    format: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    within: str | None = None,
) -> int:
    """A checkpoint's step, without reading its tensors (memory-mapped, weights_only; a legacy pickle is read).

    The watcher orders a backlog by step with this and loads each checkpoint
    in full only when its turn comes. Bounded, opened and raising like :func:`load_checkpoint`.
    """
    path = formats.directory_file(os.fspath(path))
    _check_format(format)
    with watched(within), _open(path) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_BYTES)
        kind = kind_of(head)
        if kind is None:
            raise _refusal(path, None, head, head)
        check_kind(path, kind, size)
        try:
            # torch memory-maps zips only; a legacy pickle (at most 1 GiB, check_kind) is read whole.
            data, err = torch_load(f, path, max_bytes, mmap=kind == "zip"), None
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - not a torch file (a zip, ONNX), or one that is refused
            data, err = None, exc
        name = _format_of(path, None, data, err, format, f)
        return _reading(path, name, lambda: int(formats.module(name).step_of(path, data)))


def file_hash(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (recorded with each result); the file is opened as data (a regular file)."""
    h = hashlib.sha256()
    with open_data(os.fspath(path)) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
