"""The machine a demo table came from: the CPU model and the numpy, torch and mujoco versions.

HalfCheetah's returns over 1000 steps are chaotic: the last digits of the demo's
table can change with the CPU and its math libraries. ``make demo`` prints this
line under its table, README.md records the one its tables came from, and
tests/test_training.py compares every digit only where the two are the same.
"""

from __future__ import annotations

from importlib import metadata

from simeval.machine import cpu_model

LIBRARIES = ("numpy", "torch", "mujoco")


def fingerprint() -> str:
    """``"<CPU model>, numpy <v>, torch <v>, mujoco <v>"``: what the demo's numbers depend on beside the code."""
    versions = []
    for name in LIBRARIES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} missing")
    return ", ".join([cpu_model(), *versions])
