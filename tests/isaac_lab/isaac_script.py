"""What the Isaac Lab tests that run their own file as a script share (Isaac Lab keeps one simulation per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(script: str, out, timeout: float = 480) -> dict:
    """Run ``python script OUT.json`` in the Isaac Lab venv from the repo root; what it wrote to ``out``."""
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(
        [sys.executable, script, str(out)], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def error_of(fn) -> dict:
    """The type and message of what ``fn()`` raised ({"type": None, ...} if nothing)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (the test checks the type)
        return {"type": type(e).__name__, "message": str(e)}
    return {"type": None, "message": ""}
