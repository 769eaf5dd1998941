"""What the Isaac Lab tests that probe Isaac Lab in a script process share (Isaac Lab keeps one simulation per process).

Each such module (``SCRIPTED``) has a ``_probe(OUT.json)`` that builds its envs and writes what its tests read.
One process runs every module's probe, one after the other, so Isaac Lab's import and first env build are paid
once per session, not once per module:

    python isaac_script.py OUT_DIR MODULE...      # OUT_DIR/MODULE.json, or OUT_DIR/MODULE.error (a traceback)
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The modules whose probes share the session's script process, in the order it runs them.
SCRIPTED = (
    "test_cfg_overrides",
    "test_isaaclab_conditions",
    "test_isaaclab_contract",
    "test_tensor_rollout",
    "test_isaaclab",  # its cpu probes; last: its ray backend leaves a Ray cluster in the process
)


def run_scripts(out_dir, modules=SCRIPTED, timeout: float = 1300) -> dict[str, dict | str]:
    """Run every module's ``_probe`` in one Isaac Lab process; per module, what it wrote or its traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.path.dirname(HERE), HERE])}
    cmd = [sys.executable, os.path.abspath(__file__), str(out_dir), *modules]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    found: dict[str, dict | str] = {}
    for name in modules:
        result, error = os.path.join(out_dir, f"{name}.json"), os.path.join(out_dir, f"{name}.error")
        if os.path.exists(result):
            with open(result) as f:
                found[name] = json.load(f)
        elif os.path.exists(error):
            with open(error) as f:
                found[name] = f.read()
        else:  # the process died before this module's probe ended
            found[name] = f"exit {proc.returncode}, no result for {name}:\n{proc.stderr[-3000:]}"
    return found


def probe_of(results: dict[str, dict | str], module: str) -> dict:
    """``module``'s probe result from ``run_scripts``; the probe's traceback as the failure if it raised."""
    result = results[module]
    assert isinstance(result, dict), result[-3000:]
    return result


def error_of(fn) -> dict:
    """The type and message of what ``fn()`` raised ({"type": None, ...} if nothing)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (the test checks the type)
        return {"type": type(e).__name__, "message": str(e)}
    return {"type": None, "message": ""}


def _main(out_dir: str, modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)._probe(os.path.join(out_dir, f"{name}.json"))
        except Exception:  # noqa: BLE001  (the module's tests report it; the next module still runs)
            with open(os.path.join(out_dir, f"{name}.error"), "w") as f:
                f.write(traceback.format_exc())


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2:])
