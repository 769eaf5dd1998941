"""ONNX policies (``observation -> action`` graphs) as simeval Checkpoints, run by onnxruntime.

Reads what ``python -m simeval.export CHECKPOINT --to onnx`` writes (its step,
env and source are in the model's ``metadata_props``) and single-input,
single-output policies exported elsewhere, e.g. rsl_rl's ``policy.onnx``
(input ``obs``, output ``actions``, normaliser inside). The graph is the
policy: ``Checkpoint.policy`` carries the file's bytes (as the extra state of
:class:`~simeval.checkpoints.formats.onnx_net.OnnxPolicy`), so every ONNX file of
one env shares one evaluation plan (``--watch``) and a worker evaluates
exactly the bytes whose sha256 is recorded. Protobuf parsing runs no code;
weights in external files are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simeval.policies import stamp

if TYPE_CHECKING:
    from onnx import ModelProto
    from tensordict.nn import TensorDictModule
    from torchrl.envs import EnvBase

    from simeval.checkpoints.base import Checkpoint

NAME = "onnx"
WATCH = ["*.onnx"]
FACTORY = "simeval.checkpoints.formats.onnx:actor"
MODEL_KEY = "model"  # OnnxPolicy's extra state: the ONNX file's bytes as a uint8 tensor

# metadata_props written by simeval.export and read back here.
META_FORMAT = "simeval.format"
META_STEP = "simeval.step"
META_ENV = "simeval.env"
META_SOURCE = "simeval.source"
META_SOURCE_SHA256 = "simeval.source_sha256"
META_SOURCE_FORMAT = "simeval.source_format"
META_OBS_NORM = "simeval.obs_norm"
EXPORT_FORMAT = "simeval-onnx/1"

# Every ONNX file starts with field 1 (ir_version, a varint): protobuf writes fields in number order.
_MAGIC = b"\x08"


def recognises(path: str, raw: bytes | None, data: Any) -> bool:
    """Not a torch file, starts like a ModelProto, and is named ``.onnx`` or parses as one with a graph.

    A damaged ``.onnx`` file is recognised, so that reading it says what is wrong with it.
    """
    if data is not None:
        return False
    head = raw[:1] if raw is not None else _head(path)
    return head == _MAGIC and (path.lower().endswith(".onnx") or _parse(path, raw) is not None)


def step_of(path: str, data: Any) -> int:
    """The step ``simeval.export`` stored in the model's metadata, else 0."""
    model = _parse(path, None)
    return _step(_props(model)) if model is not None else 0


def read(path: str, raw: bytes | None, data: Any) -> Checkpoint:
    """A Checkpoint whose policy is the ONNX graph in ``path`` (bytes ``raw``)."""
    import torch
    from tensordict import TensorDict

    from simeval.checkpoints.base import Checkpoint, CheckpointError
    from simeval.checkpoints.formats.onnx_net import check_graph

    raw = _read(path) if raw is None else raw
    model = _parse(path, raw)
    if model is None:
        raise CheckpointError(f"{path}: not a readable ONNX model (truncated or corrupt: no graph parses from it).")
    try:
        check_graph(raw, path)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    obs_dim, act_dim = io_dims(model, path)
    props = _props(model)
    model_bytes = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    meta = {
        "format": NAME,
        "architecture": f"the ONNX graph in the file (opset {_opset(model)}, producer {model.producer_name or '?'})",
        "obs_dim": obs_dim,
        "action_dim": act_dim,
        "obs_norm": props.get(META_OBS_NORM, "unknown (inside the graph, if the exporter put it there)"),
    }
    for key, name in ((META_SOURCE, "source"), (META_SOURCE_SHA256, "source_sha256")):
        if key in props:
            meta[name] = props[key]
    return Checkpoint(
        path=path,
        step=_step(props),
        env=props.get(META_ENV) or None,
        policy=TensorDict({"__extra_state__": {"module": {MODEL_KEY: model_bytes}}}),
        obs_norm=None,  # an exported graph normalises inside itself
        policy_factory=FACTORY,
        policy_kwargs={},
        meta=meta,
    )


def io_dims(model: ModelProto, path: str) -> tuple[int, int]:
    """(observation features, action dims) of a one-input, one-output policy graph; CheckpointError otherwise."""
    from onnx import TensorProto

    from simeval.checkpoints.base import CheckpointError

    graph = model.graph
    initialisers = {t.name for t in graph.initializer}
    if any(t.data_location == TensorProto.EXTERNAL for t in graph.initializer):
        raise CheckpointError(f"{path}: ONNX weights in external files are not supported: export them inside the file.")
    inputs = [i for i in graph.input if i.name not in initialisers]
    if len(inputs) != 1 or len(graph.output) != 1:
        names = [i.name for i in inputs], [o.name for o in graph.output]
        raise CheckpointError(
            f"{path}: an ONNX policy needs one input (observation) and one output (action), this one has inputs "
            f"{names[0]} and outputs {names[1]} (recurrent policies are not supported)."
        )
    dims = []
    for value, what in ((inputs[0], "input"), (graph.output[0], "output")):
        shape = value.type.tensor_type.shape.dim
        if not shape or not shape[-1].HasField("dim_value"):
            raise CheckpointError(f"{path}: the ONNX {what} {value.name!r} has no fixed last dimension.")
        dims.append(int(shape[-1].dim_value))
    return dims[0], dims[1]


def actor(env: EnvBase) -> TensorDictModule:
    """``observation -> action`` by onnxruntime; the graph comes with the weights (``Checkpoint.policy``).

    Runs on the CUDA provider when the env lives on a GPU and onnxruntime has
    one, else on the CPU (one thread: the simulator needs the cores).
    """
    from tensordict.nn import TensorDictModule

    from simeval.checkpoints.formats.onnx_net import OnnxPolicy

    obs_dim = env.observation_spec["observation"].shape[-1]
    spec = env.full_action_spec_unbatched["action"] if hasattr(env, "full_action_spec_unbatched") else env.action_spec
    device = getattr(env, "device", None)
    net = OnnxPolicy(obs_dim, spec.shape[-1], spec.dtype, device=None if device is None else str(device))
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    return stamp(module, FACTORY, {})


def _head(path: str) -> bytes:
    from simeval.checkpoints.base import CheckpointError
    from simeval.checkpoints.bounds import open_data

    try:
        with open_data(path) as f:
            return f.read(1)
    except (OSError, CheckpointError):
        return b""


def _read(path: str) -> bytes:
    """The file's bytes, opened as data; a file over protobuf's limit (it grew since it was sized) is refused."""
    from simeval.checkpoints.bounds import MAX_PROTOBUF_BYTES, check_kind, open_data

    with open_data(path) as f:
        raw = f.read(MAX_PROTOBUF_BYTES + 1)
    check_kind(path, "protobuf", len(raw))
    return raw


def _parse(path: str, raw: bytes | None) -> ModelProto | None:
    """The ModelProto in ``raw`` (or the file), or None when it is not one with a graph."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(_read(path) if raw is None else raw)
    except (DecodeError, OSError, ValueError, RuntimeError):  # CheckpointError is a ValueError
        return None
    return model if model.HasField("graph") and len(model.graph.node) > 0 else None


def _props(model: ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def _step(props: dict[str, str]) -> int:
    try:
        return int(props.get(META_STEP, 0))
    except ValueError:
        return 0


def _opset(model: ModelProto) -> int | str:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")
