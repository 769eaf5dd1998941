"""LeRobot's ``pretrained_model/`` directories (``config.json`` + ``model.safetensors`` + processors).

What ``PreTrainedPolicy.save_pretrained`` and the processor pipelines' ``save_pretrained`` write, as
lerobot-train leaves them under ``checkpoints/<step>/pretrained_model/``. The directory (or its
``model.safetensors``) is the checkpoint. Everything in it is data, read bounded:

- ``config.json``: the policy's type and config. Only types of :data:`POLICY_TYPES` are read;
  their config travels as plain JSON in ``policy_kwargs``.
- ``model.safetensors``: the weights (safetensors holds tensors only; no code).
- ``policy_preprocessor.json`` and ``policy_postprocessor.json``: each step by its LeRobot
  registry name, with its config and, for the normalisers, a ``.safetensors`` state file in the
  same directory (the normalisation statistics). Only the steps of :data:`STEPS` are read; a step
  named by module path (``"class"``) or any other name is refused in one line, before anything is
  imported. Their statistics travel with the weights, so a worker evaluates exactly what was read.

The policy is built by :func:`actor` (registered: the format's ``FACTORY``) in the worker, where
LeRobot is installed: LeRobot's own policy class for the type, LeRobot's processor steps, the
checkpoint's weights and statistics. It is called where a sub-env needs actions, answers
``n_action_steps`` actions (``predict_action_chunk``, unnormalised by the postprocessor), and the
worker plays them per sub-env, clearing them at its reset (:mod:`simeval.policy_kinds.acting`).
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

from simeval.policies import stamp

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModule
    from torchrl.envs import EnvBase

    from simeval.checkpoints.base import Checkpoint

NAME = "lerobot"
# lerobot-train's checkpoints/<step>/, not checkpoints/last (a link to one of them).
WATCH = ["checkpoints/[0-9]*/pretrained_model/model.safetensors"]
FACTORY = "simeval.checkpoints.formats.lerobot:actor"
DIRECTORY_FILE = "model.safetensors"  # load_checkpoint(DIR) reads DIR/model.safetensors
CONFIG = "config.json"
PIPELINES = {"preprocessor": "policy_preprocessor.json", "postprocessor": "policy_postprocessor.json"}
MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 32  # LeRobot's configs nest four or five levels
_ACT_SIZES = {"chunk_size": 100, "dim_model": 512}  # ACT's defaults, where config.json leaves them out
# Policy types simeval runs: each answers a chunk from one observation (predict_action_chunk).
POLICY_TYPES = ("act",)
# LeRobot's processor steps simeval builds, by registry name: data transforms, no files or network.
STEPS = (
    "rename_observations_processor",
    "to_batch_processor",
    "device_processor",
    "normalizer_processor",
    "unnormalizer_processor",
)
PROCESSORS = "processors"  # the policy module's submodule whose extra state holds the processors' statistics
_STATE_FILE = re.compile(r"^[A-Za-z0-9_.-]{1,200}\.safetensors$")


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """A ``model.safetensors`` (not a torch file) with LeRobot's ``config.json`` beside it."""
    return (
        data is None
        and os.path.basename(path) == DIRECTORY_FILE
        and os.path.isfile(os.path.join(os.path.dirname(path), CONFIG))
    )


def step_of(path: str, data: Any) -> int:
    """lerobot-train's step: the name of ``checkpoints/<step>/`` above ``pretrained_model/`` (a link followed), or 0."""
    parent = os.path.basename(os.path.dirname(os.path.dirname(os.path.realpath(path))))
    return int(parent) if parent.isdigit() else 0


def read(path: str, raw: bytes, data: Any) -> Checkpoint:
    """The Checkpoint of the ``pretrained_model/`` directory holding ``path`` (bytes ``raw``)."""
    from tensordict import TensorDict

    from simeval.checkpoints.base import Checkpoint, CheckpointError

    folder = os.path.dirname(path) or "."
    config = _json(os.path.join(folder, CONFIG))
    kind = config.get("type")
    if kind not in POLICY_TYPES:
        raise CheckpointError(
            f"{path}: a LeRobot policy of type {kind!r:.40}: simeval runs the types {', '.join(POLICY_TYPES)}."
        )
    if config.get("temporal_ensemble_coeff") is not None:
        raise CheckpointError(
            f"{path}: ACT with temporal_ensemble_coeff set averages chunks across sub-envs' steps: "
            "set it to null in config.json (simeval plays n_action_steps of each chunk)."
        )
    _check_sizes(os.path.join(folder, CONFIG), config, len(raw))
    steps = {name: _steps(folder, file) for name, file in PIPELINES.items()}
    weights = _tensors(raw, path)
    pipelines = {name: [spec for spec, _ in listed] for name, listed in steps.items()}
    stats = {name: _stats(folder, PIPELINES[name], listed) for name, listed in steps.items()}
    policy = TensorDict()
    for key, value in weights.items():
        policy.set(("module", "policy", *key.split(".")), value)
    extra = {f"{name}.{i}.{key}": v for name, steps in stats.items() for i, s in steps.items() for key, v in s.items()}
    if extra:
        policy.set(("__extra_state__", f"module.{PROCESSORS}"), TensorDict(extra))
    train = _train_config(folder)
    return Checkpoint(
        path=path,
        step=step_of(path, None),
        env=train,
        policy=policy,
        policy_factory=FACTORY,
        policy_kwargs={"config": config, **pipelines},
        meta={
            "format": NAME,
            "architecture": f"LeRobot's {kind} policy (config.json) with its processors",
            "action_dim": _action_dim(config),
        },
    )


def _json(path: str) -> dict:
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.bounds import open_data

    try:
        with open_data(path) as f:
            text = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing: a LeRobot pretrained_model directory has one.") from None
    if len(text) > MAX_JSON_BYTES:
        raise CheckpointError(f"{path}: over {MAX_JSON_BYTES >> 10} KiB: not a LeRobot config (refused unread).")
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not JSON ({str(exc)[:80]}).") from None
    except RecursionError:
        value = None
    if value is None or _too_deep(value):
        raise CheckpointError(f"{path}: nested over {MAX_JSON_DEPTH} levels deep: not a LeRobot config (refused).")
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: a JSON {type(value).__name__}, not an object.")
    return value


def _too_deep(value: Any) -> bool:
    """Whether JSON ``value`` nests lists and objects over :data:`MAX_JSON_DEPTH` deep (walked without recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > MAX_JSON_DEPTH:
                    return True
                pending.append((child, depth + 1))
    return False


def _check_sizes(path: str, config: dict, weight_bytes: int) -> None:
    """Refuse ACT sizes whose cost LeRobot pays in Python before any tensor (out of the build's budget): its
    sinusoidal position table of (chunk_size + 2) x dim_model numbers, past what the weights could back."""
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.bounds import describe

    sizes = {key: config.get(key, default) for key, default in _ACT_SIZES.items()}
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{path}: {key} is {value!r:.40}, not a whole number >= 1.")
    table = (sizes["chunk_size"] + 2) * sizes["dim_model"] * 8
    if table > 2 * weight_bytes + (16 << 20):
        raise CheckpointError(
            f"{path}: chunk_size {sizes['chunk_size']} x dim_model {sizes['dim_model']} make LeRobot build a "
            f"{describe(table)} table before any weight, far more than {DIRECTORY_FILE} holds "
            f"({describe(weight_bytes)}): they do not match the weights (refused before LeRobot is imported)."
        )


def _tensors(raw: bytes, path: str) -> dict:
    """The tensors of safetensors bytes ``raw`` (the file is already bounded by its size)."""
    from simeval.checkpoints.base import CheckpointError

    try:
        from safetensors.torch import load
    except ImportError:
        raise CheckpointError(
            f"{path}: reading LeRobot checkpoints needs safetensors: pip install safetensors."
        ) from None
    try:
        return load(raw)
    except Exception as exc:  # noqa: BLE001 - safetensors' own refusal of a damaged file
        raise CheckpointError(f"{path}: not a readable safetensors file ({str(exc).splitlines()[0][:100]}).") from None


def _steps(folder: str, file: str) -> list[tuple[dict, str | None]]:
    """A processor pipeline's steps, checked as data: ``({"registry_name", "config"}, state file name or None)``."""
    from simeval.checkpoints.base import CheckpointError

    path = os.path.join(folder, file)
    spec = _json(path)
    steps = spec.get("steps")
    if not isinstance(steps, list):
        raise CheckpointError(f"{path}: no list of steps.")
    out = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise CheckpointError(f"{path}: step {i} is not an object.")
        name = step.get("registry_name")
        if name not in STEPS:
            said = f"the class {step['class']!r:.80}" if "class" in step and name is None else f"{name!r:.60}"
            raise CheckpointError(
                f"{path}: step {i} names {said}: simeval builds only LeRobot's steps {', '.join(STEPS)} "
                "(nothing was imported)."
            )
        config = step.get("config", {})
        if not isinstance(config, dict):
            raise CheckpointError(f"{path}: step {i}'s config is not an object.")
        state = step.get("state_file")
        if state is not None and (not isinstance(state, str) or not _STATE_FILE.match(state) or state.startswith(".")):
            raise CheckpointError(f"{path}: step {i}'s state_file {state!r:.80} is not a file name in its directory.")
        out.append(({"registry_name": name, "config": config}, state))
    return out


def _stats(folder: str, file: str, steps: list[tuple[dict, str | None]]) -> dict:
    """The statistics of a pipeline's steps that name a state file, by step index (each file opened as data)."""
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.bounds import check_size, open_data

    stats = {}
    for i, (_, state) in enumerate(steps):
        if state is None:
            continue
        state_path = os.path.join(folder, state)
        try:
            with open_data(state_path) as f:
                size = os.fstat(f.fileno()).st_size
                check_size(state_path, size, MAX_JSON_BYTES * 64)
                stats[i] = _tensors(f.read(size), state_path)
        except FileNotFoundError:
            raise CheckpointError(f"{state_path}: missing (named by {file}).") from None
    return stats


def _train_config(folder: str) -> str | None:
    """The env id lerobot-train recorded (``train_config.json``'s env type), when simeval runs it; else None."""
    path = os.path.join(folder, "train_config.json")
    if not os.path.isfile(path):
        return None
    env = _json(path).get("env")
    kind = env.get("type") if isinstance(env, dict) else None
    from simeval.envs.simulators.lerobot.env import PACKAGES

    return f"lerobot:{kind}" if kind in PACKAGES else None


def _action_dim(config: dict) -> int | None:
    try:
        return int(config["output_features"]["action"]["shape"][-1])
    except (KeyError, TypeError, IndexError, ValueError):
        return None


def actor(env: EnvBase, config: dict, preprocessor: list, postprocessor: list) -> TensorDictModule:
    """The LeRobot policy of ``config`` with its processors, answering ``n_action_steps`` actions per call.

    Built with LeRobot's own classes for the type and steps (imports LeRobot); the weights and
    the processors' statistics load afterwards, from the checkpoint. It reads the config's input
    features by their keys and writes ``action`` ``[n, n_action_steps, act_dim]``; it is declared
    a chunked policy, so the worker keeps each sub-env's chunk and clears it at its reset.
    """
    from tensordict.nn import TensorDictModule

    from simeval.checkpoints.formats.lerobot_net import LeRobotPolicy
    from simeval.policy_kinds import declare

    if config.get("type") not in POLICY_TYPES:
        raise ValueError(
            f"a LeRobot policy of type {config.get('type')!r:.40}: simeval runs {', '.join(POLICY_TYPES)}."
        )
    for step in (*preprocessor, *postprocessor):  # kwargs may come from any checkpoint naming this factory
        name = step.get("registry_name") if isinstance(step, dict) else None
        if name not in STEPS:
            raise ValueError(f"LeRobot processor step {name!r:.60}: simeval builds only {', '.join(STEPS)}.")
    device = getattr(env, "device", None)
    net = LeRobotPolicy(config, preprocessor, postprocessor, device=None if device is None else str(device))
    module = TensorDictModule(net, in_keys=list(net.in_keys), out_keys=["action"])
    declare(module, chunk=net.n_action_steps)
    return stamp(module, FACTORY, {"config": config, "preprocessor": preprocessor, "postprocessor": postprocessor})
