"""The fixed evaluation's names where they were: a source of weights x cells -> jobs -> the one scheduler.

A plain run (``--checkpoint``, ``--watch``) is a run of one nominal cell
(:class:`~simeval.launch.cells.Nominal`), a suite run (``--suite``) one of the suite's
cells: :class:`Jobs` (:class:`simeval.strategies.FixedStrategy`) says which, and
:class:`Pipeline` runs them on the launcher's one dispatch loop,
:class:`simeval.launch.scheduler.Scheduler` (which see, for resume, ``--until-step`` and
the watcher's unsettled files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simeval.launch.scheduler import Resumed, Scheduler, reached, resume
from simeval.strategies import FixedStrategy, Job

if TYPE_CHECKING:
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session

__all__ = ["Job", "Jobs", "Pipeline", "Resumed", "reached", "resume"]

Jobs = FixedStrategy
"""What a fixed run's jobs are (:class:`simeval.strategies.FixedStrategy`)."""


class Pipeline(Scheduler):
    """The scheduler driving a fixed run's jobs into one results file."""

    def __init__(self, session: Session, log: ResultsLog, jobs: FixedStrategy) -> None:
        super().__init__(session, {"": log}, jobs)
