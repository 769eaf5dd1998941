"""simeval's own checkpoint format (``save_checkpoint``): ``format: simeval-checkpoint/1``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simeval.checkpoints.base import Checkpoint

NAME = "simeval"
WATCH = ["*.pt"]


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """Whether ``data`` is a dict saved by :func:`~simeval.checkpoints.save_checkpoint`."""
    from simeval.checkpoints.base import FORMAT

    return isinstance(data, dict) and data.get("format") == FORMAT


def step_of(path: str, data: Any) -> int:
    """The ``step`` the checkpoint was saved with."""
    return int(data["step"])


def read(path: str, raw: bytes | None, data: Any) -> Checkpoint:
    """The :class:`~simeval.checkpoints.Checkpoint` stored in ``data``."""
    from simeval.checkpoints.base import Checkpoint, unflatten
    from simeval.refs import canonical_ref

    return Checkpoint(
        path=path,
        step=step_of(path, data),
        env=data.get("env"),
        policy=unflatten(data["policy"]),
        obs_norm=None if data.get("obs_norm") is None else unflatten(data["obs_norm"]),
        policy_factory=canonical_ref(data["policy_factory"]) if data.get("policy_factory") else None,
        policy_kwargs=dict(data.get("policy_kwargs") or {}),
        meta={"format": NAME},
    )
