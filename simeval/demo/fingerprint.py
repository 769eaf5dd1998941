"""The machine a demo table came from: the CPU model and the numpy, torch and mujoco versions.

HalfCheetah's returns over 1000 steps are chaotic: the last digits of the demo's
table can change with the CPU and its math libraries. ``make demo`` prints this
line under its table, README.md records the one its tables came from, and
tests/test_training.py compares every digit only where the two are the same.
"""

from __future__ import annotations

import platform
from importlib import metadata

LIBRARIES = ("numpy", "torch", "mujoco")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere ``platform.processor()``), or "unknown CPU"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def fingerprint() -> str:
    """``"<CPU model>, numpy <v>, torch <v>, mujoco <v>"``: what the demo's numbers depend on beside the code."""
    versions = []
    for name in LIBRARIES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} missing")
    return ", ".join([cpu_model(), *versions])
