"""torchrl checkpoints: a ``state_dict`` of a torchrl actor, with VecNorm statistics when there are some.

What torchrl users save, read with ``weights_only=True``:

* ``torch.save(actor.state_dict(), path)``, or
* ``torch.save({"actor" | "policy": actor.state_dict(), "vecnorm" | "obs_norm": vecnorm.state_dict(),
  "step" | "frames": n}, path)``.

Two actor layouts are recognised from the keys: torchrl's PPO MuJoCo actor
(``ProbabilisticActor(TensorDictModule(Sequential(MLP(tanh), AddStateIndependentNormalScale)))``
with a TanhNormal, i.e. simeval's ``gaussian_actor``) and a deterministic
``TensorDictModule(Sequential(MLP(tanh), Tanh()))`` (simeval's ``mlp_policy``).
Hidden sizes come from the weights; the activation is tanh, as in those
layouts. Anything else is refused with the way out: ``simeval.save_checkpoint``
names the factory that builds the policy.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simeval.checkpoints.base import Checkpoint

NAME = "torchrl"
WATCH = ["*.pt"]
_GAUSSIAN = re.compile(r"^module\.0\.module\.0\.(\d+)\.(weight|bias)$")
_GAUSSIAN_SCALE = "module.0.module.1.state_independent_scale"
_DETERMINISTIC = re.compile(r"^module\.0\.(\d+)\.(weight|bias)$")
_NUMBER = re.compile(r"(\d+)")


def _is_tensor(value: Any) -> bool:
    return type(value).__name__ in ("Tensor", "Parameter")


def _parts(data: Any) -> tuple[dict | None, dict | None]:
    """(actor state_dict, VecNorm state_dict) found in ``data``, or Nones."""
    if not isinstance(data, dict):
        return None, None
    if data and all(isinstance(k, str) and _is_tensor(v) for k, v in data.items()):
        return data, None
    actor = next((data[k] for k in ("actor", "policy") if isinstance(data.get(k), dict)), None)
    norm = next((data[k] for k in ("vecnorm", "obs_norm") if isinstance(data.get(k), dict)), None)
    return actor, norm


def _layout(state: dict) -> str | None:
    keys = set(state)
    if keys and all(_GAUSSIAN.match(k) or k == _GAUSSIAN_SCALE for k in keys) and _GAUSSIAN_SCALE in keys:
        return "gaussian"
    if keys and all(_DETERMINISTIC.match(k) for k in keys):
        return "deterministic"
    return None


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """Whether ``data`` holds an actor ``state_dict`` (keys ``module.*``), alone or under "actor"/"policy"."""
    actor, _ = _parts(data)
    return actor is not None and all(isinstance(k, str) and k.startswith("module.") for k in actor)


def step_of(path: str, data: Any) -> int:
    """The saved "step", "frames" or "collected_frames", else the last number in the file name, else 0."""
    for key in ("step", "frames", "collected_frames"):
        if isinstance(data, dict) and key in data and not isinstance(data[key], dict):
            return int(data[key])
    numbers = _NUMBER.findall(os.path.splitext(os.path.basename(path))[0])
    return int(numbers[-1]) if numbers else 0


def read(path: str, raw: bytes | None, data: Any) -> Checkpoint:
    """A Checkpoint for a torchrl actor ``state_dict`` (and VecNormV2 statistics) in ``data``.

    Raises :class:`~simeval.checkpoints.CheckpointError` when there is no actor or simeval does not know its layout.
    """
    from simeval.checkpoints.base import Checkpoint, CheckpointError, unflatten

    actor, norm = _parts(data)
    if actor is None:
        raise CheckpointError(f"{path}: not a torchrl state_dict (a dict of tensors, or one under 'actor'/'policy').")
    layout = _layout(actor)
    if layout is None:
        raise CheckpointError(
            f"{path}: a torchrl state_dict whose actor layout simeval does not know ({sorted(actor)[:3]}...): "
            "save it with simeval.save_checkpoint(path, policy, step, policy_factory='module:function')."
        )
    pattern = _GAUSSIAN if layout == "gaussian" else _DETERMINISTIC
    layers = sorted((int(m.group(1)), k) for k in actor if (m := pattern.match(k)) and k.endswith("weight"))
    hidden = [int(actor[k].shape[0]) for _, k in layers[:-1]]
    factory = "gaussian_actor" if layout == "gaussian" else "mlp_policy"
    return Checkpoint(
        path=path,
        step=step_of(path, data),
        env=data.get("env") if isinstance(data.get("env"), str) else None,
        policy=unflatten({k.replace(".", "/"): v for k, v in actor.items()}),
        obs_norm=None if norm is None else unflatten(_vecnorm_weights(path, norm)),
        policy_factory=f"simeval.policies:{factory}",
        policy_kwargs={"hidden": hidden},
        meta={
            "format": NAME,
            "architecture": f"inferred from the weights (torchrl {layout} MLP actor, tanh)",
            "obs_dim": int(actor[layers[0][1]].shape[1]),
        },
    )


def _vecnorm_weights(path: str, state: dict) -> dict:
    """A VecNormV2 ``state_dict`` as simeval's weights layout (statistics under ``__extra_state__/.``)."""
    from simeval.checkpoints.base import CheckpointError

    extra = state.get("_extra_state")
    if not isinstance(extra, dict) or not any(str(k).startswith("loc") for k in extra):
        raise CheckpointError(
            f"{path}: the VecNorm entry is not a torchrl VecNormV2 state_dict (no running loc/var/count): "
            "save env.transform[i].state_dict() of the VecNormV2 transform."
        )
    out = {k: v for k, v in state.items() if k != "_extra_state"}
    out.update({f"__extra_state__/./{k}": v for k, v in extra.items()})
    return out
