"""An --init-fn for the tests: records what the worker looked like, then runs simeval's Isaac Lab hook."""

from __future__ import annotations

import json
import os
import sys


def recording_isaaclab_hook(argv=None, video=False, device=None):
    torch_loaded = "torch" in sys.modules
    from simeval.envs.simulators.isaaclab import app
    from simeval.envs.simulators.isaaclab import env as isaaclab

    app.app_launcher(argv=argv, video=video, device=device)
    record = {"torch_loaded_before": torch_loaded, "pid": os.getpid(), "launcher_args": isaaclab.launcher_args()}
    with open(os.environ["SIMEVAL_HOOK_RECORD"], "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
