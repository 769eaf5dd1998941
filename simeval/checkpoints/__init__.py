"""Checkpoints: simeval's own format and the ones training libraries write, read without running code.

A training script saves with :func:`save_checkpoint` and anyone reads any known
format (simeval, rsl_rl, skrl, rl_games, SB3, torchrl state dicts, ONNX exports)
with :func:`load_checkpoint`; the launcher is one caller among others. Readers
live in :mod:`simeval.checkpoints.formats`, one module per format, each a
:class:`~simeval.checkpoints.formats.Reader`. Importing this package loads no torch.
"""

from __future__ import annotations

from simeval.checkpoints.base import FORMAT, Checkpoint, CheckpointError, unflatten
from simeval.checkpoints.load import file_hash, load_checkpoint, peek_step
from simeval.checkpoints.save import save_checkpoint

__all__ = [
    "FORMAT",
    "Checkpoint",
    "CheckpointError",
    "file_hash",
    "load_checkpoint",
    "peek_step",
    "save_checkpoint",
    "unflatten",
]
