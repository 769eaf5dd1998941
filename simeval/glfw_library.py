"""glfw loads the library its wheel ships, found by path, never by a search from the working directory.

gymnasium's MuJoCo envs import glfw, which looks for ``libglfw.so`` in the working directory first
and checks each candidate by running ``python -c`` there: a ``struct.py`` or a ``libglfw.so`` in a
run directory would run in the launcher and in every worker. With ``PYGLFW_LIBRARY`` set, glfw
loads that one file and runs nothing; simeval sets it, at its import, to the library of the
installed glfw wheel (X11, or Wayland where ``XDG_SESSION_TYPE`` says so), unless the user set it.
Child processes inherit it.
"""

from __future__ import annotations

import importlib.util
import os
import sys

VARIABLE = "PYGLFW_LIBRARY"


def wheel_library() -> str | None:
    """The ``libglfw.so`` of the installed glfw wheel (glfw is not imported), or None."""
    if sys.platform in ("win32", "darwin"):
        return None
    try:
        spec = importlib.util.find_spec("glfw")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    variant = "wayland" if os.environ.get("XDG_SESSION_TYPE") == "wayland" else "x11"
    variant = os.environ.get("PYGLFW_LIBRARY_VARIANT", variant).lower()
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, variant, "libglfw.so")
        if os.path.isfile(path):
            return path
    return None


def pin() -> None:
    """Set ``PYGLFW_LIBRARY`` to the wheel's library, unless it is set or no glfw wheel is installed."""
    if os.environ.get(VARIABLE):
        return
    path = wheel_library()
    if path is not None:
        os.environ[VARIABLE] = path
