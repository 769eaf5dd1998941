"""Process start-up hooks (``--init-fn``) that must run before torch is imported.

A hook is called with the keyword arguments it accepts among ``argv`` (the
command-line flags simeval did not recognise, e.g. Isaac Lab's AppLauncher
flags), ``video`` and ``device``. Nothing here imports torch. A simulator's own hook lives in
its home (Isaac Lab's: :func:`simeval.envs.simulators.isaaclab.app.app_launcher`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from simeval.refs import resolve_callable


def call_hook(fn: Callable, **available: Any) -> Any:
    """Call ``fn`` with those of ``available`` it accepts (all of them if it takes **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**available)
    return fn(**{k: v for k, v in available.items() if k in params})


def worker_init(user_init: str | None = None, cuda_visible: str | None = None, **available: Any) -> None:
    """First thing an eval worker process runs: pin its GPU, then the user's hook.

    ``CUDA_VISIBLE_DEVICES`` must be set before CUDA initialises, which is why
    this runs before any torch import.
    """
    if cuda_visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible
    if user_init:
        call_hook(resolve_callable(user_init, "--init-fn"), **available)
