"""What every checkpoint reader returns: :class:`Checkpoint`, and the one error they raise.

simeval's own format (written by :func:`simeval.checkpoints.save_checkpoint`) is a
``torch.save``'d dict, read back with ``torch.load(weights_only=True)``:

    format          "simeval-checkpoint/1"
    step            training step (int)
    env             env name the policy was trained on, or None
    policy          {"a/b/c": tensor}: the policy's weights (TensorDict leaves)
    obs_norm        {"a/b": tensor} or None: the VecNorm module's weights and
                    running statistics (its extra state), as simeval.weights stores them
    policy_factory  "module:function" that builds the policy from the env, and
    policy_kwargs   its keyword arguments (JSON-able), or None if unknown

Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simeval.envs import OBS_NORM_ID

if TYPE_CHECKING:
    from tensordict import TensorDict, TensorDictBase

FORMAT = "simeval-checkpoint/1"
_SEP = "/"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit; the message names the file."""


@dataclass
class Checkpoint:
    """A checkpoint as read from a file of any format.

    ``policy`` and ``obs_norm`` are TensorDicts of weights (``obs_norm``: make_env's VecNorm weights and
    statistics, or None); ``policy_factory`` and ``policy_kwargs`` say how to build the policy from the
    env; ``sha256`` is that of the bytes that were loaded; ``meta`` names the format and, for a foreign
    one, where its architecture came from.
    """

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
        """The ``weights_dict`` for Evaluator (policy weights, plus make_env's VecNorm statistics)."""
        out = {"policy": self.policy}
        if self.obs_norm is not None:
            out[OBS_NORM_ID] = self.obs_norm
        return out


def flatten(td: TensorDictBase) -> dict[str, Any]:
    """``td``'s leaves as ``{"a/b/c": tensor}`` (detached CPU copies), as the checkpoint stores them."""
    out = {}
    for key, value in td.items(True, True):
        parts = (key,) if isinstance(key, str) else key
        if any(_SEP in p for p in parts):
            raise ValueError(f"cannot store key {key!r}: it contains {_SEP!r}.")
        out[_SEP.join(parts)] = value.detach().cpu().clone()
    return out


def unflatten(flat: dict[str, Any]) -> TensorDict:
    """The TensorDict that :func:`flatten` stored as ``flat``."""
    from tensordict import TensorDict

    td = TensorDict()
    for key, value in flat.items():
        td.set(tuple(key.split(_SEP)), value)
    return td
