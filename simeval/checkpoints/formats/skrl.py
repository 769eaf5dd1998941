"""skrl agent checkpoints (``<run>/checkpoints/agent_<timestep>.pt``, skrl 1.x and 2.x) as simeval Checkpoints.

skrl's ``Agent.write_checkpoint`` (and ``Agent.save``) ``torch.save`` a dict of
the agent's module state_dicts: ``policy``, ``value``, ``optimizer`` and the
preprocessors in use (RunningStandardScaler), tensors and plain data read with
``weights_only=True``. The actor is rebuilt as skrl acts in eval mode, with
``outputs["mean_actions"]`` (what skrl's trainers and Isaac Lab's play script
step with): the observation preprocessor, the Gaussian policy's MLP, the model
instantiator's ``output`` expression and ``clip_mean_actions``.

The observation preprocessor is ``observation_preprocessor`` in skrl 2.x; in
skrl 1.x, where the observations were called states, ``state_preprocessor``.
The architecture comes from the run's ``params/agent.yaml`` (Isaac Lab's skrl
train script writes skrl's runner config there; ``models.policy`` is in the
model instantiator's format) when there is one, else from the weights' shapes,
with ELU activations (the weights do not record them; Isaac Lab's skrl configs
use ELU) and a plain ``ACTIONS`` output; ``Checkpoint.meta`` says which.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from simeval.policies import stamp

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModule
    from torchrl.envs import EnvBase

    from simeval.checkpoints.base import Checkpoint, CheckpointError

    Fail = Callable[[str], CheckpointError]  # the error to raise for a problem, naming the file

NAME = "skrl"
# write_checkpoint: <experiment>/checkpoints/agent_<timestep>.pt; best_agent.pt is no step and is not watched.
WATCH = ["checkpoints/agent_*.pt", "agent_*.pt"]
FACTORY = "simeval.checkpoints.formats.skrl:actor"
DEFAULT_ACTIVATION = "elu"
SCALER_DEFAULTS = {"epsilon": 1e-8, "clip_threshold": 5.0}  # RunningStandardScaler's defaults (1.x and 2.x)
_STEP = re.compile(r"^agent_(\d+)\.pt$")
_CONTAINER = re.compile(r"^(\w+)_container\.(\d+)\.(weight|bias)$")  # the model instantiator's Sequential
_SEQUENTIAL = re.compile(r"^(\w+)\.(\d+)\.(weight|bias)$")  # a hand-written model's nn.Sequential
_HEAD = re.compile(r"^(\w+)_layer\.(weight|bias)$")  # a shared model's per-role output layers
_INPUTS = ("OBSERVATIONS", "STATES")  # 1.x: both are the observations; 2.x: STATES are the env's states
_DEPRECATED = ("input_shape", "hiddens", "hidden_activation", "output_shape", "output_activation", "output_scale")


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """A dict of module state_dicts (every value a dict) whose ``policy`` holds tensors.

    Not simeval's format (``format``, ``/`` keys), rsl_rl's (``actor_state_dict``)
    nor a torchrl actor's state_dict under ``policy`` (every key ``module.``...).
    """
    if not isinstance(data, dict) or "format" in data or "actor_state_dict" in data:
        return False
    policy = data.get("policy")
    return (
        isinstance(policy, dict)
        and bool(policy)
        and all(isinstance(k, str) and "/" not in k and hasattr(v, "shape") for k, v in policy.items())
        and not all(k.startswith("module.") for k in policy)
        and all(isinstance(v, dict) for v in data.values())
    )


def step_of(path: str, data: Any) -> int:
    """The timestep in ``agent_<timestep>.pt``; 0 for a name without one (``best_agent.pt``, ``Agent.save``)."""
    found = _STEP.match(os.path.basename(path))
    return int(found.group(1)) if found else 0


def read(path: str, raw: bytes | None, data: Any) -> Checkpoint:
    """A Checkpoint for skrl's saved agent ``data`` (read from ``path``), its architecture from the run's params."""
    return _read(path, raw, data, _agent_yaml(path), step_of(path, data))


def read_saved(data: dict, agent_cfg: dict | None, name: str, step: int) -> Checkpoint:
    """A Checkpoint for what ``agent.write_checkpoint`` would write (module state_dicts by name), in memory.

    Args:
        data: ``{"policy": state_dict, "observation_preprocessor": ..., ...}`` (CPU copies).
        agent_cfg: skrl's runner config (what Isaac Lab writes to ``params/agent.yaml``,
            with ``models``), or None to infer the architecture from the weights.
        name: what errors and ``Checkpoint.path`` call it.
        step: the timestep it is recorded as.
    """
    run = (
        {**agent_cfg, "__path__": "the agent config"}
        if agent_cfg and isinstance(agent_cfg.get("models"), dict)
        else None
    )
    return _read(name, None, data, run, step)


def _read(path: str, raw: bytes | None, data: Any, run: dict | None, step: int) -> Checkpoint:
    """The Checkpoint of ``data``, its architecture from ``run`` (the run's skrl config) where given."""
    from simeval.checkpoints.base import Checkpoint, CheckpointError, unflatten
    from simeval.checkpoints.formats.skrl_net import layer_indices

    def fail(problem: str) -> CheckpointError:
        return CheckpointError(f"{path}: {problem}")

    state = _gaussian_policy(path, raw, data, fail)
    spec = _policy_spec(run, fail) if run is not None else None
    linears, shared = _linears(state, spec is not None, fail)
    obs_dim, act_dim, hidden = _mlp_dims(state, linears, fail)
    present = _activations_present(linears, shared)
    activations, output, clip_mean, source = _architecture(path, run, spec, hidden, present, fail)
    _check_output(output, fail)
    scaler_key, obs_norm, norm_note = _normaliser(data, run, spec, obs_dim, fail)
    weights = _actor_weights(data, state, linears, layer_indices(activations), scaler_key)
    kwargs = {
        "hidden_dims": hidden,
        "activations": activations,
        "biases": [b is not None for _, b in linears],
        "output": output,
        "obs_norm": obs_norm,
        "clip_mean_actions": clip_mean,
    }
    return Checkpoint(
        path=path,
        step=step,
        env=None,  # skrl's checkpoints and Isaac Lab's run layout do not record the task id: --env names it
        policy=unflatten(weights),
        obs_norm=None,  # skrl's preprocessor is folded into the actor
        policy_factory=FACTORY,
        policy_kwargs=kwargs,
        meta={
            "format": NAME,
            "architecture": source,
            "obs_normaliser": norm_note,
            "obs_dim": obs_dim,
            "action_dim": act_dim,
        },
    )


def _gaussian_policy(path: str, raw: bytes | None, data: Any, fail: Fail) -> dict:
    """The policy's state_dict, checked to be an skrl Gaussian policy's (a state-independent ``log_std_parameter``)."""
    if not recognises(path, raw, data):
        raise fail("not an skrl checkpoint (no policy state_dict among the agent's modules).")
    state = data["policy"]
    if "log_std_parameter" not in state:
        raise fail(
            "the skrl policy has no log_std_parameter: only Gaussian policies (PPO, A2C, ...) with a "
            "state-independent log std are supported."
        )
    return state


def _mlp_dims(state: dict, linears: list[tuple[str, str | None]], fail: Fail) -> tuple[int, int, list[int]]:
    """(observation size, action size, hidden sizes), checked: the layers chain into an MLP the log std fits."""
    shapes = [tuple(state[w].shape) for w, _ in linears]
    if any(len(s) != 2 for s in shapes) or any(a[0] != b[1] for a, b in pairwise(shapes)):
        raise fail(f"the skrl policy's layers {shapes} do not chain into an MLP: not supported.")
    obs_dim, act_dim = shapes[0][1], shapes[-1][0]
    if tuple(state["log_std_parameter"].shape) != (act_dim,):
        raise fail(f"log_std_parameter has shape {tuple(state['log_std_parameter'].shape)}, the MLP {act_dim} outputs.")
    return obs_dim, act_dim, [s[0] for s in shapes[:-1]]


def _architecture(
    path: str, run: dict | None, spec: dict | None, hidden: list[int], present: list[bool | None], fail: Fail
) -> tuple[list[str | None], str, bool, str]:
    """(activations, output, clip_mean_actions, where they come from): the run's config, else the weights."""
    if spec is None:
        # a shared body's last activation: there when the others are (or there are no others)
        last = any(present[:-1]) or len(present) == 1
        activations = [DEFAULT_ACTIVATION if (last if p is None else p) else None for p in present]
        source = (
            f"inferred from the weights (activation: {DEFAULT_ACTIVATION}, skrl's task configs' default; "
            "output: ACTIONS)"
        )
        return activations, "ACTIONS", False, source
    activations, output, clip_mean = _from_spec(spec, hidden, present, fail)
    source = run["__path__"]
    if os.path.isabs(source):
        source = os.path.relpath(source, os.path.dirname(os.path.abspath(path)))
    return activations, output, clip_mean, source


def _actor_weights(
    data: dict, state: dict, linears: list[tuple[str, str | None]], indices: list[int], scaler_key: str | None
) -> dict:
    """The skrl weights under the actor's names: each Linear at its MLP index, then the scaler's statistics."""
    weights = {}
    for (w, b), idx in zip(linears, indices, strict=True):
        weights[f"module/mlp/{idx}/weight"] = state[w]
        if b is not None:
            weights[f"module/mlp/{idx}/bias"] = state[b]
    if scaler_key is not None:
        for buffer in ("running_mean", "running_variance"):
            weights[f"module/obs_scaler/{buffer}"] = data[scaler_key][buffer]
    return weights


def _linears(state: dict, hand_written_ok: bool, fail: Fail) -> tuple[list[tuple[str, str | None]], bool]:
    """The policy's Linear layers in order as (weight key, bias key or None), and whether a head follows a shared body.

    The model instantiator names its Sequential ``<name>_container`` and, in a
    shared (policy + value) model, each role's output ``<role>_layer``.
    """
    rest = [k for k in state if k != "log_std_parameter"]
    containers = {m.group(1) for k in rest if (m := _CONTAINER.match(k))}
    if len(containers) > 1:
        raise fail(
            f"the skrl policy has several networks ({', '.join(sorted(containers))}): only one MLP is supported."
        )
    if containers:
        (name,) = containers
        body = [k for k in rest if _CONTAINER.match(k)]
        heads = {m.group(1) for k in rest if (m := _HEAD.match(k))}
        head = "policy" if "policy" in heads else "output" if "output" in heads else None
        other = sorted(set(rest) - set(body) - {f"{h}_layer.{p}" for h in heads for p in ("weight", "bias")})
        if other or (heads and head is None):
            what = ", ".join(other[:3]) or ", ".join(f"{h}_layer" for h in sorted(heads))
            raise fail(f"the skrl policy has parameters other than an MLP ({what}): not supported.")
        prefix, pattern = f"{name}_container", _CONTAINER
    else:
        prefixes = {m.group(1) for k in rest if (m := _SEQUENTIAL.match(k))}
        if len(prefixes) != 1 or not all(_SEQUENTIAL.match(k) for k in rest):
            raise fail("the skrl policy is not an MLP (one nn.Sequential of Linear layers): not supported.")
        if not hand_written_ok:
            raise fail(
                "a hand-written skrl model: its forward pass is code the checkpoint does not hold. Describe it in the "
                "run's params/agent.yaml (models.policy: network, output; skrl's model instantiator format)."
            )
        (prefix,) = prefixes
        head, pattern = None, _SEQUENTIAL
    indices = sorted({int(pattern.match(k).group(2)) for k in rest if pattern.match(k)})
    layers = [
        (f"{prefix}.{i}.weight", f"{prefix}.{i}.bias" if f"{prefix}.{i}.bias" in state else None) for i in indices
    ]
    if (
        indices[0] != 0
        or any(b - a not in (1, 2) for a, b in pairwise(indices))
        or not all(w in state for w, _ in layers)
    ):
        raise fail(f"the skrl policy's layers {prefix}.{indices} are not Linear layers with activations between.")
    if head is not None:
        layers.append((f"{head}_layer.weight", f"{head}_layer.bias" if f"{head}_layer.bias" in state else None))
    return layers, head is not None


def _activations_present(linears: list, shared: bool) -> list[bool | None]:
    """Whether each hidden layer is followed by an activation, from the gaps between Linear indices.

    A shared model's body ends in its last activation, which holds no weights:
    None there (unknown from the weights).
    """
    indices = [int(w.split(".")[-2]) for w, _ in (linears[:-1] if shared else linears)]
    present: list[bool | None] = [b - a == 2 for a, b in pairwise(indices)]
    return [*present, None] if shared else present


def _policy_spec(run: dict, fail: Fail) -> dict | None:
    """``models.policy`` of the run's config in the instantiator's format (the deprecated format converted)."""
    models = run.get("models")
    policy = models.get("policy") if isinstance(models, dict) else None
    if not isinstance(policy, dict):
        return None
    source = run["__path__"]
    kind = str(policy.get("class", "GaussianMixin")).lower()
    if "gaussian" not in kind:
        raise fail(f"{source} says the policy is a {policy.get('class')}: only Gaussian policies are supported.")
    if "network" not in policy and any(k in policy for k in _DEPRECATED):
        policy = {**policy, **_convert_deprecated(policy)}
    network = policy.get("network")
    if not isinstance(network, list) or len(network) != 1 or not isinstance(network[0], dict):
        raise fail(f"{source}: models.policy.network must be one MLP; several networks are not supported.")
    return {**policy, "network": network[0]}


def _convert_deprecated(policy: dict) -> dict:
    """skrl 1.x's ``convert_deprecated_parameters``: hiddens/hidden_activation/output_* -> network/output."""
    activations = policy.get("hidden_activation", [])
    scale = policy.get("output_scale", 1.0)
    output = str(policy.get("output_shape", "ACTIONS"))
    if policy.get("output_activation"):
        output = f"{policy['output_activation']}({output})"
    network = {
        "name": "net",
        "input": str(policy.get("input_shape", "STATES")),
        "layers": policy.get("hiddens", []),
        "activations": activations,
    }
    return {"network": [network], "output": f"{scale} * {output}" if scale != 1.0 else output}


def _from_spec(
    spec: dict, hidden: list[int], present: list[bool | None], fail: Fail
) -> tuple[list[str | None], str, bool]:
    """(activation per hidden layer, output expression, clip_mean_actions) from the config, checked with the weights."""
    from simeval.checkpoints.formats.skrl_net import ACTIVATIONS

    net = spec["network"]
    where = "the run's params/agent.yaml"
    if str(net.get("input", "")).replace("Shape.", "").strip() not in _INPUTS:
        raise fail(f"{where}: policy input {net.get('input')!r} is not supported (only OBSERVATIONS or STATES).")
    layers = net.get("layers") or []
    sizes = []
    for layer in layers:
        if isinstance(layer, dict) and len(layer) == 1 and str(next(iter(layer))).lower() == "linear":
            layer = next(iter(layer.values()))
            layer = layer.get("out_features", layer.get("features")) if isinstance(layer, dict) else layer
            layer = layer[0] if isinstance(layer, list) else layer
        if not isinstance(layer, (int, float)) or isinstance(layer, bool):
            raise fail(f"{where}: policy layer {layer!r} is not supported (only linear layers).")
        sizes.append(int(layer))
    if sizes != hidden:
        raise fail(
            f"{where} says hidden layers {sizes}, the weights have {hidden}: the file does not belong to this run."
        )
    activations = _expand(net.get("activations", []), len(sizes), where, fail)
    activations = [a.lower() if isinstance(a, str) and a.lower() in ACTIVATIONS else None for a in activations]
    if any(p is not None and p != (a is not None) for a, p in zip(activations, present, strict=True)):
        raise fail(
            f"{where} says activations {activations}, the weights' layout differs: the file is not from this run."
        )
    output = spec.get("output", "ACTIONS")
    if not isinstance(output, str):
        raise fail(f"{where}: policy output {output!r} is not supported (one expression of ACTIONS).")
    return activations, output, bool(spec.get("clip_mean_actions", False))


def _expand(activations: Any, n: int, where: str, fail: Fail) -> list:
    """The instantiator's expansion: one name for every layer, or one per layer."""
    if isinstance(activations, str) or activations is None:
        return [activations] * n
    if isinstance(activations, list) and len(activations) in (0, 1, n):
        return activations * n if len(activations) == 1 else activations or [None] * n
    raise fail(f"{where}: {len(activations)} activations for {n} layers.")


def _check_output(output: str, fail: Fail) -> None:
    from simeval.checkpoints.formats.skrl_net import parse_output

    try:
        parse_output(output)
    except ValueError as exc:
        raise fail(f"the skrl policy's {exc}") from None


def _normaliser(
    data: dict, run: dict | None, spec: dict | None, obs_dim: int, fail: Fail
) -> tuple[str | None, dict | None, str]:
    """The checkpoint key of the observation preprocessor (or None), its kwargs, and a note for meta.

    skrl saves a preprocessor exactly when the agent used one. 2.x calls the
    observations' ``observation_preprocessor`` and keeps ``state_preprocessor``
    for the env's states (an asymmetric critic's input); 1.x called the
    observations states. A ``state_preprocessor`` of the observations' size is
    the observations' one unless the run's config is written for 2.x (it names
    ``observation_preprocessor``).
    """
    agent = (run or {}).get("agent") if isinstance((run or {}).get("agent"), dict) else {}
    config_key = next((k for k in ("observation_preprocessor", "state_preprocessor") if k in agent), None)
    configured = agent.get(config_key) if config_key else None
    config_2x = config_key == "observation_preprocessor"
    if config_2x and spec is not None and "STATES" in str(spec["network"].get("input")):
        raise fail("the skrl policy reads the env's states (skrl 2.x), not its observations: not supported.")
    key = None
    if "observation_preprocessor" in data:
        key = "observation_preprocessor"
    elif "state_preprocessor" in data and not config_2x and _size(data["state_preprocessor"]) == obs_dim:
        key = "state_preprocessor"
    if key is None:
        if configured:
            raise fail(
                f"the run used observation normalisation ({config_key}: {configured}) but the checkpoint has no "
                "preprocessor statistics: it does not belong to this run or was saved without them."
            )
        return None, None, "none"
    scaler = data[key]
    if "running_mean" not in scaler or "running_variance" not in scaler:
        raise fail(f"{key} is not a RunningStandardScaler (no running_mean/running_variance): not supported.")
    if _size(scaler) != obs_dim:
        raise fail(f"{key} has {_size(scaler)} entries, the policy takes {obs_dim} observations.")
    if configured and "runningstandardscaler" not in str(configured).lower():
        raise fail(f"the run's {config_key} is {configured}: only RunningStandardScaler is supported.")
    kwargs = dict(SCALER_DEFAULTS)
    extra = agent.get(f"{config_key}_kwargs") if configured else None
    for name in SCALER_DEFAULTS:
        if isinstance(extra, dict) and extra.get(name) is not None:
            kwargs[name] = float(extra[name])
    return key, kwargs, f"{key} (RunningStandardScaler, epsilon {kwargs['epsilon']}, clip {kwargs['clip_threshold']})"


def _size(scaler: Any) -> int | None:
    mean = scaler.get("running_mean") if isinstance(scaler, dict) else None
    return int(mean.shape[0]) if mean is not None and len(mean.shape) == 1 else None


def _agent_yaml(path: str) -> dict | None:
    """The run's skrl config: ``<run>/params/agent.yaml`` (Isaac Lab), the checkpoints in ``<run>/checkpoints``."""
    from simeval.checkpoints.formats.yaml_params import run_params

    out = run_params(path, "checkpoints")
    return out if out is not None and isinstance(out.get("models"), dict) else None  # else another library's


def actor(
    env: EnvBase,
    hidden_dims: Sequence[int] = (64, 64),
    activations: Sequence[str | None] | None = None,
    biases: Sequence[bool] | None = None,
    output: str = "ACTIONS",
    obs_norm: dict | None = None,
    clip_mean_actions: bool = False,
) -> TensorDictModule:
    """skrl's Gaussian policy in eval mode: ``observation -> [standardise] -> MLP -> output -> mean_actions``."""
    import torch
    from tensordict.nn import TensorDictModule

    from simeval.checkpoints.formats.skrl_net import SkrlGaussianActor

    obs_dim = env.observation_spec["observation"].shape[-1]
    spec = env.full_action_spec_unbatched["action"] if hasattr(env, "full_action_spec_unbatched") else env.action_spec
    activations = list(activations) if activations is not None else [DEFAULT_ACTIVATION] * len(hidden_dims)
    biases = list(biases) if biases is not None else [True] * (len(hidden_dims) + 1)
    bounds = None
    if clip_mean_actions:  # skrl clips to the action space's bounds, and not at all when any is infinite
        low, high = spec.space.low.float(), spec.space.high.float()
        if bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
            bounds = (low, high)
    net = SkrlGaussianActor(
        obs_dim, spec.shape[-1], list(hidden_dims), activations, biases, output, obs_norm, clip_bounds=bounds
    )
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    kwargs = {
        "hidden_dims": list(hidden_dims),
        "activations": activations,
        "biases": biases,
        "output": output,
        "obs_norm": obs_norm,
        "clip_mean_actions": clip_mean_actions,
    }
    return stamp(module, FACTORY, kwargs)
