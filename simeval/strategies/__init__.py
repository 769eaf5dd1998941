"""Strategies: what a run evaluates next, and when it stops, for the launcher's scheduler and the report alike.

A :class:`Strategy` proposes jobs from what is in, observes each result, says when it is
done, and replays itself from results lines (:mod:`simeval.strategies.base`). The launcher's
one dispatch loop (:mod:`simeval.launch.scheduler`) drives any of them; the report replays
them without the launcher (this package imports neither).

Built in: the fixed evaluation (:mod:`simeval.strategies.fixed`: ``--checkpoint``,
``--watch``, ``--suite``) and the look-by-look runs (:mod:`simeval.strategies.looks`:
``--until-decided``, ``--until-precise``) and the selection of the best checkpoint
(:mod:`simeval.strategies.selection`: ``--select-best``, a source-fed strategy) and the failure-region search
(:mod:`simeval.strategies.search`: ``--search``). A third party adds one by a
:class:`StrategyKind` in the entry-point group ``simeval.strategies``.
"""

from __future__ import annotations

import functools

from simeval.plugins import plugins
from simeval.strategies.base import (
    EpisodeError,
    Failure,
    Job,
    Replayed,
    Step,
    Strategy,
    StrategyKind,
    Write,
    values_of,
)
from simeval.strategies.fixed import Fixed, FixedStrategy
from simeval.strategies.looks import CellLooks, LookStrategy, UntilDecided, UntilPrecise
from simeval.strategies.search import Search, SearchPlan, SearchStrategy
from simeval.strategies.selection import SelectBest, SelectionPlan, SelectionStrategy

__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "CellLooks",
    "EpisodeError",
    "Failure",
    "FixedStrategy",
    "Job",
    "LookStrategy",
    "Replayed",
    "SearchPlan",
    "SearchStrategy",
    "SelectionPlan",
    "SelectionStrategy",
    "Step",
    "Strategy",
    "StrategyKind",
    "Write",
    "kind_for",
    "registered",
    "values_of",
]

ENTRY_POINT_GROUP = "simeval.strategies"
BUILT_IN: tuple[StrategyKind, ...] = (Fixed(), UntilDecided(), UntilPrecise(), SelectBest(), Search())


@functools.cache
def registered() -> tuple[StrategyKind, ...]:
    """Every strategy: the built-ins, then installed packages' ``simeval.strategies`` entry points, by name.

    An entry point names a :class:`StrategyKind` subclass (or instance); one that does not load, is not one,
    or takes a name already taken is a one-line ValueError naming it.
    """
    found: list[StrategyKind] = list(BUILT_IN)
    for where, kind in plugins(ENTRY_POINT_GROUP, StrategyKind):
        if kind.name in {k.name for k in found}:
            raise ValueError(f"{where}: the strategy name {kind.name!r} is taken.")
        found.append(kind)
    return tuple(found)


def kind_for(mode: str) -> StrategyKind:
    """The registered strategy that drives the launcher's ``mode``; ValueError naming the registered modes."""
    for kind in registered():
        if mode in kind.modes:
            return kind
    known = ", ".join(m for k in registered() for m in k.modes)
    raise ValueError(f"no registered strategy drives mode {mode!r} (registered: {known}).")
