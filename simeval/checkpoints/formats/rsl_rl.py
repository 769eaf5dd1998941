"""rsl_rl checkpoints (``model_<iteration>.pt`` of OnPolicyRunner, rsl-rl-lib 5.x) as simeval Checkpoints.

rsl_rl saves ``{"actor_state_dict", "critic_state_dict", "optimizer_state_dict",
"iter", "infos"}``: tensors and plain data, read with ``weights_only=True``.
The actor is rebuilt as rsl_rl's inference path runs it: optional empirical
observation normalisation, an MLP, the Gaussian's mean, and the runner's
``clip_actions``. Its architecture comes from the run's ``params/agent.yaml``
(written by Isaac Lab's train scripts) when there is one, else from the
weights' shapes with rsl_rl's default activation (ELU); ``Checkpoint.meta``
says which.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from simeval.policies import stamp

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModule
    from torchrl.envs import EnvBase

    from simeval.checkpoints.base import Checkpoint

NAME = "rsl_rl"
WATCH = ["model_*.pt"]  # OnPolicyRunner.save: <log_dir>/model_<iteration>.pt
FACTORY = "simeval.checkpoints.formats.rsl_rl:actor"
_LINEAR = re.compile(r"^mlp\.(\d+)\.weight$")


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """Whether ``data`` is an OnPolicyRunner save (an ``actor_state_dict`` and ``iter``)."""
    return isinstance(data, dict) and isinstance(data.get("actor_state_dict"), dict) and "iter" in data


def step_of(path: str, data: Any) -> int:
    """The training iteration (``iter``)."""
    return int(data["iter"])


def read(path: str, raw: bytes | None, data: Any) -> Checkpoint:
    """A Checkpoint for rsl_rl's saved dict ``data`` (read from ``path``), its architecture from the run's params."""
    from simeval.checkpoints.formats.yaml_params import run_params

    return _read(path, raw, data, run_params(path))  # Isaac Lab's params/agent.yaml, when the run has one


def read_saved(data: dict, agent: dict | None, name: str) -> Checkpoint:
    """A Checkpoint for what ``runner.save`` would write (``runner.alg.save()`` plus ``iter``), in memory.

    Args:
        data: ``{"actor_state_dict": ..., "iter": ...}`` (detached CPU tensors).
        agent: the runner's train config (``runner.cfg``: what ``params/agent.yaml`` holds), or None.
        name: what errors and ``Checkpoint.path`` call it.
    """
    if agent is not None:
        agent = {**agent, "__path__": "runner.cfg"}
    return _read(name, None, data, agent)


def _read(path: str, raw: bytes | None, data: Any, agent: dict | None) -> Checkpoint:
    """The Checkpoint of ``data``, its architecture from ``agent`` (the run's params) where given."""
    from simeval.checkpoints.base import Checkpoint, CheckpointError, unflatten

    if not recognises(path, raw, data):
        raise CheckpointError(f"{path}: not an rsl_rl checkpoint (no actor_state_dict and iter).")
    state = data["actor_state_dict"]
    linear = sorted((int(m.group(1)), k) for k in state if (m := _LINEAR.match(k)))
    if not linear:
        raise CheckpointError(f"{path}: rsl_rl checkpoint without an MLP actor (no mlp.<i>.weight): not supported.")
    if any(k.startswith(("rnn.", "cnn")) for k in state):
        raise CheckpointError(f"{path}: recurrent or CNN rsl_rl actors are not supported yet; export an MLP actor.")
    shapes = [tuple(state[k].shape) for _, k in linear]
    inferred = {"hidden_dims": [s[0] for s in shapes[:-1]], "activation": "elu", "clip_actions": None}
    kwargs, source = inferred, "inferred from the weights (activation: rsl_rl's default, elu)"
    if agent is not None:
        actor = agent.get("actor") or agent.get("policy") or {}
        kwargs = {
            "hidden_dims": list(actor.get("hidden_dims") or actor.get("actor_hidden_dims") or inferred["hidden_dims"]),
            "activation": actor.get("activation", "elu"),
            "clip_actions": agent.get("clip_actions"),
        }
        source = agent["__path__"]
        if os.path.isabs(source):
            source = os.path.relpath(source, os.path.dirname(path))
        _check_params(path, source, kwargs)
        if kwargs["hidden_dims"] != inferred["hidden_dims"]:
            raise CheckpointError(
                f"{path}: {source} says hidden_dims {kwargs['hidden_dims']}, the weights have "
                f"{inferred['hidden_dims']}: the file does not belong to this run."
            )
    has_norm = "obs_normalizer._mean" in state
    if agent is not None and _normalised(agent) and not has_norm:
        raise CheckpointError(f"{path}: the run used observation normalisation but the checkpoint has no statistics.")
    kwargs["obs_normalization"] = has_norm
    weights = {
        "module/" + k.replace(".", "/"): v
        for k, v in state.items()
        if k.startswith("mlp.") or (has_norm and k in ("obs_normalizer._mean", "obs_normalizer._std"))
    }
    return Checkpoint(
        path=path,
        step=step_of(path, data),
        env=None,  # Isaac Lab's run layout does not record the task id: --env names it
        policy=unflatten(weights),
        obs_norm=None,  # rsl_rl normalises inside the actor, rebuilt above
        policy_factory=FACTORY,
        policy_kwargs=kwargs,
        meta={"format": "rsl_rl", "architecture": source, "obs_dim": shapes[0][1], "action_dim": shapes[-1][0]},
    )


def _check_params(path: str, source: str, kwargs: dict) -> None:
    """A CheckpointError naming ``source`` where a setting read from it is not what rsl_rl takes."""
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.formats.rsl_rl_net import ACTIVATIONS

    dims, activation, clip = kwargs["hidden_dims"], kwargs["activation"], kwargs["clip_actions"]
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        raise CheckpointError(f"{path}: {source} says hidden_dims {dims!r}: expected a list of layer sizes.")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: {source} says activation {activation!r}: rsl_rl's are {', '.join(ACTIVATIONS)}."
        )
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0 < clip < math.inf):
        raise CheckpointError(f"{path}: {source} says clip_actions {clip!r}: expected null or a positive number.")


def _normalised(agent: dict) -> bool:
    actor = agent.get("actor") or agent.get("policy") or {}
    return bool(actor.get("obs_normalization") or agent.get("empirical_normalization") is True)


def actor(
    env: EnvBase,
    hidden_dims: Sequence[int] = (256, 256, 256),
    activation: str = "elu",
    obs_normalization: bool = False,
    clip_actions: float | None = None,
) -> TensorDictModule:
    """rsl_rl's MLP actor in inference mode: ``observation -> [normalise] -> MLP -> mean [-> clip]``."""
    from tensordict.nn import TensorDictModule

    from simeval.checkpoints.formats.rsl_rl_net import RslRlActor

    obs_dim = env.observation_spec["observation"].shape[-1]
    spec = env.full_action_spec_unbatched["action"] if hasattr(env, "full_action_spec_unbatched") else env.action_spec
    net = RslRlActor(obs_dim, spec.shape[-1], list(hidden_dims), activation, obs_normalization, clip_actions)
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    kwargs = {
        "hidden_dims": list(hidden_dims),
        "activation": activation,
        "obs_normalization": obs_normalization,
        "clip_actions": clip_actions,
    }
    return stamp(module, FACTORY, kwargs)
