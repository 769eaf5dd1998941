"""tools/check_declared_imports.py (make lint): an import that pyproject.toml does not declare is one line."""

from __future__ import annotations

import subprocess
import sys

from launch_helpers import REPO

TOOL = f"{REPO}/tools/check_declared_imports.py"


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_the_declared_imports_hold_for_pyproject():
    proc = _check()
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_rich_left_out_of_the_core_is_one_line_per_file_naming_where_to_declare_it(tmp_path):
    """rich arrived only through other packages: a core-only install printed a traceback on every progress tick."""
    text = open(f"{REPO}/pyproject.toml").read()
    assert '    "rich>=13",\n' in text
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(text.replace('    "rich>=13",\n', "").replace('"protobuf>=3.20.2"]', "]", 1))
    proc = _check("--pyproject", str(pyproject))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "simeval/checkpoints/formats/onnx.py",
        "simeval/checkpoints/formats/onnx_net.py",
        "simeval/launch/progress.py",
        "simeval/report/text.py",
    ], proc.stdout
    assert "imports rich.console (rich), not a core dependency" in lines[2]
    assert "not in the onnx extra" in lines[0] and "google.protobuf" in lines[0]
