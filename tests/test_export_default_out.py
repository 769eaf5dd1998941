"""Where ``python -m simeval.export`` writes without ``--out``: beside the checkpoint, never inside the package."""

from __future__ import annotations

import os

from simeval.checkpoints.shipped import shipped_checkpoint
from simeval.export import default_out


def test_a_checkpoint_inside_the_package_is_exported_to_the_working_directory(tmp_path, monkeypatch):
    """The shipped checkpoint's export went to simeval/data/halfcheetah_ppo/exported/: into the installed package."""
    monkeypatch.chdir(tmp_path)
    shipped = shipped_checkpoint()
    stem = os.path.splitext(os.path.basename(shipped))[0]
    assert default_out(shipped, "onnx") == str(tmp_path / "exported" / f"{stem}.onnx")
    assert default_out(os.path.relpath(shipped), "torchscript") == str(tmp_path / "exported" / f"{stem}.pt")


def test_any_other_checkpoint_is_exported_beside_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "exp1"
    assert default_out(run / "model_99.pt", "onnx") == str(run / "exported" / "model_99.onnx")
    assert default_out("model_99.pt", "torchscript") == str(tmp_path / "exported" / "model_99.pt")
