"""The fixed evaluation: every checkpoint a source gives, on each of its cells, once (``--checkpoint``, ``--watch``,
``--suite``).

Its rounds are independent: each checkpoint brings a job per cell not done yet
(:meth:`FixedStrategy.jobs_for`), and each result is one line, written the moment it is in.
It proposes nothing by itself (:meth:`propose`): the scheduler takes checkpoints from the
run's source and asks for their jobs; a resume skips the job keys already in the results file
(:attr:`done`, found by :func:`simeval.launch.scheduler.resume`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from simeval.strategies.base import Failure, Job, Step, Strategy, StrategyKind, Write


@dataclass
class FixedStrategy(Strategy):
    """What a fixed run's jobs are: the cells of each checkpoint, and what is done already."""

    cells_for: Callable[[Any, str], list]
    """The cells of a checkpoint (its name given); empty when none fits it (the function says why)."""
    done: set = field(default_factory=set)
    """Job keys a resume does not evaluate again."""
    scope: dict = field(default_factory=dict)
    """The fields of a line about a whole checkpoint file (a suite's name)."""
    noun: str = "evaluation(s)"
    """What the stop message calls the running jobs."""
    backlog: bool = False
    """Queue every checkpoint the source has now (a suite: each slot finds jobs of its own cell)."""
    keep_going: bool = True
    """Record a failed job and go on; False: it is the run's error (``--checkpoint`` alone: exit 2)."""
    closing: bool = False
    """results.jsonl already reached ``--until-step`` (a resume)."""

    name: ClassVar[str] = "fixed"
    itemized: ClassVar[bool] = True

    def jobs_for(self, ck: Any, name: str) -> list[Job]:
        """The jobs of checkpoint ``ck`` (named ``name``) not done yet, one per cell."""
        return [Job(ck, c, name) for c in self.cells_for(ck, name) if (name, *c.key) not in self.done]

    def propose(self) -> list[Job]:
        """Nothing by itself: its jobs come with the source's checkpoints (:meth:`jobs_for`)."""
        return []

    def observe(self, job: Job, result: Mapping[str, Any], seconds: float = 0.0, slot: Any = None) -> Step:
        """The round's line; a return outside the cell's declared bounds fails the cell instead."""
        try:
            job.cell.check(result)
        except ValueError as exc:
            return self.failed(job, exc)
        self.done.add(job.key)
        return Step(writes=[Write(job, dict(result), seconds, slot)])

    def failed(self, job: Job, error: BaseException) -> Step:
        """The round's failed line; it is done (a resume retries it where its line says so)."""
        self.done.add(job.key)
        return Step(failures=[Failure(job, error)])

    @property
    def finished(self) -> bool:
        """Always: the source decides when a fixed run ends."""
        return True


class Fixed(StrategyKind):
    """The built-in fixed evaluation."""

    name: ClassVar[str] = "fixed"
    summary: ClassVar[str] = "every checkpoint on every cell, a set number of episodes each"
    modes: ClassVar[tuple[str, ...]] = ("checkpoint", "policy-server", "watch", "suite")

    @property
    def strategy(self) -> type[Strategy]:
        """:class:`FixedStrategy`."""
        return FixedStrategy
