"""Extension points found through entry points: one loader for every registry (simulators, policy kinds).

An installed package names a class (or an instance) in an entry-point group; loading it is
code the user chose to install, never something a data file names.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import TypeVar

T = TypeVar("T")


def plugins(group: str, base: type[T]) -> Iterator[tuple[str, T]]:
    """``(where, instance)`` for each entry point of ``group``, by entry name: a ``base`` subclass is instantiated.

    ``where`` names the entry point for messages. One that does not load, or is neither a
    ``base`` subclass nor an instance, is a one-line ValueError naming it.
    """
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        where = f"entry point {ep.name} = {ep.value} (group {group})"
        try:
            loaded = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin is one line, not a traceback
            raise ValueError(f"{where} does not load: {type(exc).__name__}: {exc}") from None
        found = loaded() if isinstance(loaded, type) and issubclass(loaded, base) else loaded
        if not isinstance(found, base):
            raise ValueError(f"{where} is not a simeval {base.__name__} subclass: {loaded!r}")
        yield where, found
