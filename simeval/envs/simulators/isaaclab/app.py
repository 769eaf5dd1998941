"""Isaac Lab's start-up hook (``--init-fn simeval.envs.simulators.isaaclab.app:app_launcher``).

It runs before torch is imported (:func:`simeval.hooks.worker_init` calls it first in a
worker process). Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

_APP: Any = None  # the simulation app, kept alive for the life of the process


def app_launcher(argv: list[str] | None = None, video: bool = False, device: str | None = None) -> None:
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
            f"--init-fn {__name__}:app_launcher needs Isaac Lab, not installed in {sys.executable}: "
            "run `make isaaclab` and use .venv-isaaclab/bin/python."
        )
    kit = importlib.util.find_spec("isaacsim") is not None
    if kit and "torch" in sys.modules:
        raise RuntimeError("torch was imported before Isaac Lab's AppLauncher: start the app first.")
    from isaaclab.app import AppLauncher

    parser = argparse.ArgumentParser(add_help=False)
    AppLauncher.add_app_launcher_args(parser)
    args, _ = parser.parse_known_args(list(argv or []))
    args.headless = True
    if video:
        args.enable_cameras = True
    if device is not None:
        args.device = device

    from simeval.envs.simulators.isaaclab import env as isaaclab_env  # its config checks load NumPy: only in a worker

    isaaclab_env.remember_launcher_args(vars(args))
    global _APP
    if kit:
        _APP = AppLauncher(args).app
