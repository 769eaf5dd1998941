"""The checkpoint formats simeval reads, recognised by content; ``--format NAME`` overrides.

Each format is a module with ``NAME`` and:

* ``read(path, raw) -> Checkpoint``: build the Checkpoint from the file's bytes
  (``torch.load(weights_only=True)`` or a zip/ONNX reader; never unpickle code);
* ``recognises(path, raw, data) -> bool``: whether this file is one (``data`` is the
  ``weights_only`` torch load of ``raw``, or None when it is not a torch file);
* ``step_of(path, data) -> int | None``: the training step or iteration, cheaply
  (file name or a scalar in ``data``), for ``--watch``'s ordering;
* ``WATCH``: glob patterns, relative to a run directory, of the files ``--watch``
  evaluates (``model_*.pt``, ``checkpoints/agent_*.pt``, ...).

Order matters in :data:`MODULES`: the first module that recognises a file reads it.
"""

from __future__ import annotations

import importlib
import io
from types import ModuleType
from typing import Any

# name -> module, in detection order: the most specific first, the generic torchrl state_dict last.
MODULES = {
    "sb3": "simeval.launch.formats.sb3",
    "onnx": "simeval.launch.formats.onnx",
    "simeval": "simeval.launch.formats.native",
    "rsl_rl": "simeval.launch.formats.rsl_rl",
    "rl_games": "simeval.launch.formats.rl_games",
    "skrl": "simeval.launch.formats.skrl",
    "torchrl": "simeval.launch.formats.torchrl",
}


def names() -> list[str]:
    return list(MODULES)


def module(name: str) -> ModuleType:
    if name not in MODULES:
        raise ValueError(f"unknown checkpoint format {name!r}: one of {', '.join(MODULES)}.")
    return importlib.import_module(MODULES[name])


def torch_data(raw: bytes) -> tuple[Any, BaseException | None]:
    """``torch.load(weights_only=True)`` of ``raw``: (data, None), or (None, why it failed)."""
    import torch

    try:
        return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True), None
    except Exception as exc:  # noqa: BLE001 - a pickle refusal, a truncated zip, not a torch file, ...
        return None, exc


def detect(path: str, raw: bytes, data: Any) -> str | None:
    """The name of the first format that recognises the file, or None."""
    for name in MODULES:
        if module(name).recognises(path, raw, data):
            return name
    return None


def watch_patterns() -> list[str]:
    """Every format's ``--watch`` patterns, deduplicated, in order."""
    out: list[str] = []
    for name in MODULES:
        for pattern in module(name).WATCH:
            if pattern not in out:
                out.append(pattern)
    return out
