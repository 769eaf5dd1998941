"""A feature that needs an extra (pyproject.toml's optional dependencies) says which one, in one line.

Each feature checks once, where it starts (``--to onnx``, ``--policy-server``, ``python -m simeval.serve_policy``,
``--launcher docker``), before anything is loaded or written: :func:`require_extra`. Nothing is imported to check.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

REMOTE_MODULES = ("websockets", "msgpack")
"""What the ``remote`` extra brings: the policy server and ``--policy-server``'s client."""


class MissingExtra(ImportError):
    """A feature's modules are not installed: the message names the extra that brings them and the pip command."""


def require_extra(modules: str | Sequence[str], extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` unless every one of ``modules`` can be imported.

    Args:
        modules: the top-level modules the feature imports (e.g. ``("websockets", "msgpack")``).
        extra: the extra of pyproject.toml that brings them (e.g. ``remote``).
        feature: what the user asked for, as they asked it (e.g. ``--policy-server``).

    The message: ``FEATURE needs the EXTRA extra: pip install 'simeval[EXTRA]'``.
    """
    names = [modules] if isinstance(modules, str) else list(modules)
    missing = [name for name in names if not _importable(name)]
    if missing:
        raise MissingExtra(f"{feature} needs the {extra} extra: pip install 'simeval[{extra}]'", name=missing[0])


def _importable(name: str) -> bool:
    """Whether ``import name`` would find the module (a module set to None in ``sys.modules`` is not found)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
