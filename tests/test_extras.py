"""A feature used without its extra: one line naming the extra to install (simeval.extras), exit code 2.

Each command runs in a Python where the extra's modules cannot be imported (``sys.modules[name] = None``), as on a
core-only install (tests/test_core_install.py runs them on one).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from launch_helpers import REPO, _env

from simeval.checkpoints.shipped import shipped_checkpoint


def _without(modules: tuple[str, ...], entry: str, *argv: str) -> subprocess.CompletedProcess:
    """``entry``'s main(argv) (``module:main``) in a Python that cannot import ``modules``."""
    module, function = entry.split(":")
    code = (
        "import sys\n"
        f"for name in {modules!r}:\n    sys.modules[name] = None\n"
        f"from {module} import {function}\n"
        f"sys.exit({function}({list(argv)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env(None), cwd=REPO
    )


def test_require_extra_names_the_extra_and_how_to_install_it(monkeypatch):
    from simeval.extras import MissingExtra, require_extra

    require_extra(("json", "sqlite3"), "stdlib", "anything")  # all there: nothing said
    monkeypatch.setitem(sys.modules, "msgpack", None)
    with pytest.raises(MissingExtra) as info:
        require_extra(("json", "msgpack"), "remote", "--policy-server")
    assert str(info.value) == "--policy-server needs the remote extra: pip install 'simeval[remote]'"
    assert isinstance(info.value, ImportError)


@pytest.mark.parametrize(
    "modules, entry, argv, line",
    [
        (
            ("onnx",),
            "simeval.export.__main__:main",
            ("CKPT", "--to", "onnx", "--out", "OUT/a.onnx"),
            "simeval-export: error: --to onnx needs the onnx extra: pip install 'simeval[onnx]'",
        ),
        (
            ("msgpack",),
            "simeval.serve_policy:main",
            ("CKPT", "--port", "0"),
            "simeval.serve_policy: error: python -m simeval.serve_policy needs the remote extra: "
            "pip install 'simeval[remote]'",
        ),
        (
            ("websockets",),
            "simeval.launch:main",
            ("--policy-server", "ws://127.0.0.1:9", "--episodes", "2", "--out", "OUT/r"),
            "simeval-launch: error: --policy-server needs the remote extra: pip install 'simeval[remote]'",
        ),
        (
            ("docker",),
            "simeval.launch:main",
            ("--launcher", "docker", "--image", "simeval:test", "--checkpoint", "CKPT", "--out", "OUT/d"),
            "simeval-launch: error: --launcher docker needs the docker extra: pip install 'simeval[docker]'",
        ),
    ],
    ids=["export-onnx", "serve-policy", "policy-server", "launcher-docker"],
)
def test_a_feature_without_its_extra_is_one_line_naming_the_extra(modules, entry, argv, line, tmp_path):
    argv = [a.replace("CKPT", shipped_checkpoint()).replace("OUT", str(tmp_path)) for a in argv]
    proc = _without(modules, entry, *argv)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [line], proc.stderr[-2000:]
    assert not list(tmp_path.iterdir())  # refused before anything was written
