"""simeval: evaluate robot-learning policies while they train.

``import simeval`` stays light on purpose: torch, tensordict, torchrl, ray and
mujoco are imported only where they are used, so an Isaac Lab worker can run
its ``init_fn`` (AppLauncher) before any of them loads. The public names below
are resolved on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from simeval import glfw_library

if TYPE_CHECKING:  # what the lazy names below resolve to (and the import graph lint-imports checks)
    from simeval.caller.evaluator import Evaluator, connect
    from simeval.caller.ray_eval_worker import RayEvalWorker
    from simeval.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
    from simeval.errors import EvalError

__version__ = "0.1.0"

glfw_library.pin()  # before anything imports glfw: it would search and run code in the working directory

_LAZY = {
    "Evaluator": "simeval.caller.evaluator",
    "connect": "simeval.caller.evaluator",
    "RayEvalWorker": "simeval.caller.ray_eval_worker",
    "EvalError": "simeval.errors",
    "save_checkpoint": "simeval.checkpoints",
    "load_checkpoint": "simeval.checkpoints",
    "CheckpointError": "simeval.checkpoints",
}

__all__ = [
    "Evaluator",
    "EvalError",
    "RayEvalWorker",
    "connect",
    "save_checkpoint",
    "load_checkpoint",
    "CheckpointError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simeval' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
