"""Which OpenGL MuJoCo renders headless with: EGL, else OSMesa; chosen before MuJoCo is imported.

MuJoCo picks its OpenGL platform from ``MUJOCO_GL`` once, when it is imported (and torchrl
imports it when torchrl is imported), so the choice is made at the start of a process that
will render, from the libraries the machine has, never after.
"""

from __future__ import annotations

import ctypes.util
import os

# MUJOCO_GL value -> the shared library it loads.
PLATFORMS = (("egl", "EGL"), ("osmesa", "OSMesa"))


def headless_gl() -> dict[str, str]:
    """``{"MUJOCO_GL": ...}`` for headless frames: the user's choice, else EGL, else OSMesa.

    Raises:
        ValueError: neither library is installed (one line saying what to install).
    """
    if os.environ.get("MUJOCO_GL"):
        return {"MUJOCO_GL": os.environ["MUJOCO_GL"]}
    for value, library in PLATFORMS:
        if ctypes.util.find_library(library):
            return {"MUJOCO_GL": value}
    raise ValueError(
        "MuJoCo cannot render headless here: neither libEGL nor libOSMesa is installed "
        "(apt-get install libegl1, or libosmesa6), and MUJOCO_GL is not set."
    )
