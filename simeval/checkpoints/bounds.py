"""Bounds on what reading a checkpoint may cost: file size, a header to recognise, zip directories, tensors.

Every reader goes through these before and after torch's ``weights_only`` load,
so that no file, however it was made, makes simeval allocate without bound:

- every file is opened as data (:func:`open_data`): a regular file only, checked on the open
  descriptor (a FIFO, a device or a directory is refused without blocking); inside a watched
  directory (:func:`watched`) what a name leads to must lie there once opened;
- a file larger than ``max_bytes`` (:data:`DEFAULT_MAX_BYTES`, ``--max-checkpoint-size``) is
  refused before it is read;
- its first bytes must be those of a zip archive (torch's files, SB3's zips), a
  pickle (torch's legacy format) or a protobuf (ONNX): anything else is refused
  having read :data:`HEADER_BYTES`;
- a zip's uncompressed sizes are summed from its directory before any member is
  read: over ``max_bytes``, or a member that expands more than :data:`MAX_RATIO`
  times (a zip bomb), is refused;
- every tensor loaded must be compact: its logical size within its storage, no
  zero or overlapping strides (an expanded 1-element tensor would otherwise be
  copied to gigabytes), and all of them together may view at most twice the
  bytes their storages hold, plus 16 MiB (a thousand views of one storage
  would otherwise be copied a thousand times), so copies of the weights cost
  about what the file holds.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any, BinaryIO

from simeval.checkpoints.base import CheckpointError

DEFAULT_MAX_BYTES = 32 << 30  # 32 GiB: the largest released VLA weights (7B parameters in float32: 28 GiB) fit
HEADER_BYTES = 16
_MAX_SAFETENSORS_HEADER = 100 << 20  # safetensors' own limit on its JSON header
MAX_LEGACY_BYTES = 1 << 30  # torch's pre-1.6 pickle format: nothing to check before reading it whole
MAX_PROTOBUF_BYTES = 2 << 30  # protobuf's limit on one message (an ONNX model)
MAX_RATIO = 100  # uncompressed / compressed size of one zip member; weights compress about 1.1x, JSON about 10x
_RATIO_FROM = 16 << 20  # members smaller than this may compress as much as they like
_MAX_MEMBERS = 100_000
MAX_TIED_MARGIN = 16 << 20  # views of shared storages may stand for twice the storages' bytes, plus this
_WATCHED: ContextVar[str | None] = ContextVar("simeval_watched_directory", default=None)
_NOT_DATA = "a checkpoint and the files read beside it are regular files (--watch takes a run directory)"
_MAX_DEPTH = 32  # nesting of dicts and lists walked to find the tensors of a loaded file


@contextmanager
def watched(directory: str | None) -> Iterator[None]:
    """Within it, a data file named inside ``directory`` (a watched run directory) must lie inside it once
    opened: a symlink (the file, or a directory on the way) that leads out is refused by :func:`open_data`,
    judged on the open descriptor. ``None`` confines nothing (``--checkpoint`` follows links anywhere)."""
    token = _WATCHED.set(directory)
    try:
        yield
    finally:
        _WATCHED.reset(token)


def open_data(path: str) -> BinaryIO:
    """The regular file at ``path``, open for reading as data (:func:`simeval.records.open_regular`).

    Symbolic links are followed (``last.pt -> step_100.pt``, the Hugging Face cache's links into
    ``blobs/``), except out of a watched directory (:func:`watched`). Every check is made on the
    open descriptor, so nothing swapped in after a listing is read.

    Raises:
        CheckpointError: one line naming ``path``: not a regular file (a FIFO, a device, a directory),
            or a link out of the watched directory.
        FileNotFoundError, PermissionError: as ``open`` does (callers word them).
    """
    from simeval.records import open_regular

    fd = open_regular(path, os.O_RDONLY, _NOT_DATA, follow=True, error=CheckpointError, what="checkpoints")
    f = os.fdopen(fd, "rb")
    try:
        _check_inside(f.fileno(), path)
    except BaseException:
        f.close()
        raise
    return f


def _check_inside(fd: int, path: str) -> None:
    """Refuse the descriptor ``fd`` opened at ``path`` when ``path`` is named inside the watched directory
    but the file opened lies outside it."""
    root = _WATCHED.get()
    if root is None or not _under(os.path.abspath(path), os.path.abspath(root)):
        return
    real = _opened_path(fd, path)
    if real is None or not _under(real, os.path.realpath(root)):
        raise CheckpointError(
            f"{path}: a symlink that leads out of the watched directory (to {real or 'another file'}): refused; "
            "copy the checkpoint into the run directory instead."
        )


def _opened_path(fd: int, path: str) -> str | None:
    """Where the file open as ``fd`` lies: the kernel's name for the descriptor; else ``path`` resolved now,
    if that is the very file open (same device and inode); else None."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    real = os.path.realpath(path)
    try:
        named, opened = os.lstat(real), os.fstat(fd)
    except OSError:
        return None
    return real if (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino) else None


def _under(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def _reopenable(f: BinaryIO) -> str | None:
    """A name that opens the very file ``f`` is (``/proc/self/fd/N``), for readers that need one (a memory map)."""
    for name in (f"/proc/self/fd/{f.fileno()}", f"/dev/fd/{f.fileno()}"):
        if os.path.exists(name):
            return name
    return None


def describe(n: int) -> str:
    """``n`` bytes as a reader writes it (``512 MiB``, ``32 GiB``)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def parse_size(text: str | int | float) -> int:
    """``"32G"``, ``"512MiB"``, ``"1.5GB"`` or a number of bytes as bytes (binary units); ValueError otherwise."""
    import math
    import re

    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, (int, float)):
        number, unit = float(text), ""
    else:
        found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
        if not found:
            raise ValueError(f"not a size: {text!r} (e.g. 32G, 512M or a number of bytes)")
        number, unit = float(found.group(1)), found.group(2).upper()
    value = number * (1 << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit])
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"not a size: {text!r} (a positive number of bytes)")
    return int(value)


def check_size(path: str, size: int, max_bytes: int) -> None:
    """A CheckpointError when a file of ``size`` bytes is over ``max_bytes``."""
    if size > max_bytes:
        raise CheckpointError(
            f"{path}: {describe(size)}, over the checkpoint size cap of {describe(max_bytes)}: not read. "
            "If it is a genuine checkpoint, raise the cap with --max-checkpoint-size (load_checkpoint(max_bytes=))."
        )


def kind_of(head: bytes) -> str | None:
    """What a file's first bytes say it is: ``"zip"``, ``"pickle"`` (torch's legacy format), ``"protobuf"``
    (ONNX: field 1, a varint), ``"safetensors"`` (a header's length, then its JSON), or None."""
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    if head.startswith(b"\x08"):
        return "protobuf"
    if len(head) >= 9 and head[8:9] == b"{" and 2 <= int.from_bytes(head[:8], "little") <= _MAX_SAFETENSORS_HEADER:
        return "safetensors"
    return None


def check_kind(path: str, kind: str, size: int) -> None:
    """Refuse a file whose kind cannot be that large: torch's legacy pickle format (read whole to be checked)
    over :data:`MAX_LEGACY_BYTES`, a protobuf (ONNX) over 2 GiB, protobuf's own limit."""
    limit = {"pickle": MAX_LEGACY_BYTES, "protobuf": MAX_PROTOBUF_BYTES}.get(kind)
    if limit is not None and size > limit:
        what = "torch's legacy (pre-1.6) format" if kind == "pickle" else "an ONNX model (a protobuf)"
        raise CheckpointError(
            f"{path}: {describe(size)} in {what}, over the {describe(limit)} such a file can hold here: not read"
            + (" (re-save it with torch.save)." if kind == "pickle" else ".")
        )


def check_zip(path: str, source: IO[bytes] | bytes, max_bytes: int) -> bool:
    """Refuse a zip (a file object or bytes) whose members would expand past ``max_bytes`` or more than
    :data:`MAX_RATIO` times; reads the directory only. False where there is no readable zip directory
    (a damaged or cut archive: the caller says so), True when it checks out."""
    try:
        with zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source) as z:
            infos = z.infolist()
    except Exception:  # noqa: BLE001 - a damaged zip: the caller says what is wrong with it
        return False
    if len(infos) > _MAX_MEMBERS:
        raise CheckpointError(f"{path}: a zip of {len(infos)} members: not a checkpoint (refused unread).")
    total = sum(info.file_size for info in infos)
    if total > max_bytes:
        raise CheckpointError(
            f"{path}: its zip members expand to {describe(total)}, over the checkpoint size cap of "
            f"{describe(max_bytes)} (refused unread); raise it with --max-checkpoint-size if it is genuine."
        )
    for info in infos:
        if info.file_size > _RATIO_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise CheckpointError(
                f"{path}: zip member {info.filename!r:.60} expands {info.file_size // max(info.compress_size, 1)}x "
                f"(to {describe(info.file_size)}): a zip bomb, not a checkpoint (refused unread)."
            )
    return True


def check_tensors(path: str, data: Any) -> None:
    """Refuse tensors in ``data`` (a torch load: dicts, lists, tuples) that are not compact: a logical size
    beyond their storage, zero or overlapping strides; or views of shared storages that stand for more than
    twice what the storages hold, plus 16 MiB (a copy of each view would cost that). Tied weights (a few
    tensors sharing one storage) are fine."""
    from simeval.weights import not_compact

    tensors = list(_tensors(data, "", 0))
    for name, tensor in tensors:
        problem = not_compact(tensor)
        if problem:
            raise CheckpointError(
                f"{path}: tensor {name or '<root>'!r:.80} of shape {tuple(tensor.shape)} {problem}: "
                "a file torch.save writes from weights has none (refused before any copy)."
            )
    stored = stored_bytes(t for _, t in tensors)
    viewed = sum(t.numel() * t.element_size() for _, t in tensors)
    if viewed > 2 * stored + MAX_TIED_MARGIN:
        raise CheckpointError(
            f"{path}: its {len(tensors)} tensors view {describe(viewed)} of storages holding {describe(stored)} "
            "(one storage viewed over and over): each copy would cost the views' size; tied weights share a "
            "storage a few times, not this often (refused before any copy)."
        )


def stored_bytes(tensors: Iterable[Any]) -> int:
    """The bytes the storages under ``tensors`` hold, each storage counted once, however many views share it."""
    storages: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        storages[key] = max(storages.get(key, 0), storage.nbytes())
    return sum(storages.values())


def _tensors(data: Any, name: str, depth: int) -> Iterator[tuple[str, Any]]:
    import torch

    if isinstance(data, torch.Tensor):
        yield name, data
    elif depth < _MAX_DEPTH and isinstance(data, dict):
        for key, value in data.items():
            yield from _tensors(value, f"{name}.{key}" if name else str(key), depth + 1)
    elif depth < _MAX_DEPTH and isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            yield from _tensors(value, f"{name}[{i}]", depth + 1)


def torch_load(source: bytes | BinaryIO, path: str, max_bytes: int, **kwargs: Any) -> Any:
    """``torch.load(weights_only=True)`` of ``source`` (bytes, or a file :func:`open_data` opened; ``mmap=True``
    maps it where the system names its descriptor), bounded: a zip is checked before (:func:`check_zip`), the
    tensors after (:func:`check_tensors`).

    Raises CheckpointError for what the bounds refuse; torch's own errors otherwise.
    """
    import warnings

    import torch

    with warnings.catch_warnings():  # a TorchScript zip: weights_only refuses it (the caller says what it is)
        warnings.filterwarnings("ignore", message="'torch.load' received a zip file that looks like a TorchScript")
        if isinstance(source, bytes):
            if kind_of(source[:HEADER_BYTES]) == "zip":
                check_zip(path, source, max_bytes)
            data = torch.load(io.BytesIO(source), map_location="cpu", weights_only=True, **kwargs)
        else:
            check_size(path, os.fstat(source.fileno()).st_size, max_bytes)
            source.seek(0)
            if kind_of(source.read(HEADER_BYTES)) == "zip":
                source.seek(0)
                check_zip(path, source, max_bytes)  # a damaged one: torch says so
            source.seek(0)
            named = _reopenable(source) if kwargs.get("mmap") else None
            if named is None:
                kwargs.pop("mmap", None)
            data = torch.load(named or source, map_location="cpu", weights_only=True, **kwargs)
    check_tensors(path, data)
    return data
