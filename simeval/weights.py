"""Weights as TensorDicts: extract, stage without per-trigger allocation, load.

A weights TensorDict holds a module's parameters and buffers (as
``TensorDict.from_module``) plus, under ``"__extra_state__"``, the extra state
of submodules that keep their data outside parameters and buffers. VecNorm is
the case that matters: its running loc/var/count live in extra state, so a
plain ``TensorDict.from_module(vecnorm)`` silently drops them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

EXTRA = "__extra_state__"
WeightSource = Any  # nn.Module | TensorDictBase


def _has_extra_state(module: nn.Module) -> bool:
    return type(module).get_extra_state is not nn.Module.get_extra_state


def as_weights(source: WeightSource) -> TensorDictBase:
    """A TensorDict view of ``source``'s weights and extra state (no copy).

    A TensorDict's tensors must be compact (:func:`not_compact`): an expanded view of
    a small storage would otherwise cost its full logical size at the first copy. ValueError (one line) if not.
    """
    if isinstance(source, TensorDictBase):
        _check_compact(source)
        return source
    if not isinstance(source, nn.Module):
        raise TypeError(f"weights must be an nn.Module or a TensorDict, got {type(source).__name__}.")
    td = TensorDict.from_module(source, as_module=False).detach()
    extra = {}
    for name, sub in source.named_modules():
        if not _has_extra_state(sub):
            continue
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # VecNorm warns when it has no stats yet
            state = sub.get_extra_state()
        if isinstance(state, Mapping) and state and all(isinstance(v, torch.Tensor) for v in state.values()):
            extra[name or "."] = TensorDict({k: v.detach() for k, v in state.items()})
    if extra:
        td.set(EXTRA, TensorDict(extra))
    return td


def not_compact(tensor: Any) -> str | None:
    """Why ``tensor`` is not compact (see :func:`simeval.checkpoints.bounds.check_tensors`), or None when it is."""
    numel = tensor.numel()
    if numel == 0:
        return None
    storage = tensor.untyped_storage().nbytes()
    logical = numel * tensor.element_size()
    if logical > storage:
        return f"is {logical:,} bytes over a storage of {storage:,} (an expanded or strided view)"
    dims = sorted((abs(s), n) for s, n in zip(tensor.stride(), tensor.shape, strict=True) if n > 1)
    reach = 1
    for stride, size in dims:
        if stride < reach:
            return "has overlapping (zero or aliased) strides"
        reach += stride * (size - 1)
    return None


def _check_compact(td: TensorDictBase) -> None:
    for key, value in td.items(True, True):
        problem = not_compact(value) if isinstance(value, torch.Tensor) else None
        if problem:
            raise ValueError(
                f"weights {key!r:.80} of shape {tuple(value.shape)} {problem}: pass real tensors "
                "(e.g. .contiguous()), not views that would be copied to their full size."
            )


def extract_weights(module: nn.Module) -> TensorDictBase:
    """Detached CPU copy of a module's weights (and VecNorm statistics)."""
    return as_weights(module).clone().cpu()


def layout(td: TensorDictBase) -> tuple:
    """Keys, shapes and dtypes of every leaf: equal layouts can share a buffer."""
    return tuple((key, tuple(v.shape), v.dtype) for key, v in sorted(td.items(True, True), key=lambda kv: str(kv[0])))


class LocalStaging:
    """One reusable buffer per model id; writes copy in place.

    Used by the thread backend: a trigger copies the training weights here
    (training keeps mutating its own tensors), the worker thread loads them.
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        self._device = device
        self._buffers: dict[str, TensorDictBase] = {}
        self._layouts: dict[str, tuple] = {}

    def write(self, sources: Mapping[str, WeightSource]) -> dict[str, TensorDictBase]:
        """Copy each model's weights into its buffer (made anew when the layout changes); the buffers."""
        out = {}
        for model_id, source in sources.items():
            td = as_weights(source)
            lay = layout(td)
            buf = self._buffers.get(model_id)
            if buf is None or self._layouts[model_id] != lay:
                buf = td.clone() if self._device is None else td.to(self._device).clone()
                self._buffers[model_id], self._layouts[model_id] = buf, lay
            else:
                buf.update_(td)
            out[model_id] = buf
        return out


def snapshot(sources: Mapping[str, WeightSource]) -> dict[str, TensorDictBase]:
    """Private copies, for requests that wait in a queue while training goes on."""
    return {k: as_weights(v).clone() for k, v in sources.items()}


_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(-?\d+)\]")


def resolve_model(roots: Mapping[str, Any], model_id: str) -> nn.Module:
    """Find the module a model id names, e.g. ``"policy"`` or ``"env.transform[0]"``."""
    pos, obj, first = 0, None, True
    text = model_id
    while pos < len(text):
        if text[pos] == ".":
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"cannot parse model id {model_id!r}: expected names, dots and [index].")
        name, index = m.groups()
        if first:
            if name not in roots:
                raise ValueError(f"unknown model id {model_id!r}: it must start with one of {sorted(roots)}.")
            obj, first = roots[name], False
        elif name is not None:
            obj = getattr(obj, name)
        else:
            obj = obj[int(index)]
        pos = m.end()
    if not isinstance(obj, nn.Module):
        raise ValueError(f"model id {model_id!r} names a {type(obj).__name__}, not a module.")
    return obj


def check_fits(target: nn.Module, weights: TensorDictBase, model_id: str) -> None:
    """Raise a one-line error when weights do not match the target's layout."""
    have = {k: v for k, v in TensorDict.from_module(target, as_module=False).items(True, True)}
    got = {k: v for k, v in weights.exclude(EXTRA).items(True, True)}
    unexpected = sorted(str(k) for k in got if k not in have)
    mismatched = [
        f"{k}: {tuple(got[k].shape)} vs {tuple(have[k].shape)}"
        for k in got
        if k in have and got[k].shape != have[k].shape
    ]
    kinds = [
        f"{k}: {got[k].dtype} vs {have[k].dtype}"
        for k in got
        if k in have
        and got[k].dtype != have[k].dtype
        and not (got[k].is_floating_point() and have[k].is_floating_point())
    ]
    if unexpected or mismatched or kinds:
        detail = "; ".join(
            ([f"unexpected keys {unexpected[:5]}"] if unexpected else [])
            + ([f"shape mismatch {mismatched[:3]} (given vs eval)"] if mismatched else [])
            + ([f"dtype mismatch {kinds[:3]} (given vs eval)"] if kinds else [])
        )
        raise ValueError(f"weights for {model_id!r} do not fit the eval module: {detail}.")
    broken = [str(k) for k, v in got.items() if v.is_floating_point() and bool(torch.isnan(v).any())]
    if broken:
        raise ValueError(
            f"weights for {model_id!r} hold NaN ({', '.join(broken[:3])}): training diverged, or the file was damaged."
        )


def load_weights(target: nn.Module, weights: TensorDictBase, model_id: str) -> None:
    """Copy weights into ``target`` in place, then restore extra state (VecNorm stats)."""
    check_fits(target, weights, model_id)
    params = weights.exclude(EXTRA)
    if not params.is_empty():
        params.to_module(target, inplace=True)
    extra = weights.get(EXTRA, None)
    if extra is not None:
        for name in extra.keys():
            sub = target if name == "." else target.get_submodule(name)
            sub.set_extra_state({k: v.clone() for k, v in extra[name].items()})
