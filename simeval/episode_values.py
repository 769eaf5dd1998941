"""One episode's values as a method takes them, at their earlier place: :mod:`simeval.stats.running`."""

from __future__ import annotations

from simeval.stats.running import RunningInterval, bounds_of, checked

__all__ = ["RunningInterval", "bounds_of", "checked"]
