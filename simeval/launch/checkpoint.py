"""Checkpoints that cannot run code: tensors and plain data, loaded with weights_only.

simeval's own format is below; other libraries' are read by ``simeval.launch.formats``.

Format (a ``torch.save``'d dict, read back with ``torch.load(weights_only=True)``):

    format          "simeval-checkpoint/1"
    step            training step (int)
    env             env name the policy was trained on, or None
    policy          {"a/b/c": tensor}: the policy's weights (TensorDict leaves)
    obs_norm        {"a/b": tensor} or None: the VecNorm module's weights and
                    running statistics (its extra state), as simeval.weights stores them
    policy_factory  "module:function" that builds the policy from the env, and
    policy_kwargs   its keyword arguments (JSON-able), or None if unknown

Writes are atomic (temporary file in the same directory, fsync, rename), so a
watcher never sees half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Any

FORMAT = "simeval-checkpoint/1"
_SEP = "/"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit; the message names the file."""


@dataclass
class Checkpoint:
    path: str
    step: int
    env: str | None
    policy: Any  # TensorDict of the policy's weights
    obs_norm: Any = None  # TensorDict of VecNorm weights + statistics, or None
    policy_factory: str | None = None
    policy_kwargs: dict = field(default_factory=dict)
    sha256: str | None = None  # of the bytes that were loaded (what was evaluated)
    meta: dict = field(default_factory=dict)  # format, and where a foreign format's architecture came from

    @property
    def weights_dict(self) -> dict[str, Any]:
        """``weights_dict`` for Evaluator: policy weights, plus make_env's VecNorm statistics."""
        from simeval.envs import OBS_NORM_ID

        out = {"policy": self.policy}
        if self.obs_norm is not None:
            out[OBS_NORM_ID] = self.obs_norm
        return out


def _flatten(td) -> dict[str, Any]:
    out = {}
    for key, value in td.items(True, True):
        parts = (key,) if isinstance(key, str) else key
        if any(_SEP in p for p in parts):
            raise ValueError(f"cannot store key {key!r}: it contains {_SEP!r}.")
        out[_SEP.join(parts)] = value.detach().cpu().clone()
    return out


def unflatten(flat: dict[str, Any]):
    from tensordict import TensorDict

    td = TensorDict()
    for key, value in flat.items():
        td.set(tuple(key.split(_SEP)), value)
    return td


def save_checkpoint(
    path: str | os.PathLike,
    policy,
    step: int,
    obs_norm=None,
    env: str | None = None,
    *,
    policy_factory: str | None = None,
    policy_kwargs: dict | None = None,
) -> str:
    """Write a checkpoint atomically and return its path.

    ``policy`` is an nn.Module (or a weights TensorDict); ``obs_norm`` the
    training env's VecNorm transform, whose running statistics are kept.
    The factory defaults to the one stamped on the policy by
    ``simeval.launch.policies``.
    """
    import torch

    from simeval.launch.policies import factory_of
    from simeval.weights import as_weights

    if policy_factory is None and factory_of(policy) is not None:
        policy_factory, stamped_kwargs = factory_of(policy)
        policy_kwargs = stamped_kwargs if policy_kwargs is None else policy_kwargs
    policy_kwargs = dict(policy_kwargs or {})
    try:
        json.dumps(policy_kwargs)
    except TypeError as exc:
        raise ValueError(f"policy_kwargs must be plain data (JSON-able) to load safely: {exc}.") from None
    payload = {
        "format": FORMAT,
        "step": int(step),
        "env": env,
        "policy": _flatten(as_weights(policy)),
        "obs_norm": None if obs_norm is None else _flatten(as_weights(obs_norm)),
        "policy_factory": policy_factory,
        "policy_kwargs": policy_kwargs,
    }
    from simeval.atomic import write_atomically

    return write_atomically(path, lambda f: torch.save(payload, f))


def _refusal(path: str, exc: Exception) -> CheckpointError:
    """One line saying why torch refused or failed to load ``path``."""
    if isinstance(exc, pickle.UnpicklingError):
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        what = f"it references {found.group(1)}" if found else "it holds objects other than tensors and plain data"
        return CheckpointError(f"{path}: refused to load: {what} (only tensors and plain data are allowed).")
    reason = str(exc).strip().split(". ")[0].splitlines()[0][:160] if str(exc).strip() else ""
    return CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {reason}).")


def load_checkpoint(path: str | os.PathLike, format: str | None = None) -> Checkpoint:
    """Read a checkpoint of any format simeval knows, without unpickling arbitrary objects.

    The format is recognised by content (``format`` names it instead: one of
    ``simeval.launch.formats.names()``). The file is read once: its sha256
    (``Checkpoint.sha256``) is that of the bytes loaded, so a file replaced
    afterwards cannot be recorded with the wrong hash. Raises CheckpointError
    (one line, naming the file) for a missing, truncated, corrupt, foreign or
    code-carrying file.
    """
    from simeval.launch import formats

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
        raise _refusal(path, err)
    try:
        name = format or formats.detect(path, raw, data)
        if name is None:
            raise _refusal(path, err) if err is not None and not raw.startswith(b"PK") else _unknown(path)
        ck = formats.module(name).read(path, raw, data)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        what = f"{format or name} checkpoint" if (format or name) else "checkpoint"
        raise CheckpointError(f"{path}: malformed {what} ({type(exc).__name__}: {exc}).") from None
    ck.sha256 = hashlib.sha256(raw).hexdigest()
    return ck


def _check_format(format: str | None) -> None:
    from simeval.launch import formats

    if format is not None and format not in formats.names():
        raise CheckpointError(f"unknown checkpoint format {format!r}: one of {', '.join(formats.names())}.")


def _unknown(path: str) -> CheckpointError:
    from simeval.launch import formats

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

    from simeval.launch import formats

    path = os.fspath(path)
    _check_format(format)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such checkpoint file.")
    try:
        data, err = torch.load(path, map_location="cpu", weights_only=True, mmap=True), None
    except Exception as exc:  # noqa: BLE001 - not a torch file (a zip, ONNX), or one that is refused
        data, err = None, exc
    if isinstance(err, pickle.UnpicklingError) and formats.detect(path, None, None) is None:
        raise _refusal(path, err)
    try:
        name = format or formats.detect(path, None, data)
        if name is None:
            raise _refusal(path, err) if err is not None and not _is_zip(path) else _unknown(path)
        return int(formats.module(name).step_of(path, data))
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: malformed checkpoint ({type(exc).__name__}: {exc}).") from None


def _is_zip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"PK"


def file_hash(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (recorded with each result)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
