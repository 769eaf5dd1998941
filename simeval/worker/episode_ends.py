"""What a round reads at each kept episode's last step, besides its return and length.

* ``terminated`` / ``truncated``: the done key's siblings (``("next", "terminated")``
  and ``("next", "truncated")`` for the default done key), when the batch has them.
* ``info_keys``: keys relative to ``"next"`` the caller names (``"success"`` is
  ``("next", "success")``); a missing one is an error at the first batch.
* every leaf under ``("next", "log")`` (Isaac Lab's ``extras["log"]``, NaN at
  steps where the env reported nothing), reported as ``log/<leaf name>``.
* ``success``: the first info key whose last part is in
  ``metrics.SUCCESS_NAMES``, a per-step flag, is also tracked over whole
  episodes (true at the last step, true at any step). "log" entries are
  per-episode summaries, not per-step flags: never tracked.

:func:`find` picks the keys once, from the round's first batch; :func:`read`
gives each of them as an [E, T] float64 tensor that ``EpisodeTally`` indexes
at the episodes' ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from tensordict import TensorDictBase

from simeval.metrics import SUCCESS_NAMES

LOG_ROOT = ("next", "log")


@dataclass(frozen=True)
class EndKeys:
    """Batch keys to read at episode ends; ``info`` maps a metric name to its batch key.

    ``success`` is the batch key of the per-step success flag (one of ``info``'s), or None.
    """

    terminated: tuple | None = None
    truncated: tuple | None = None
    info: dict[str, tuple] = field(default_factory=dict)
    success: tuple | None = None

    def batch_keys(self) -> list[tuple]:
        """Every key to read: the flags', then the info keys, each once."""
        keys = [k for k in (self.terminated, self.truncated) if k is not None]
        return keys + [k for k in self.info.values() if k not in keys]


def info_name(key: tuple[str, ...]) -> str:
    """A nested key's metric name: its parts joined by '/'."""
    return "/".join(key)


def _as_tuple(key: str | tuple[str, ...]) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _describe(key: tuple[str, ...]) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


def is_success(value: torch.Tensor) -> torch.Tensor:
    """A success key's values (float64, as :func:`read` gives them) as flags: true where > 0 (NaN: false)."""
    return value > 0


def find(batch: TensorDictBase, done_key: tuple, info_keys: Sequence[tuple[str, ...]]) -> EndKeys:
    """The keys this round reads; a ValueError (one line) for an info key the batch lacks."""
    keys = set(batch.keys(include_nested=True, leaves_only=True))
    keys = {_as_tuple(k) for k in keys}
    flags = {}
    for flag in ("terminated", "truncated"):
        sibling = (*tuple(done_key)[:-1], flag)
        flags[flag] = sibling if sibling in keys else None
    info: dict[str, tuple] = {}
    for key in info_keys:
        full = ("next", *key)
        if full not in keys:
            have = sorted(_describe(k[1:]) for k in keys if k[0] == "next")
            raise ValueError(
                f"info key {_describe(key)} is not in the env's batch (looked for {full}); "
                f"keys under 'next': {', '.join(have) or 'none'}."
            )
        info[info_name(key)] = full
    success = next((("next", *key) for key in info_keys if key[-1] in SUCCESS_NAMES), None)
    log = batch.get(LOG_ROOT, None)
    if isinstance(log, TensorDictBase):
        for leaf in log.keys(include_nested=True, leaves_only=True):
            leaf = _as_tuple(leaf)
            if not isinstance(log.get(leaf), torch.Tensor):
                continue  # non-tensor data has no mean
            info.setdefault("log/" + info_name(leaf), (*LOG_ROOT, *leaf))
    return EndKeys(flags["terminated"], flags["truncated"], info, success)


def read(batch: TensorDictBase, keys: EndKeys, env_ndim: int, shape: torch.Size) -> dict[tuple, torch.Tensor]:
    """Each key's per-step values as [E, T] float64 (bools as 0/1), checked against the done flags' ``shape``."""
    out = {}
    for key in keys.batch_keys():
        value = batch.get(key)
        if isinstance(value, TensorDictBase) or not isinstance(value, torch.Tensor):
            raise ValueError(f"{key} is not a tensor: an info key needs one value per sub-env and step.")
        flat = value.cpu()
        if flat.ndim > env_ndim + 1 and flat.shape[-1] == 1:
            flat = flat.squeeze(-1)
        if flat.ndim != env_ndim + 1:
            raise ValueError(
                f"{key} has shape {tuple(value.shape)} in a batch of {tuple(batch.shape)}: "
                "an info key needs one value (bool or scalar) per sub-env and step."
            )
        flat = flat.unsqueeze(0) if env_ndim == 0 else flat.reshape(-1, flat.shape[-1])
        if flat.shape != shape:
            raise ValueError(
                f"{key} has shape {tuple(value.shape)}; the done flags {tuple(shape)}: one value per step."
            )
        out[key] = flat.to(torch.float64)
    return out
