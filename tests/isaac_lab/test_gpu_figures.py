"""``make gpu-check``'s command in its smoke mode: every GPU figure's part runs, on the CPU, tiny.

The parts use both venvs (the core one for the native and Warp envs, the Isaac Lab
one for Isaac Lab), as ``make gpu-check`` does on a GPU machine. What it prints in
smoke mode is no figure; that it runs end to end (and names its parts and logs) is.
"""

from __future__ import annotations

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORE_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

pytestmark = [pytest.mark.required, pytest.mark.timeout(1500)]


def test_the_gpu_figures_command_runs_every_part_in_smoke_mode(tmp_path):
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    cmd = [CORE_PYTHON, "benchmarks/gpu_figures.py", "--smoke", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1400, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "CPU smoke run: no GPU figure measured" in out
    lines = out.splitlines()
    header = max(i for i, line in enumerate(lines) if line.split()[:3] == ["part", "exit", "minutes"])
    table = [line.split()[:2] for line in lines[header + 1 :]]
    assert table == [["gpu_check", "0"], ["bench_gpu", "0"], ["bench_isaaclab", "0"], ["bench_warp_cameras", "0"]]
    for name in ("gpu_check", "bench_gpu", "bench_isaaclab", "bench_warp_cameras"):
        assert (tmp_path / f"{name}.txt").stat().st_size > 0
    assert "trigger_eval()" in out and "(b) trigger_eval" in out and "simeval / bare" in out
    assert "(c) examples/train_ppo.py" in out  # training alone, then beside evaluation on each backend
    assert "evaluation, process backend:" in out  # (the thread row runs on a GPU only)
    assert "MuJoCo Warp's batch renderer (track camera), Warp's CPU device" in out  # the camera row's part
