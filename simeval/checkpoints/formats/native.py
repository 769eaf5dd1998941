"""simeval's own checkpoint format (``save_checkpoint``): ``format: simeval-checkpoint/1``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simeval.refs import canonical_ref

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

    _check(path, data)
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


def _check(path: str, data: dict) -> None:
    """A CheckpointError naming the field of ``data`` that is not what ``save_checkpoint`` writes."""
    import torch

    from simeval.checkpoints.base import CheckpointError

    def fail(problem: str) -> CheckpointError:
        return CheckpointError(f"{path}: {problem}; save_checkpoint writes it (is the file whole?).")

    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise fail(f"step is {step!r:.40}, not a whole number >= 0")
    for key, optional in (("policy", False), ("obs_norm", True)):
        weights = data.get(key)
        if weights is None and optional:
            continue
        if weights is None:
            raise fail(f"{key} is missing")
        if not isinstance(weights, dict):
            raise fail(f"{key} is {_kind(weights)}, not a mapping of weights")
        if not weights:
            raise fail(f"{key} holds no weights")
        for name, value in weights.items():
            if not isinstance(name, str) or "" in name.split("/") or not isinstance(value, torch.Tensor):
                raise fail(f"{key} holds {name!r:.40} -> {_kind(value)}, not a weight's name and tensor")
    for key in ("env", "policy_factory"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise fail(f"{key} is {data[key]!r:.40}, not text")
    if data.get("policy_kwargs") is not None and not isinstance(data["policy_kwargs"], dict):
        raise fail(f"policy_kwargs is {data['policy_kwargs']!r:.40}, not a mapping")


def _kind(value: object) -> str:
    """What ``value`` is, in words: "nothing" for None, else its type's name."""
    return "nothing" if value is None else f"a {type(value).__name__}"
