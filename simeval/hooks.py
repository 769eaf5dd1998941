"""Process start-up hooks (``--init-fn``) that must run before torch is imported.

A hook is called with the keyword arguments it accepts among ``argv`` (the
command-line flags simeval did not recognise, e.g. Isaac Lab's AppLauncher
flags), ``video`` and ``device``. Nothing here imports torch.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from simeval.refs import resolve_callable

_APP: Any = None  # the simulation app, kept alive for the life of the process


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


def isaaclab_app_launcher(argv: list[str] | None = None, video: bool = False, device: str | None = None) -> None:
    """Prepare Isaac Lab in this process, before torch is imported.

    With Isaac Sim installed this starts its simulation app headless through
    ``AppLauncher`` (cameras only when video is asked for). Kit-less (Isaac Lab
    3.x without Isaac Sim, Newton physics) there is no app to start: the
    launcher flags in ``argv`` are parsed and kept for the
    ``launch_simulation`` call that wraps env creation. ``argv`` may carry
    Isaac Lab's own flags (``--livestream``, ``--experience``, ``--visualizer``,
    ...); simeval's ``--device`` is forwarded.
    """
    if importlib.util.find_spec("isaaclab") is None:
        raise RuntimeError(
            f"--init-fn simeval.hooks:isaaclab_app_launcher needs Isaac Lab, not installed in {sys.executable}: "
            "run `make isaaclab` and use .venv-isaaclab/bin/python."
        )
    kit = importlib.util.find_spec("isaacsim") is not None
    if kit and "torch" in sys.modules:
        raise RuntimeError("torch was imported before Isaac Lab's AppLauncher: start the app first.")
    import argparse

    from isaaclab.app import AppLauncher

    parser = argparse.ArgumentParser(add_help=False)
    AppLauncher.add_app_launcher_args(parser)
    args, _ = parser.parse_known_args(list(argv or []))
    args.headless = True
    if video:
        args.enable_cameras = True
    if device is not None:
        args.device = device

    from simeval.envs import isaaclab as isaaclab_env  # its config checks load NumPy: only in a worker

    isaaclab_env.remember_launcher_args(vars(args))
    global _APP
    if kit:
        _APP = AppLauncher(args).app
