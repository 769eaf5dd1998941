"""An ONNX policy graph run by onnxruntime, as a torch module whose weights are the file's bytes."""

from __future__ import annotations

import math
from collections.abc import Iterator
from types import ModuleType

import numpy as np
import torch

_NUMPY = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}
MAX_TENSOR_BYTES = 1 << 30  # any one tensor a policy graph computes, at batch size 1
# Ops whose output size comes from data: a graph may use them only where shape inference knows that size.
_SIZED_BY_DATA = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "OneHot"}
_REFUSED_OPS = {"Loop", "Scan"}  # iteration counts from data: a policy graph needs none
_ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
# TensorProto data types -> bits per element (unlisted: 8), for what a stored tensor declares
_ELEMENT_BITS = {**{k: 8 * v for k, v in _ELEMENT_BYTES.items()}, 14: 64, 15: 128, 21: 4, 22: 4, 23: 4, 25: 2, 26: 2}


def check_graph(model: bytes, source: str = "the ONNX model") -> None:
    """Refuse an ONNX graph that reads other files or computes without bound; a one-line ValueError.

    Everywhere in the model (the graph, its subgraphs, model-local functions, training info): no tensor
    in an external file (initialisers, constants, sparse ones: they would be read from paths the file
    names); no tensor declaring more than :data:`MAX_TENSOR_BYTES`, or more than its data holds; no
    ``Loop``/``Scan``. Every value whose size shape inference knows (symbolic dimensions, e.g. the batch,
    counted as 1) at most :data:`MAX_TENSOR_BYTES`; and the ops that size their output from data
    (``Expand``, ``ConstantOfShape``, ``Tile``, ...) only where inference knows that size.
    """
    import onnx
    from google.protobuf.message import DecodeError

    try:
        proto = onnx.load_model_from_string(model)
    except (DecodeError, ValueError, RuntimeError):
        raise ValueError(f"{source}: not a readable ONNX model.") from None
    nodes = [node for body in _bodies(proto) for node in body.node]
    for node in nodes:
        if node.op_type in _REFUSED_OPS:
            raise ValueError(f"{source}: the ONNX graph has a {node.op_type} (iterations from data): refused.")
    for tensor, dense in _stored(proto):
        _check_stored(tensor, dense, source)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - inference fails on ops it does not know: sizes stay unknown, checked below
        inferred = proto
    known = _known_sizes(inferred.graph)
    for size, name in known.values():
        if size > MAX_TENSOR_BYTES:
            raise ValueError(f"{source}: the ONNX graph computes {name!r:.60} of {size:,} bytes: refused.")
    for node in nodes:
        if node.op_type in _SIZED_BY_DATA and any(out and out not in known for out in node.output):
            raise ValueError(
                f"{source}: the ONNX graph's {node.op_type} takes its output size from data simeval cannot "
                "bound before running it: refused (export the policy with static shapes)."
            )


def _bodies(proto: object) -> Iterator[object]:
    """Every list of nodes in the model: its graph, model-local functions, training info, and their subgraphs."""
    tops = [proto.graph, *proto.functions]
    for info in proto.training_info:
        tops += [info.initialization, info.algorithm]
    for top in tops:
        yield from _subgraphs(top)


def _subgraphs(body: object) -> Iterator[object]:
    """``body`` (a graph or a function) and every graph in its nodes' attributes (If branches, ...), nested."""
    yield body
    for node in body.node:
        for attr in node.attribute:
            for sub in [attr.g, *attr.graphs] if attr.HasField("g") else list(attr.graphs):
                yield from _subgraphs(sub)


def _stored(proto: object) -> Iterator[tuple[object, list[int] | None]]:
    """Every tensor the model stores, with the dense shape of a sparse one's values (else None): initialisers,
    sparse initialisers, and every node attribute's tensors, everywhere."""
    for body in _bodies(proto):
        yield from ((t, None) for t in getattr(body, "initializer", ()))
        sparse = list(getattr(body, "sparse_initializer", ()))
        for node in body.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t, None
                yield from ((t, None) for t in attr.tensors)
                sparse += [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
                sparse += list(attr.sparse_tensors)
        for s in sparse:
            yield s.values, list(s.dims)
            yield s.indices, None


def _check_stored(tensor: object, dense: list[int] | None, source: str) -> None:
    """Refuse a stored tensor in another file, declaring over MAX_TENSOR_BYTES (densified, for a sparse one's
    values), or declaring more elements than its data holds."""
    from onnx import TensorProto

    name = tensor.name or "<unnamed>"
    if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
        raise ValueError(f"{source}: ONNX weights in external files are not supported: export them inside it.")
    bits = _ELEMENT_BITS.get(tensor.data_type, 8)
    for dims in (list(tensor.dims), dense):
        if dims is not None and (any(d < 0 for d in dims) or math.prod(dims) * bits // 8 > MAX_TENSOR_BYTES):
            raise ValueError(
                f"{source}: the ONNX tensor {name!r:.60} declares the shape {dims}, over "
                f"{MAX_TENSOR_BYTES >> 30} GiB: refused."
            )
    elements = math.prod(tensor.dims)
    if tensor.data_type == TensorProto.STRING:
        short = len(tensor.string_data) < elements
    else:
        short = _held_bytes(tensor) < -(-elements * bits // 8)
    if short:
        raise ValueError(
            f"{source}: the ONNX tensor {name!r:.60} declares the shape {list(tensor.dims)} but holds less "
            "data than that: a damaged or hostile file, refused."
        )


def _held_bytes(tensor: object) -> int:
    """The bytes of data ``tensor`` holds: its raw bytes, or its typed values at their stored width."""
    narrow = len(tensor.float_data) + len(tensor.int32_data)
    wide = len(tensor.int64_data) + len(tensor.double_data) + len(tensor.uint64_data)
    return len(tensor.raw_data) + 4 * narrow + 8 * wide


def _known_sizes(graph: object) -> dict[str, tuple[int, str]]:
    """Value name -> (bytes at batch size 1, name) for every value whose shape inference fully knows."""
    out = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            continue
        dims = tensor.shape.dim
        if not all(d.HasField("dim_value") or d.HasField("dim_param") for d in dims):
            continue
        count = 1
        for d in dims:
            count *= d.dim_value if d.HasField("dim_value") else 1
        out[value.name] = (count * _ELEMENT_BYTES.get(tensor.elem_type, 8), value.name)
    return out


class OnnxPolicy(torch.nn.Module):
    """``observation -> action`` through an onnxruntime InferenceSession.

    The model's bytes are the module's extra state (``{"model": uint8
    tensor}``), so simeval's weight loading delivers a new graph the way it
    delivers new parameters. Until a model is loaded the policy acts with zeros
    (its initial state; the collector calls it once when it is built, before
    the first weights arrive). A graph exported with a fixed batch of 1
    (rsl_rl's exporter) runs one row at a time. Actions come back on the
    observation's device, in the action spec's dtype.
    """

    def __init__(self, obs_dim: int, act_dim: int, dtype: torch.dtype = torch.float32, device: str | None = None):
        super().__init__()
        self.obs_dim, self.act_dim, self.action_dtype, self.env_device = obs_dim, act_dim, dtype, device
        self._model: bytes | None = None
        self._session = None

    def load_model(self, model: bytes, source: str = "the ONNX model") -> None:
        """Build the session for ``model``; a one-line ValueError when it does not fit the env."""
        import onnxruntime as ort

        check_graph(model, source)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(model, options, providers=self._providers(ort))
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"{source}: onnxruntime cannot load it ({first}).") from None
        (inp,), (out,) = session.get_inputs(), session.get_outputs()
        got_obs, got_act = inp.shape[-1], out.shape[-1]
        if got_obs != self.obs_dim or got_act != self.act_dim:
            raise ValueError(
                f"{source}: the ONNX policy maps {got_obs} observation features to {got_act} actions, "
                f"the env has {self.obs_dim} and {self.act_dim}: it was exported for another env."
            )
        if inp.type not in _NUMPY:
            raise ValueError(f"{source}: the ONNX input is {inp.type}; float, double or float16 is supported.")
        self._in_name, self._out_name, self._in_dtype = inp.name, out.name, _NUMPY[inp.type]
        self._rank = len(inp.shape)  # 1: one unbatched observation per run
        self._fixed_batch = inp.shape[0] if self._rank == 2 and isinstance(inp.shape[0], int) else None
        self._model, self._session = bytes(model), session

    def _providers(self, ort: ModuleType) -> list:
        device = self.env_device or ""
        if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions (..., act_dim) for observations ``obs`` (..., obs_dim); zeros until a model is loaded."""
        lead = obs.shape[:-1]
        if self._session is None:  # the initial state, as a fresh network's random weights: no model yet
            return torch.zeros(*lead, self.act_dim, dtype=self.action_dtype, device=obs.device)
        x = obs.detach().reshape(-1, self.obs_dim).cpu().numpy().astype(self._in_dtype, copy=False)
        n = self._fixed_batch
        if self._rank == 1:
            y = np.stack([self._run(row) for row in x])
        elif n is None or x.shape[0] == n:
            y = self._run(x)
        elif x.shape[0] % n == 0:
            y = np.concatenate([self._run(chunk) for chunk in np.split(x, len(x) // n)])
        else:
            raise ValueError(f"the ONNX policy takes batches of exactly {n} observations, got {x.shape[0]}.")
        return torch.from_numpy(np.ascontiguousarray(y)).reshape(*lead, self.act_dim).to(obs.device, self.action_dtype)

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self._session.run([self._out_name], {self._in_name: x})[0]

    def get_extra_state(self) -> dict:
        """``{"model": uint8 tensor}`` of the loaded model's bytes, or ``{}`` before one is loaded."""
        if self._model is None:
            return {}
        return {"model": torch.frombuffer(bytearray(self._model), dtype=torch.uint8)}

    def set_extra_state(self, state: dict) -> None:
        """Load the model whose bytes ``state`` holds (what :meth:`get_extra_state` returns); ``{}`` keeps it."""
        if state:
            self.load_model(state["model"].detach().cpu().numpy().tobytes())

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_session"] = None  # not picklable: rebuilt from the bytes
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._model is not None:
            self.load_model(self._model)

    def extra_repr(self) -> str:
        """The dimensions and the loaded model's size, for the module's repr."""
        loaded = f"{len(self._model)} bytes" if self._model is not None else "no model loaded"
        return f"obs_dim={self.obs_dim}, act_dim={self.act_dim}, {loaded}"
