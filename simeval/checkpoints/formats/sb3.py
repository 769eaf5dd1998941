"""Stable-Baselines3 checkpoints (``model.save`` zips of PPO/A2C, SAC, TD3/DDPG with MlpPolicy) as Checkpoints.

SB3's zip holds ``data`` (JSON: plain fields, plus cloudpickle blobs under ``":serialized:"``,
which simeval never decodes), ``policy.pth`` (the policy's state_dict, read with
``weights_only=True``) and optimiser state. The deterministic actor is rebuilt as
``model.predict(obs, deterministic=True)`` runs it (see ``sb3_net``): layer sizes from
the weights; activation from the readable part of ``policy_kwargs`` (``activation_fn``),
else the algorithm's default (PPO/A2C Tanh, SAC/TD3 ReLU); action bounds from the saved
action space. Box observations and actions, MLP policies only.

VecNormalize statistics (``sb3_vecnormalize``) are read from a file beside the zip, without running code (a
restricted unpickler that maps the few globals a VecNormalize pickle names to inert
records; anything else is refused), and folded into the actor. Where they come from,
first found wins:

1. the file named by ``$SIMEVAL_SB3_VECNORMALIZE`` (``.pkl`` or ``.npz``; it must exist);
2. for CheckpointCallback's ``<prefix>_<N>_steps.zip``: ``<prefix>_vecnormalize_<N>_steps.npz``
   or ``.pkl`` (``save_vecnormalize=True``); missing while other steps have one is an error;
3. ``vecnormalize.npz`` / ``.pkl`` (the RL Zoo's name) or ``vec_normalize.npz`` / ``.pkl`` (SB3's
   docs' name) in the zip's directory, or in ``<dir>/<zip stem>/`` (the RL Zoo's layout); such a
   file applies to every zip in that directory.

A PPO/A2C zip records that training ran under VecNormalize (``_last_original_obs`` is set);
finding no statistics for it is an error. SAC/TD3 zips do not record it.
The ``.npz`` alternative: ``np.savez(path, mean=obs_rms.mean, var=obs_rms.var,
clip_obs=clip_obs, epsilon=epsilon)`` (``clip_obs`` and ``epsilon`` default to VecNormalize's 10 and 1e-8).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from simeval.checkpoints.formats.sb3_vecnormalize import CALLBACK_STEPS, error
from simeval.checkpoints.formats.sb3_vecnormalize import find as find_vecnormalize
from simeval.checkpoints.formats.sb3_vecnormalize import read as read_vecnormalize
from simeval.policies import stamp

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModule
    from torchrl.data import TensorSpec
    from torchrl.envs import EnvBase

    from simeval.checkpoints.base import Checkpoint

NAME = "sb3"
WATCH = ["*.zip"]  # model.save(<name>) and CheckpointCallback's <prefix>_<N>_steps.zip
FACTORY = "simeval.checkpoints.formats.sb3:actor"
ENV_MEMBER = "simeval.json"  # {"env": id}: what simeval's EvalCallback adds to the zips it writes; SB3 ignores it
_MAX_ENV = 64 << 10  # bytes: one env id
_MAX_DATA = 64 << 20  # bytes: SB3's JSON ``data`` member is kilobytes; the weights are bounded by the file's cap
_FAMILY = {"ActorCriticPolicy": "ppo", "SACPolicy": "sac", "TD3Policy": "td3"}  # MlpPolicy of each algorithm
_DEFAULT_ACTIVATION = {"ppo": "Tanh", "sac": "ReLU", "td3": "ReLU"}
_ACTOR_PREFIXES = {
    "ppo": ("mlp_extractor.policy_net.", "action_net."),
    "sac": ("actor.latent_pi.", "actor.mu."),
    "td3": ("actor.mu.",),
}
_KNOWN_PREFIXES = {
    "ppo": ("mlp_extractor.policy_net.", "mlp_extractor.value_net.", "action_net.", "value_net.", "log_std"),
    "sac": ("actor.latent_pi.", "actor.mu.", "actor.log_std.", "critic.", "critic_target."),
    "td3": ("actor.mu.", "actor_target.mu.", "critic.", "critic_target."),
}


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """Whether the file is a zip holding ``data`` and ``policy.pth`` (an SB3 ``model.save``)."""
    if data is not None:
        return False
    try:
        with _open_zip(path, raw) as z:
            return {"data", "policy.pth"} <= set(z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def step_of(path: str, data: Any) -> int:
    """The step in CheckpointCallback's file name, else ``num_timesteps`` from the zip's JSON."""
    found = CALLBACK_STEPS.match(os.path.basename(path))
    if found:
        return int(found["step"])
    with _open_zip(path, None) as z:
        return int(_json(path, z)["num_timesteps"])


def read(path: str, raw: bytes | None, data: Any) -> Checkpoint:
    """A Checkpoint for the SB3 zip at ``path`` (``raw``: its bytes), with VecNormalize statistics found beside it."""
    return _read(path, raw, None, look_beside=True)


def read_saved(raw: bytes, name: str, vecnormalize: dict | None) -> Checkpoint:
    """A Checkpoint for the bytes ``model.save`` wrote to a buffer, with its VecNormalize statistics given.

    Args:
        raw: the zip's bytes.
        name: what errors and ``Checkpoint.path`` call it.
        vecnormalize: ``{"mean", "var", "clip_obs", "epsilon"}`` of the training env's
            VecNormalize (folded into the actor), or None.
    """
    return _read(name, raw, vecnormalize, look_beside=False)


def _read(path: str, raw: bytes | None, given: dict | None, *, look_beside: bool) -> Checkpoint:
    """The Checkpoint of ``read`` (statistics from a file beside ``path``) or ``read_saved`` (``given``)."""
    from simeval.checkpoints.base import Checkpoint, unflatten

    try:
        with _open_zip(path, raw) as z:
            if not {"data", "policy.pth"} <= set(z.namelist()):
                raise error(path, "not a Stable-Baselines3 zip (it has no data and policy.pth)")
            saved = _json(path, z)
            state = _state_dict(path, z)
            env = _recorded_env(path, z)
    except zipfile.BadZipFile as exc:
        raise error(path, f"not a readable Stable-Baselines3 zip ({exc})") from None
    family, algorithm = _family(path, state, saved)
    hidden, obs_dim, act_dim = _layers(path, family, state)
    low, high = _check_spaces(path, saved, obs_dim, act_dim)
    activation, source = _activation(path, family, algorithm, saved.get("policy_kwargs"))
    _check_net_arch(path, saved.get("policy_kwargs"), hidden)
    kwargs = {
        "algorithm": family,
        "obs_dim": obs_dim,
        "hidden_dims": hidden,
        "activation": activation,
        "action_low": low,
        "action_high": high,
        "squash_output": family == "ppo" and _kwarg(saved.get("policy_kwargs"), "squash_output") is True,
        "obs_norm": None,
    }
    weights = {"module/" + k.replace(".", "/"): v for k, v in state.items() if k.startswith(_ACTOR_PREFIXES[family])}

    stats_path = find_vecnormalize(path, family, saved) if look_beside else None
    stats = read_vecnormalize(stats_path, obs_dim) if stats_path else given
    if stats is not None:
        import torch

        kwargs["obs_norm"] = {"clip_obs": stats["clip_obs"], "epsilon": stats["epsilon"]}
        weights["module/obs_rms/mean"] = torch.as_tensor(stats["mean"], dtype=torch.float64)
        weights["module/obs_rms/var"] = torch.as_tensor(stats["var"], dtype=torch.float64)
    return Checkpoint(
        path=path,
        step=int(saved["num_timesteps"]),
        env=env,  # SB3 saves no env id; simeval's EvalCallback adds it (ENV_MEMBER), else --env names it
        policy=unflatten(weights),
        obs_norm=None,  # VecNormalize is folded into the actor
        policy_factory=FACTORY,
        policy_kwargs=kwargs,
        meta={
            "format": NAME,
            "algorithm": algorithm,
            "architecture": source,
            "obs_dim": obs_dim,
            "action_dim": act_dim,
            "vecnormalize": os.path.relpath(stats_path, os.path.dirname(os.path.abspath(path))) if stats_path else None,
            "vecnormalize_applied": stats is not None,
        },
    )


def actor(
    env: EnvBase,
    algorithm: str,
    obs_dim: int,
    hidden_dims: list[int],
    activation: str,
    action_low: list[float],
    action_high: list[float],
    squash_output: bool = False,
    obs_norm: dict | None = None,
) -> TensorDictModule:
    """SB3's deterministic actor (``predict(deterministic=True)``) as an ``observation -> action`` module."""
    from tensordict.nn import TensorDictModule

    from simeval.checkpoints.formats.sb3_net import SB3Actor

    spec = env.full_action_spec_unbatched["action"] if hasattr(env, "full_action_spec_unbatched") else env.action_spec
    env_obs, env_act = env.observation_spec["observation"].shape[-1], spec.shape[-1]
    if (env_obs, env_act) != (obs_dim, len(action_low)):
        raise ValueError(
            f"the Stable-Baselines3 policy takes {obs_dim} observations and gives {len(action_low)} actions; "
            f"this env has {env_obs} and {env_act}: it was trained on another task (check --env)."
        )
    _check_bounds(spec, action_low, action_high)
    net = SB3Actor(
        algorithm, obs_dim, env_act, list(hidden_dims), activation, action_low, action_high, squash_output, obs_norm
    )
    kwargs = {
        "algorithm": algorithm,
        "obs_dim": obs_dim,
        "hidden_dims": list(hidden_dims),
        "activation": activation,
        "action_low": list(action_low),
        "action_high": list(action_high),
        "squash_output": squash_output,
        "obs_norm": obs_norm,
    }
    return stamp(TensorDictModule(net, in_keys=["observation"], out_keys=["action"]), FACTORY, kwargs)


# -- the zip ----------------------------------------------------------------------------------------------------------
@contextmanager
def _open_zip(path: str, raw: bytes | None) -> Iterator[zipfile.ZipFile]:
    """The zip of bytes ``raw``, or of the file at ``path`` opened as data (a regular file, never a FIFO)."""
    from simeval.checkpoints.bounds import open_data

    if raw is not None:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            yield z
        return
    with open_data(path) as f, zipfile.ZipFile(f) as z:
        yield z


def _member(path: str, z: zipfile.ZipFile, name: str, limit: int | None = None) -> bytes:
    """Member ``name``, refused unread when its directory entry says it is over ``limit`` bytes."""
    if limit is not None and z.getinfo(name).file_size > limit:
        size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
        raise error(path, f"its {name} is larger than {size}: not a Stable-Baselines3 policy")
    return z.read(name)


def _json(path: str, z: zipfile.ZipFile) -> dict:
    try:
        out = json.loads(_member(path, z, "data", _MAX_DATA))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(path, f"its data member is not JSON ({exc})") from None
    if not isinstance(out, dict) or not isinstance(out.get("num_timesteps"), int):
        raise error(path, "its data member has no num_timesteps: not a Stable-Baselines3 model")
    return out


def with_env(raw: bytes, env: str) -> bytes:
    """The zip ``raw`` (``model.save``'s bytes) with :data:`ENV_MEMBER` added, naming the env it was trained on.

    SB3's ``load`` reads ``data`` and the ``.pth`` members and ignores this one; simeval's
    reader takes the env from it, so ``--checkpoint best_model.zip`` needs no ``--env``.
    """
    buffer = io.BytesIO(raw)
    with zipfile.ZipFile(buffer, "a") as z:
        z.writestr(ENV_MEMBER, json.dumps({"env": env}))
    return buffer.getvalue()


def _recorded_env(path: str, z: zipfile.ZipFile) -> str | None:
    """The env id simeval's EvalCallback recorded in the zip (:data:`ENV_MEMBER`), or None (SB3's own zips)."""
    if ENV_MEMBER not in z.namelist():
        return None
    try:
        env = json.loads(_member(path, z, ENV_MEMBER, _MAX_ENV)).get("env")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise error(path, f"its {ENV_MEMBER} is not a JSON object naming the env ({exc})") from None
    if not isinstance(env, str) or not env:
        raise error(path, f'its {ENV_MEMBER} names no env (expected {{"env": "<id>"}}, got {env!r})')
    return env


def _state_dict(path: str, z: zipfile.ZipFile) -> dict:
    import torch

    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.bounds import DEFAULT_MAX_BYTES, torch_load

    try:
        state = torch_load(_member(path, z, "policy.pth"), path, DEFAULT_MAX_BYTES)
    except CheckpointError:
        raise
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = f"it references {found.group(1)}" if found else "it holds objects other than tensors"
        raise error(path, f"refused to load policy.pth: {what} (only tensors and plain data are allowed)") from None
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt member
        raise error(path, f"policy.pth is not a readable torch file ({type(exc).__name__})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise error(path, "policy.pth is not a state_dict of tensors")
    return state


def _family(path: str, state: dict, saved: dict) -> tuple[str, str]:
    """("ppo" | "sac" | "td3", the algorithm's name), from the weights, checked against the policy class."""
    if "action_net.weight" in state:
        family, algorithm = "ppo", "PPO" if "clip_range" in saved else "A2C"
    elif any(k.startswith(("actor.latent_pi.", "actor.log_std")) for k in state):
        family, algorithm = "sac", "SAC"
    elif "actor.mu.0.weight" in state:
        delay = saved.get("policy_delay")
        family, algorithm = "td3", "TD3" if isinstance(delay, int) and delay > 1 else "DDPG"
    else:
        raise error(path, "no actor simeval knows in policy.pth (PPO/A2C, SAC, TD3/DDPG MlpPolicy)")
    cls = _policy_class(saved)
    if cls is not None and _FAMILY.get(cls) != family:
        raise error(path, f"a {cls}: simeval reads MlpPolicy (Box observations, an MLP) only")
    if family == "sac" and saved.get("use_sde"):
        raise error(path, "SAC with gSDE (use_sde=True) is not supported: train without use_sde")
    unknown = sorted(k for k in state if not k.startswith(_KNOWN_PREFIXES[family]))
    if unknown:
        raise error(path, f"unexpected parameters {unknown[:3]} (a features extractor?): only MlpPolicy is supported")
    return family, algorithm


def _policy_class(saved: dict) -> str | None:
    """The policy's class name, from the readable repr of its ``__init__`` (``<function X.__init__ at ...>``)."""
    cls = saved.get("policy_class")
    init = cls.get("__init__") if isinstance(cls, dict) else None
    found = re.match(r"<function (\w+)\.__init__ ", init) if isinstance(init, str) else None
    return found.group(1) if found else None


def _layers(path: str, family: str, state: dict) -> tuple[list[int], int, int]:
    """(hidden sizes, observation size, action size) of the actor, checking SB3's layer layout."""
    pattern = {"ppo": r"mlp_extractor\.policy_net", "sac": r"actor\.latent_pi", "td3": r"actor\.mu"}[family]
    found = sorted((int(m.group(1)), k) for k in state if (m := re.match(rf"^{pattern}\.(\d+)\.weight$", k)))
    head = {"ppo": "action_net.weight", "sac": "actor.mu.weight"}.get(family)
    keys = [k for _, k in found] + ([head] if head else [])
    if not keys or [i for i, _ in found] != list(range(0, 2 * len(found), 2)):
        raise error(path, f"unexpected actor layout {[k for _, k in found]}: not SB3's MLP (Linear, activation, ...)")
    shapes = [tuple(state[k].shape) for k in keys]
    for (n_out, _), (_, n_in) in zip(shapes[:-1], shapes[1:], strict=True):
        if n_out != n_in:
            raise error(path, f"actor layers do not chain ({shapes}): a corrupt policy.pth")
    return [s[0] for s in shapes[:-1]], shapes[0][1], shapes[-1][0]


def _box(path: str, saved: dict, key: str, size: int) -> dict:
    space = saved.get(key)
    if not isinstance(space, dict) or "spaces.box.Box" not in str(space.get(":type:")):
        kind = space.get(":type:") if isinstance(space, dict) else None
        raise error(path, f"its {key} is {kind or 'not readable'}: simeval reads Box spaces only")
    if space.get("_shape") != [size]:
        raise error(path, f"its {key} has shape {space.get('_shape')}, the network {size}: only flat Box spaces")
    return space


def _check_spaces(path: str, saved: dict, obs_dim: int, act_dim: int) -> tuple[list[float], list[float]]:
    """The action bounds, after checking both spaces are flat Boxes that fit the network."""
    _box(path, saved, "observation_space", obs_dim)
    space = _box(path, saved, "action_space", act_dim)
    bounds = [_floats(space.get(k)) for k in ("low", "high")]
    if any(b is None or len(b) != act_dim for b in bounds):
        raise error(path, f"cannot read the action bounds {space.get('low')!r}, {space.get('high')!r}")
    return bounds[0], bounds[1]


def _floats(text: Any) -> list[float] | None:
    """A 1-D numpy array's ``str`` (``"[-2.  2.]"``) as floats; None if it is not one."""
    if not isinstance(text, str) or "..." in text:
        return None
    try:
        return [float(x) for x in text.strip().removeprefix("[").removesuffix("]").split()]
    except ValueError:
        return None


def _kwarg(policy_kwargs: Any, name: str) -> Any:
    return policy_kwargs.get(name) if isinstance(policy_kwargs, dict) else None


def _activation(path: str, family: str, algorithm: str, policy_kwargs: Any) -> tuple[str, str]:
    """(torch.nn class name, where it came from), from ``policy_kwargs["activation_fn"]`` or the default."""
    from simeval.checkpoints.formats.sb3_net import ACTIVATIONS

    text = _kwarg(policy_kwargs, "activation_fn")
    if text is None:
        name = _DEFAULT_ACTIVATION[family]
        return name, f"layer sizes from the weights; activation {algorithm}'s default ({name})"
    found = re.fullmatch(r"<class 'torch\.nn\.modules\.activation\.(\w+)'>", str(text))
    if not found or found.group(1) not in ACTIVATIONS:
        raise error(path, f"activation_fn {text} is not one simeval rebuilds (torch.nn: {', '.join(ACTIVATIONS)})")
    return found.group(1), f"layer sizes from the weights; activation {found.group(1)} from policy_kwargs"


def _check_net_arch(path: str, policy_kwargs: Any, hidden: list[int]) -> None:
    """``policy_kwargs["net_arch"]`` (its actor part), when readable, must be what the weights have."""
    arch = _kwarg(policy_kwargs, "net_arch")
    if isinstance(arch, dict):
        arch = arch.get("pi")
    if isinstance(arch, list) and all(isinstance(n, int) for n in arch) and arch != hidden:
        raise error(path, f"policy_kwargs say net_arch {arch}, the weights have hidden layers {hidden}")
    extractor = _kwarg(policy_kwargs, "features_extractor_class")
    if extractor is not None and "FlattenExtractor" not in str(extractor):
        raise error(path, f"features_extractor_class {extractor}: only MlpPolicy's FlattenExtractor is supported")


def _check_bounds(spec: TensorSpec, low: list[float], high: list[float]) -> None:
    """The env's action bounds must be the ones the policy was trained with (SB3 clips/rescales to these)."""
    space = getattr(spec, "space", None)
    if getattr(space, "low", None) is None:
        return
    env_low, env_high = space.low.flatten().tolist(), space.high.flatten().tolist()

    def same(a: float, b: float) -> bool:
        if abs(a) > 1e30 or abs(b) > 1e30:  # unbounded: +-inf or float32's extremes
            return abs(a) > 1e30 and abs(b) > 1e30 and (a > 0) == (b > 0)
        return abs(a - b) <= 1e-5 * max(1.0, abs(b))

    if not all(map(same, env_low + env_high, list(low) + list(high))):
        raise ValueError(
            f"the Stable-Baselines3 policy acts in [{low}, {high}], this env's actions are in "
            f"[{env_low}, {env_high}]: it was trained on another task or action wrapper (check --env)."
        )
