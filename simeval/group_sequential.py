"""Planned looks at their earlier place: :mod:`simeval.stats.group_sequential`."""

from __future__ import annotations

from simeval.stats.group_sequential import SPENDING, GroupSequentialMean, boundaries, spent

__all__ = ["SPENDING", "GroupSequentialMean", "boundaries", "spent"]
