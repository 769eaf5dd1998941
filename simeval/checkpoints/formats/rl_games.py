"""rl_games PPO checkpoints (continuous A2C, rl-games 1.6.x) as simeval Checkpoints.

rl_games saves ``{"model": state_dict, "epoch", "frame", "optimizer",
"last_mean_rewards", "env_state"}`` to ``<train_dir>/<run>/nn/``: the best
``<name>.pth`` (rewritten whenever the mean reward improves), periodic
``last_<name>_ep_<epoch>_rew_<reward>.pth`` (``save_frequency``), and at
``max_epochs`` ``last_<name>_ep_<epoch>_rew__<reward>_.pth``. With
``torch_compile`` (rl_games' default) the model keys carry ``_orig_mod.``.
``last_mean_rewards`` is a numpy float32 once a best checkpoint was saved, which
a plain ``weights_only`` load refuses: such files are loaded again here, still
``weights_only``, allowing numpy scalars of plain numbers and nothing else
(:func:`torch_safe_globals`).

The actor is rebuilt as ``PpoPlayerContinuous.get_action(obs, is_deterministic=True)``
computes it (see :mod:`~simeval.checkpoints.formats.rl_games_net`). Its architecture
comes from the run's ``params/agent.yaml`` (Isaac Lab writes it beside ``nn/``,
with the wrapper's ``clip_observations``/``clip_actions``) when there is one,
else from the weights, with ``elu`` (the activation of rl_games' continuous
configs and Isaac Lab's), ``mu_activation: None`` and the player's default
``clip_actions: True`` assumed; ``Checkpoint.meta["architecture"]`` says which.
"""

from __future__ import annotations

import math
import os
import pickle
import re
import threading
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from simeval.policies import stamp

if TYPE_CHECKING:
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.data import TensorSpec
    from torchrl.envs import EnvBase

    from simeval.checkpoints.base import Checkpoint

NAME = "rl_games"
# Periodic saves only: the max_epochs save ("_rew__<r>_") repeats the last periodic epoch when max_epochs is a
# multiple of save_frequency, and the best <name>.pth is rewritten in place with other epochs.
WATCH = ["nn/last_*_ep_*_rew_[!_]*.pth", "last_*_ep_*_rew_[!_]*.pth"]
FACTORY = "simeval.checkpoints.formats.rl_games:actor"
COMPILED = "_orig_mod."  # torch.compile's OptimizedModule prefix; rl_games' own loader strips it too
_EPOCH = re.compile(r"_ep_(\d+)_")
_MLP = re.compile(r"^a2c_network\.actor_mlp\.(\d+)\.weight$")
_UNSUPPORTED = {
    "a2c_network.logits": "discrete-action",
    "a2c_network.rnn.": "recurrent",
    "a2c_network.a_rnn.": "recurrent",
    "a2c_network.actor_cnn.": "CNN",
    "running_mean_std.running_mean_std.": "dict-observation",
}


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """Whether the file is an rl_games save: a ``model`` dict with ``a2c_network.*`` weights."""
    data = _data(path, raw, data)
    model = data.get("model") if isinstance(data, dict) else None
    return isinstance(model, dict) and any(str(k).removeprefix(COMPILED).startswith("a2c_network.") for k in model)


def step_of(path: str, data: Any) -> int:
    """The epoch: the saved ``epoch``; for a file the registry could not load, the ``_ep_<N>_`` of its name."""
    found = _EPOCH.search(os.path.basename(path))
    if data is None and found is not None:
        return int(found.group(1))  # the watcher's peek at a file holding a numpy scalar: no second load
    data = _data(path, None, data)
    epoch = data.get("epoch") if isinstance(data, dict) else None
    if isinstance(epoch, int) and not isinstance(epoch, bool):
        return epoch
    if found is None:
        raise ValueError("no epoch in the file or its name")
    return int(found.group(1))


def read(path: str, raw: bytes | None, data: Any) -> Checkpoint:
    """A Checkpoint for rl_games' saved dict ``data`` (read from ``path``)."""
    global _last
    from simeval.checkpoints.base import Checkpoint, CheckpointError, unflatten
    from simeval.checkpoints.formats.yaml_params import run_params

    data = _data(path, raw, data)
    if not recognises(path, raw, data):
        raise CheckpointError(f"{path}: not an rl_games checkpoint (no model with a2c_network.* weights).")
    state = {str(k).removeprefix(COMPILED): v for k, v in data["model"].items()}
    _last = None  # read is the last of detection, step and read: let go of the file's bytes
    layout = _from_weights(path, state)
    has_norm = "running_mean_std.running_mean" in state
    agent = run_params(path, "nn")  # Isaac Lab's params/agent.yaml, when the run has one
    if agent is None:
        kwargs = {
            "units": layout["units"],
            "activation": "elu",
            "mu_activation": "None",
            "normalize_input": has_norm,
            "clip_actions": True,
            "action_bound": None,
            "clip_observations": None,
        }
        source = "inferred from the weights (elu activation, mu_activation None, clip_actions True assumed)"
    else:
        kwargs = _from_agent_yaml(path, agent, layout["units"], has_norm)
        source = os.path.relpath(agent["__path__"], os.path.dirname(os.path.abspath(path)))
    prefixes = ("a2c_network.actor_mlp.", "a2c_network.mu.")
    stats = ("running_mean_std.running_mean", "running_mean_std.running_var") if has_norm else ()
    weights = {"module/" + k.replace(".", "/"): v for k, v in state.items() if k.startswith(prefixes) or k in stats}
    return Checkpoint(
        path=path,
        step=step_of(path, data),
        env=None,  # neither rl_games nor Isaac Lab's run layout records a gymnasium id: --env names it
        policy=unflatten(weights),
        obs_norm=None,  # rl_games normalises inside the model, rebuilt in the actor
        policy_factory=FACTORY,
        policy_kwargs=kwargs,
        meta={"format": NAME, "architecture": source, "obs_dim": layout["obs_dim"], "action_dim": layout["action_dim"]},
    )


def _from_weights(path: str, state: dict) -> dict:
    """units, obs_dim and action_dim from the state's shapes; a CheckpointError for a layout not supported."""
    from simeval.checkpoints.base import CheckpointError

    for prefix, what in _UNSUPPORTED.items():
        if any(k.startswith(prefix) for k in state):
            raise CheckpointError(f"{path}: {what} rl_games policies are not supported (only MLP continuous A2C).")
    if "a2c_network.mu.weight" not in state:
        raise CheckpointError(f"{path}: rl_games model without a continuous action head (a2c_network.mu).")
    mlp = [k for k in state if k.startswith("a2c_network.actor_mlp.")]
    linear = sorted((int(m.group(1)), k) for k in mlp if (m := _MLP.match(k)) and state[k].ndim == 2)
    if len(linear) * 2 != len(mlp) or [i for i, _ in linear] != list(range(0, 2 * len(linear), 2)):
        raise CheckpointError(
            f"{path}: rl_games actor_mlp other than Linear/activation layers (d2rl) is not supported (plain MLP only)."
        )
    mu = state["a2c_network.mu.weight"]
    shapes = [tuple(state[k].shape) for _, k in linear] + [tuple(mu.shape)]
    if any(a[0] != b[1] for a, b in zip(shapes[:-1], shapes[1:], strict=True)):
        raise CheckpointError(f"{path}: rl_games actor layers do not chain ({shapes}): a corrupt checkpoint.")
    return {"units": [s[0] for s in shapes[:-1]], "obs_dim": shapes[0][1], "action_dim": shapes[-1][0]}


def _from_agent_yaml(path: str, agent: dict, weights_units: list[int], has_norm: bool) -> dict:
    """kwargs from the rl_games ``params:`` config; a CheckpointError when it and the weights disagree."""
    from simeval.checkpoints.base import CheckpointError

    source = agent["__path__"]
    params = agent.get("params", agent)
    network, config, wrapper = params.get("network") or {}, params.get("config") or {}, params.get("env") or {}
    space = network.get("space") or {}
    if "continuous" not in space:
        raise CheckpointError(f"{path}: {source} is not a continuous-action rl_games run (network.space).")
    for key, what in (("rnn", "recurrent"), ("cnn", "CNN")):
        if key in network:
            raise CheckpointError(f"{path}: {source}: {what} rl_games policies are not supported.")
    mlp = network.get("mlp") or {}
    if mlp.get("d2rl"):  # network.normalization is not: rl_games 1.6 applies it to CNNs only
        raise CheckpointError(f"{path}: {source}: rl_games d2rl MLPs are not supported (plain MLP only).")
    units = list(mlp.get("units", weights_units))
    if units != weights_units:
        raise CheckpointError(
            f"{path}: {source} says units {units}, the weights have {weights_units}: "
            "the file does not belong to this run."
        )
    normalize_input = bool(config.get("normalize_input", False))
    if normalize_input != has_norm:
        said = "used" if normalize_input else "did not use"
        raise CheckpointError(
            f"{path}: {source} says the run {said} normalize_input, but the checkpoint "
            f"{'lacks' if normalize_input else 'has'} running_mean_std statistics: it does not belong to this run."
        )
    mu_activation = (space["continuous"] or {}).get("mu_activation")
    return {
        "units": units,
        "activation": str(mlp.get("activation", "elu")),
        "mu_activation": "None" if mu_activation is None else str(mu_activation),
        "normalize_input": normalize_input,
        "clip_actions": bool(config.get("clip_actions", True)),  # BasePlayer: config.get('clip_actions', True)
        "action_bound": _finite(wrapper.get("clip_actions")),  # Isaac Lab: action_space = Box(-clip, clip)
        "clip_observations": _finite(wrapper.get("clip_observations")),
    }


def _finite(value: Any) -> float | None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if number and math.isfinite(value) else None


def actor(
    env: EnvBase,
    units: Sequence[int] = (256, 128, 64),
    activation: str = "elu",
    mu_activation: str = "None",
    normalize_input: bool = False,
    clip_actions: bool = True,
    action_bound: float | None = None,
    clip_observations: float | None = None,
) -> TensorDictModule:
    """rl_games' deterministic continuous actor for ``env``; actions rescaled to ``+-action_bound`` or the env's bounds.

    An env without finite action bounds (Isaac Lab's specs) gets [-1, 1], the
    range of Isaac Lab's usual ``clip_actions: 1.0``.
    """
    import torch
    from tensordict.nn import TensorDictModule

    from simeval.checkpoints.formats.rl_games_net import RlGamesActor

    obs_dim = env.observation_spec["observation"].shape[-1]
    spec = env.full_action_spec_unbatched["action"] if hasattr(env, "full_action_spec_unbatched") else env.action_spec
    act_dim = spec.shape[-1]
    if action_bound is not None:
        low, high = torch.full((act_dim,), -float(action_bound)), torch.full((act_dim,), float(action_bound))
    else:
        low, high = _env_bounds(spec, act_dim)
    net = RlGamesActor(
        obs_dim, act_dim, list(units), activation, mu_activation, normalize_input, clip_actions, low, high,
        clip_observations,
    )  # fmt: skip
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    kwargs = {
        "units": list(units),
        "activation": activation,
        "mu_activation": mu_activation,
        "normalize_input": normalize_input,
        "clip_actions": clip_actions,
        "action_bound": action_bound,
        "clip_observations": clip_observations,
    }
    return stamp(module, FACTORY, kwargs)


def _env_bounds(spec: TensorSpec, act_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    space = getattr(spec, "space", None)
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is None or high is None:
        return -torch.ones(act_dim), torch.ones(act_dim)
    low, high = low.reshape(-1, act_dim)[0].float(), high.reshape(-1, act_dim)[0].float()
    # Unbounded specs come as +-inf or as float32's extremes (gymnasium's Box(-inf, inf) through torchrl).
    if not (low > -1e30).all() or not (high < 1e30).all():
        return -torch.ones(act_dim), torch.ones(act_dim)
    return low, high


# -- numpy scalars in weights_only loads ---------------------------------------------------------------------------
_NUMERIC = {"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"}
_LOCK = threading.Lock()
_last: tuple[Any, Any] | None = None  # (the bytes object or (path, size, mtime), what _safe_load made of it)


def _data(path: str, raw: bytes | None, data: Any) -> Any:
    """``data``; or, when the registry's weights_only load refused the file, the file loaded again allowing
    rl_games' numpy float32 ``last_mean_rewards`` (and nothing else) besides tensors; None if that fails too.

    Cached for the last file: detection, the step and the read each ask.
    """
    global _last
    if data is not None:
        return data
    key: Any = raw
    if raw is None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (path, st.st_size, st.st_mtime_ns)
    if _last is not None and (_last[0] is raw if raw is not None else _last[0] == key):
        return _last[1]
    loaded = _safe_load(path, raw)
    _last = (key, loaded)
    return loaded


def _safe_load(path: str, raw: bytes | None) -> Any:
    """The torch zip ``raw`` (or the file at ``path``, memory-mapped) loaded allowing rl_games' numpy scalars;
    None when it is no torch zip or holds anything else."""
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.bounds import open_data

    try:
        if raw is not None:
            return _safe_load_from(raw, path) if raw.startswith(b"PK") else None  # not a torch zip (ONNX, YAML, ...)
        with open_data(path) as f:
            return _safe_load_from(f, path) if f.read(2) == b"PK" else None
    except CheckpointError:
        raise  # over a bound: refused, whoever reads it
    except Exception:  # noqa: BLE001 - refused (code, other globals) or not a torch file: not ours to read
        return None


def _safe_load_from(source: bytes | IO[bytes], path: str) -> Any:
    import torch

    from simeval.checkpoints.bounds import DEFAULT_MAX_BYTES, torch_load

    with _LOCK, torch.serialization.safe_globals(torch_safe_globals()):  # the allowlist is process-global
        return torch_load(source, path, DEFAULT_MAX_BYTES, mmap=not isinstance(source, bytes))


def _dtype(spec: Any, align: Any = False, copy: Any = False):
    """``numpy.dtype`` for plain numbers only; always a copy, so the BUILD that follows never touches numpy's own."""
    import numpy as np

    if not isinstance(spec, str) or spec.lstrip("<>=|") not in _NUMERIC:
        raise pickle.UnpicklingError(f"numpy dtype {spec!r} is not a plain number type")
    return np.dtype(spec, False, True)


def _scalar(dtype: Any, data: Any):
    """``numpy._core.multiarray.scalar`` for plain numbers only: a bool, int or float from its bytes."""
    import numpy as np

    plain = isinstance(dtype, np.dtype) and dtype.kind in "biuf" and dtype.fields is None and dtype.subdtype is None
    if not plain or not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise pickle.UnpicklingError("numpy scalar that is not a plain number")
    return np.frombuffer(data, dtype=np.dtype(dtype.str))[0]


def torch_safe_globals() -> list:
    """What a ``weights_only`` torch.load needs for rl_games' ``last_mean_rewards`` (a numpy float32), validated.

    For ``torch.serialization.safe_globals(...)``: numpy scalars and dtypes of
    plain numbers are rebuilt from their bytes; anything else (object or
    structured dtypes, arrays, any other global) is still refused.
    """
    import numpy as np

    types = {type(np.dtype(code)) for code in _NUMERIC}  # the unpickler's BUILD sets state only on allowed types
    return [
        (_scalar, "numpy._core.multiarray.scalar"),
        (_scalar, "numpy.core.multiarray.scalar"),  # files written with numpy < 2
        (_dtype, "numpy.dtype"),
        *sorted(types, key=lambda t: t.__name__),
    ]
