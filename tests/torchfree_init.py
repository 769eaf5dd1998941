"""An init_fn module as an Isaac Lab user would write it: nothing heavy at import."""

import os
import sys


def torch_free_init() -> None:
    """Fails when torch was imported before it ran (as AppLauncher would)."""
    if "torch" in sys.modules:
        raise RuntimeError("torch was imported before init_fn")
    os.environ["SIMEVAL_INIT_RAN"] = "1"
