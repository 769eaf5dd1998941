"""Statistics over per-episode arrays: intervals, paired comparisons, across-task aggregates.

Pure functions of numbers (numpy and scipy, no torch), deterministic for a
given ``seed``. Three layers:

* one cell (a task under one condition): :func:`mean_ci`;
* two checkpoints on one cell, with common random numbers (episode ``j`` has
  the same seed for both, so the two arrays are *paired*): :func:`paired`
  (the return: one interval, one verdict) and :func:`mcnemar` (success), each row
  of a family at :func:`family_confidence`, an aggregate row by
  :func:`mean_of_intervals`; their sequential forms, for looks at any number of
  episodes, are :mod:`simeval.stats.sequential`'s (anytime) and :mod:`simeval.stats.group_sequential`'s
  (planned looks);
* across tasks, with the definitions of rliable (Agarwal et al. 2021, "Deep
  Reinforcement Learning at the Edge of the Statistical Precipice"):
  :func:`iqm`, :func:`aggregate`, :func:`aggregate_difference`,
  :func:`probability_of_improvement`, :func:`performance_profile`.

Every bootstrap here (one checkpoint's interval, rliable's aggregates) is a
percentile bootstrap. When every resample gives the same number (a single
episode, identical values) the interval collapses to the point estimate. NaN
or infinite inputs raise ``ValueError`` naming the argument.

One module per family: :mod:`~simeval.stats.intervals` (one cell, paired cells, families),
:mod:`~simeval.stats.success` (McNemar), :mod:`~simeval.stats.aggregates` (rliable's),
:mod:`~simeval.stats.sequential` and :mod:`~simeval.stats.group_sequential` (looks),
:mod:`~simeval.stats.selection` (the best of several checkpoints), :mod:`~simeval.stats.failure_map` (the
failure region of one or two condition axes, searched),
:mod:`~simeval.stats.running` (one episode's values as a method takes them),
:mod:`~simeval.stats.verdicts` (the verdicts and the rule that reads an interval) and
:mod:`~simeval.stats.methods` (the interval methods by the name a results line records). This
package re-exports their public names; ``simeval.sequential``, ``simeval.group_sequential`` and
``simeval.episode_values`` are the same names at their earlier places.
"""

from __future__ import annotations

from simeval.stats import _bootstrap  # noqa: F401 - the chunk size's home (test_stats patches it)
from simeval.stats._checks import Array, TaskScores
from simeval.stats.aggregates import (
    STATISTICS,
    Profile,
    aggregate,
    aggregate_difference,
    iqm,
    normalized,
    performance_profile,
    performance_profile_ci,
    probability_of_improvement,
)
from simeval.stats.failure_map import Boundary, FailureMap, Region, SearchAxis, UniformGrid
from simeval.stats.intervals import Interval, Paired, family_confidence, mean_ci, mean_of_intervals, paired
from simeval.stats.selection import SequentialSelection
from simeval.stats.sequential import SequentialMcNemar, SequentialMean, SequentialPaired
from simeval.stats.success import McNemar, mcnemar
from simeval.stats.verdicts import FEW_PAIRS, MIN_N, REASONS, SKEWED, VERDICTS, ZERO_VARIANCE, verdict_of

__all__ = [
    "FEW_PAIRS",
    "MIN_N",
    "REASONS",
    "SKEWED",
    "ZERO_VARIANCE",
    "STATISTICS",
    "VERDICTS",
    "Array",
    "Boundary",
    "FailureMap",
    "Interval",
    "McNemar",
    "Paired",
    "Profile",
    "Region",
    "SearchAxis",
    "SequentialMcNemar",
    "SequentialMean",
    "SequentialPaired",
    "SequentialSelection",
    "TaskScores",
    "UniformGrid",
    "aggregate",
    "aggregate_difference",
    "family_confidence",
    "iqm",
    "mcnemar",
    "mean_ci",
    "mean_of_intervals",
    "normalized",
    "paired",
    "performance_profile",
    "performance_profile_ci",
    "probability_of_improvement",
    "verdict_of",
]
