"""``"module:function"`` references (policy factories, init hooks) and the names that moved.

Checkpoints record their policy factory and profiles name their init hook as
such a string; those written by earlier versions name modules that have since
moved, and keep resolving through :data:`MOVED_MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

# Old module name -> current one. Checkpoints and profiles written before a move still name the old module.
MOVED_MODULES = {
    "simeval.launch.policies": "simeval.policies",
    "simeval.init": "simeval.hooks",
    "simeval.launch.hooks": "simeval.hooks",
}
# Old reference -> current one, for a function that moved to a module of another name.
MOVED_REFS = {
    "simeval.hooks:isaaclab_app_launcher": "simeval.envs.simulators.isaaclab.app:app_launcher",
}
# Old package prefix -> current one (every reader module moved with its package).
MOVED_PACKAGES = {"simeval.launch.formats.": "simeval.checkpoints.formats."}


def canonical_ref(ref: str) -> str:
    """A ``module:function`` reference under its current module name."""
    module_name, sep, attr = ref.partition(":")
    module_name = MOVED_MODULES.get(module_name, module_name)
    for old, new in MOVED_PACKAGES.items():
        if module_name.startswith(old):
            module_name = new + module_name[len(old) :]
    ref = module_name + sep + attr
    return MOVED_REFS.get(ref, ref)


def resolve_callable(ref: str | Callable, what: str) -> Callable:
    """Turn ``"package.module:function"`` into the function it names (a callable is returned as it is).

    Raises:
        ValueError: one line naming ``what`` and ``ref``, where it is not such a string, its module cannot be
            imported, or the module has no such callable.
    """
    if callable(ref):
        return ref
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise ValueError(f"{what} must be a callable or a 'module:function' string, got {ref!r}.")
    module_name, attr = canonical_ref(ref).split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"{what} {ref!r}: cannot import {module_name!r} ({exc}); install it, or fix the reference."
        ) from exc
    except ValueError:  # an empty or relative module name
        raise ValueError(f"{what} {ref!r}: {module_name!r} is not a module name.") from None
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{what} {ref!r}: module {module_name!r} has no attribute {attr!r}.") from None
    if not callable(fn):
        raise ValueError(f"{what} {ref!r} is not callable.")
    return fn
