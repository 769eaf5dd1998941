"""The install a user gets on a fresh clone: ``pip install -e .`` without extras (make demo's), in ``.venv-core``.

``make test-core-install`` builds .venv-core and runs this file from .venv (the core session leaves it out): every
command below runs with .venv-core's Python, in a directory of its own. The launcher runs on a pseudo-terminal, so
rich's live bar is drawn as on a user's terminal (a core-only install once printed a ModuleNotFoundError traceback
on every progress tick); then the report and a TorchScript export of the run's checkpoint, and the features that
need an extra, which must say which one in one line (exit code 2).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORE_PY = REPO / ".venv-core" / "bin" / "python"
SHIPPED = REPO / "simeval" / "data" / "halfcheetah_ppo" / "step_001001472.pt"
# Long enough for the bar to be drawn several times (a progress tick every 0.5 s), a few seconds in all.
SMALL = ("--episodes", "8", "--num-envs", "2", "--max-steps", "300")

pytestmark = pytest.mark.skipif(
    not CORE_PY.exists(), reason=f"{CORE_PY.parent.parent.name} is missing: `make test-core-install` builds it"
)


def _env() -> dict[str, str]:
    """This environment without .venv's traces: the core venv's Python finds simeval through its own install."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}


def core(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """``.venv-core/bin/python ARGS`` in ``cwd``, its output captured (not a terminal)."""
    return subprocess.run([str(CORE_PY), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=_env())


def on_a_terminal(*args: str, cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """``.venv-core/bin/python ARGS`` with stdin, stdout and stderr on a new 120x40 pseudo-terminal: its exit code
    and everything it wrote there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([str(CORE_PY), *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=_env())
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
            pytest.fail(f"{' '.join(args)} ran past {timeout} s on the terminal")
        return proc.wait(30), b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """The launcher on a terminal: the shipped checkpoint, a few episodes, into OUT."""
    work = tmp_path_factory.mktemp("core-install")
    out = work / "out"
    started = time.monotonic()
    args = ("-m", "simeval.launch", "--checkpoint", str(SHIPPED), "--out", str(out), *SMALL)
    code, text = on_a_terminal(*args, cwd=work)
    return {"work": work, "out": out, "code": code, "text": text, "seconds": time.monotonic() - started}


def test_the_core_install_has_no_extra():
    """The venv is what a user's `pip install -e .` gives: none of the extras' packages is there."""
    code = "import importlib.util as u; print([m for m in ('ray', 'docker', 'onnx', 'msgpack') if u.find_spec(m)])"
    proc = core("-c", code, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_the_launcher_on_a_terminal_draws_its_bar_without_a_traceback(run):
    text = run["text"]
    assert run["code"] == 0, text[-3000:]
    assert "Traceback" not in text and "ModuleNotFoundError" not in text and "Error" not in text, text[-3000:]
    assert "env-steps/s" in text and "\x1b[" in text, text[-3000:]  # rich's bar: its rate column, control codes
    assert "summary: 1 evaluation(s), 0 failed" in text
    (record,) = [json.loads(line) for line in (run["out"] / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["metrics"]["num_episodes"] == 8


def test_the_report_reads_the_run(run):
    proc = core("-m", "simeval.report", str(run["out"]), cwd=run["work"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and (run["out"] / "eval_curve.png").exists()


def test_export_to_torchscript_needs_no_extra_and_writes_outside_the_package(run):
    proc = core("-m", "simeval.export", str(SHIPPED), "--to", "torchscript", cwd=run["work"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = run["work"] / "exported" / f"{SHIPPED.stem}.pt"
    assert proc.stdout.startswith(f"wrote {written} (torchscript;"), proc.stdout
    assert not (SHIPPED.parent / "exported").exists()


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ("-m", "simeval.export", str(SHIPPED), "--to", "onnx"),
            "simeval-export: error: --to onnx needs the onnx extra: pip install 'simeval[onnx]'",
        ),
        (
            ("-m", "simeval.serve_policy", str(SHIPPED), "--port", "0"),
            "simeval.serve_policy: error: python -m simeval.serve_policy needs the remote extra: "
            "pip install 'simeval[remote]'",
        ),
        (
            ("-m", "simeval.launch", "--policy-server", "ws://127.0.0.1:9", "--env", "HalfCheetah-v5", "--out", "o"),
            "simeval-launch: error: --policy-server needs the remote extra: pip install 'simeval[remote]'",
        ),
        (
            ("-m", "simeval.launch", "--launcher", "docker", "--image", "simeval", "--checkpoint", str(SHIPPED)),
            "simeval-launch: error: --launcher docker needs the docker extra: pip install 'simeval[docker]'",
        ),
    ],
    ids=["export-onnx", "serve-policy", "policy-server", "launcher-docker"],
)
def test_a_feature_that_needs_an_extra_says_which_in_one_line(args, line, tmp_path):
    proc = core(*args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [line], proc.stderr[-2000:]
    assert not list(tmp_path.iterdir())
