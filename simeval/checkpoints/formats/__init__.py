"""The checkpoint formats simeval reads, recognised by content; ``format=NAME`` overrides.

Each format is a module that satisfies :class:`Reader`. Order matters in
:data:`READERS`: the first reader that recognises a file reads it. Readers
import torch only inside their functions, so importing this registry is light.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from simeval.checkpoints.base import Checkpoint
from simeval.checkpoints.formats import lerobot, native, onnx, rl_games, rsl_rl, sb3, skrl, torchrl


@runtime_checkable
class Reader(Protocol):
    """What a checkpoint format module provides (a module, checked structurally)."""

    NAME: str
    """The format's name (``--format NAME``; recorded as ``checkpoint_format``)."""
    WATCH: list[str]
    """Glob patterns, relative to a run directory, of the files ``--watch`` evaluates."""

    def recognises(self, path: str, raw: bytes | None, data: Any) -> bool:
        """Whether this file is one. ``data`` is the ``weights_only`` torch load of ``raw``, or None
        when it is not a torch file; ``raw`` is None when only the step is wanted (``peek_step``)."""

    def step_of(self, path: str, data: Any) -> int | None:
        """The training step or iteration, cheaply (file name or a scalar in ``data``), for ordering."""

    def read(self, path: str, raw: bytes, data: Any) -> Checkpoint:
        """The Checkpoint built from the file's bytes; never unpickles code."""


def directory_file(path: str) -> str:
    """The file a checkpoint directory is read by (a format's ``DIRECTORY_FILE`` inside it), else ``path``.

    LeRobot's ``pretrained_model/`` is such a directory: its ``model.safetensors`` is the file.
    """
    import os

    for reader in READERS.values():
        inner = getattr(reader, "DIRECTORY_FILE", None)
        if inner and os.path.isfile(os.path.join(path, inner)):
            return os.path.join(path, inner)
    return path


# In detection order: the most specific first, the generic torchrl state_dict last.
READERS: dict[str, ModuleType] = {
    reader.NAME: reader for reader in (sb3, onnx, lerobot, native, rsl_rl, rl_games, skrl, torchrl)
}


def names() -> list[str]:
    """The format names, in detection order."""
    return list(READERS)


def module(name: str) -> Reader:
    """The reader of format ``name``; ValueError naming the known ones otherwise."""
    if name not in READERS:
        raise ValueError(f"unknown checkpoint format {name!r}: one of {', '.join(READERS)}.")
    return READERS[name]


def torch_data(raw: bytes, path: str, max_bytes: int) -> tuple[Any, BaseException | None]:
    """``torch.load(weights_only=True)`` of ``raw`` (the file at ``path``), bounded: (data, None), or (None, why
    it failed). What :mod:`~simeval.checkpoints.bounds` refuses raises its CheckpointError."""
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.bounds import torch_load

    try:
        return torch_load(raw, path, max_bytes), None
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - a pickle refusal, a truncated zip, not a torch file, ...
        return None, exc


def detect(path: str, raw: bytes | None, data: Any) -> str | None:
    """The name of the first format that recognises the file, or None.

    A reader that trips over a damaged file (a zip whose directory is garbage)
    does not recognise it; the caller then says why the file cannot be read.
    """
    for name, reader in READERS.items():
        try:
            recognised = reader.recognises(path, raw, data)
        except Exception:  # noqa: BLE001 - damaged bytes, not a bug in the caller
            recognised = False
        if recognised:
            return name
    return None


def watch_patterns() -> list[str]:
    """Every format's ``--watch`` patterns, deduplicated, in order."""
    out: list[str] = []
    for reader in READERS.values():
        for pattern in reader.WATCH:
            if pattern not in out:
                out.append(pattern)
    return out
