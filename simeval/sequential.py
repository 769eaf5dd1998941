"""The anytime-valid sequences and the look plan at their earlier place: :mod:`simeval.stats.sequential`."""

from __future__ import annotations

from simeval.stats.sequential import (
    DESIGNS,
    GRID,
    RULES,
    STOPS,
    LookPlan,
    SequentialMcNemar,
    SequentialMean,
    SequentialPaired,
    t_mixture_radius,
    t_mixture_scale,
)
from simeval.stats.verdicts import VERDICTS, verdict_of

__all__ = [
    "DESIGNS",
    "GRID",
    "RULES",
    "STOPS",
    "VERDICTS",
    "LookPlan",
    "SequentialMcNemar",
    "SequentialMean",
    "SequentialPaired",
    "t_mixture_radius",
    "t_mixture_scale",
    "verdict_of",
]
