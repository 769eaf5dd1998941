"""Write an ``obs -> actions`` module as ONNX or TorchScript, atomically, with simeval's metadata inside.

ONNX: torch.onnx's exporter (torch.export + onnxscript, offline), opset 18
(what rsl_rl/Isaac Lab export), input ``obs`` with a dynamic batch dimension,
output ``actions``; the metadata goes into ``metadata_props``. TorchScript:
``torch.jit.trace``, the metadata in the archive's ``extra/simeval.json``.
Each writer returns the file's bytes and a runner ``obs -> actions`` of
them, for the exporter's check against the policy before anything is written.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import torch

from simeval.atomic import write_atomically

INPUT, OUTPUT = "obs", "actions"  # rsl_rl's exporter's names (Isaac Lab's policy.onnx)
OPSET = 18
SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt"}

Runner = Callable[[torch.Tensor], torch.Tensor]


def to_onnx(module: torch.nn.Module, obs_dim: int, metadata: dict[str, str]) -> tuple[bytes, Runner]:
    """``module`` as an ONNX model's bytes, and an onnxruntime runner of them."""
    import onnx
    import onnxruntime as ort

    example = (torch.zeros(2, obs_dim),)
    with _quiet():
        program = torch.onnx.export(
            module,
            example,
            dynamo=True,
            opset_version=OPSET,
            input_names=[INPUT],
            output_names=[OUTPUT],
            dynamic_shapes={"obs": {0: torch.export.Dim("batch")}},
            verbose=False,
            optimize=True,
        )
    model = program.model_proto
    model.producer_name = "simeval"
    model.doc_string = "simeval.export: deterministic actor, observation normaliser folded in"
    onnx.helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return data, lambda obs: torch.from_numpy(session.run([OUTPUT], {INPUT: obs.numpy().astype(np.float32)})[0])


def to_torchscript(module: torch.nn.Module, obs_dim: int, metadata: dict[str, str]) -> tuple[bytes, Runner]:
    """``module`` traced to a TorchScript archive's bytes, and the traced module (what they hold)."""
    with _quiet():
        traced = torch.jit.trace(module, (torch.zeros(2, obs_dim),), check_trace=False)
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer, _extra_files={"simeval.json": json.dumps(metadata, sort_keys=True)})
    return buffer.getvalue(), traced


WRITERS = {"onnx": to_onnx, "torchscript": to_torchscript}


def atomic_write(path: str, data: bytes) -> None:
    """``data`` into ``path``, whole or not at all (simeval.atomic)."""
    write_atomically(path, lambda f: f.write(data))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters' progress lines, tracer warnings and notes on absent optional packages (torchvision)."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
