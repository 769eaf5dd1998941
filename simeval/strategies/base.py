"""What a strategy is: it proposes jobs, observes their results, says when it is done (``finished``), and replays
itself.

A :class:`Strategy` decides *what to evaluate next*; the launcher's scheduler
(:mod:`simeval.launch.scheduler`) decides *where and when*: it holds the session's
evaluator slots, the attempts journal, the results files, resume, progress, the summary
and signals, and drives any strategy through the four methods below. The interface is
small on purpose, so that the report can replay a strategy without the launcher:

- a :class:`Job` is which checkpoint (``ck``, ``name``, and ``side``: which of the run's
  checkpoints, ``"A"``/``"B"`` of a comparison or ``""``), on which cell (the launcher's
  cell object: the strategy reads its ``key``), at which look and look seed (None for a
  fixed evaluation);
- a result is the round's result dict (``eval/...`` keys) or, on a replay, the results
  line written of it (the same keys without the prefix): :func:`values_of` reads both.

:meth:`Strategy.observe` and :meth:`Strategy.failed` answer a :class:`Step`: the lines to
write (:class:`Write`, :class:`Failure`), and a message to print. A strategy's replay is
the live path fed with lines, so what a resume or the report rebuilds is what the run
decided, by construction.

A third party registers a strategy by a :class:`StrategyKind` subclass (or instance) in the
entry-point group ``simeval.strategies`` (code the user installed; a data file never names
one): see docs/extending.md, "Adding a strategy".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from simeval.records import plain

_SUCCESS = ("episode_success_once", "episode_success_at_end")


@dataclass(eq=False)
class Job:
    """One round to evaluate: a checkpoint on a cell (at a look, with its seed, for a look-by-look strategy).

    A job is itself only (``eq=False``): two rounds of one file on one cell (an A/A run's A and B) are two jobs, and
    comparing them field by field would compare the checkpoints' weights."""

    ck: Any
    """The checkpoint (a :class:`simeval.checkpoints.Checkpoint`)."""
    cell: Any
    """The launcher's cell: ``key`` (a tuple), ``label(name)``, ``context()``, ``config(cfg)``, ``check(result)``."""
    name: str
    """The checkpoint's name in lines and messages."""
    side: str = ""
    """Which of the run's checkpoints: ``"A"`` or ``"B"`` of a comparison, ``""`` otherwise."""
    look: int | None = None
    """The look (from 0), None for a fixed evaluation."""
    seed: int | None = None
    """The round's own seed (the look's), None: the cell's."""
    owner: Any = None
    """The strategy's own handle on the job (a cell's looks), opaque to the scheduler."""
    started: float = 0.0
    attempt: int = 1
    """How many times this round was started, in this launch and before (the attempts journal)."""

    @property
    def key(self) -> tuple:
        """(checkpoint name, *cell key): what a resume skips and the attempts journal counts."""
        return (self.name, *self.cell.key)


@dataclass(frozen=True)
class Write:
    """A round whose ok line is written now: its result, how long it took, the slot as it was, its look's fields."""

    job: Job
    result: dict
    seconds: float
    slot: Any
    look: tuple[int, dict, str | None] | None = None
    """(look, look plan as data, stop or None) for a look's line; None for a fixed evaluation's."""
    fields: dict = field(default_factory=dict)
    """What else the line carries (a selection run's ``look`` and ``selection``)."""


@dataclass(frozen=True)
class Failure:
    """A round whose failed line is written now (``error`` its cause: its one line is the line's ``error``)."""

    job: Job
    error: BaseException
    fields: dict = field(default_factory=dict)
    """What the failed line adds to the cell's fields (a look's ``look`` and ``sequential``)."""


@dataclass
class Step:
    """What the scheduler does after an observation: write these lines (in order), then print ``message``."""

    writes: list[Write] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    message: str | None = None


class EpisodeError(ValueError):
    """A round's episodes cannot be taken: a return outside the task's bounds, or A and B ran other episodes.

    The launcher records it as it records a return outside the bounds (``error_kind: "evaluation"``).
    """


class Strategy(ABC):
    """Which rounds a run evaluates, in which order, and when it stops (see the module docstring)."""

    name: ClassVar[str]
    """The strategy's registered name."""
    itemized: ClassVar[bool] = False
    """Whether the run prints each round's start and result and ends with the summary of rounds (a fixed
    evaluation); else it prints the strategy's own progress lines and :meth:`table`."""
    noun: ClassVar[str] = "round(s)"
    """What the stop message calls the running rounds."""
    keep_going: bool = True
    """Record a failed round and go on; False: it is the run's error."""
    backlog: bool = False
    """A source-fed strategy: take every checkpoint the source has now, not one per idle slot."""
    closing: bool = False
    """A source-fed strategy's resume found ``--until-step`` reached already."""
    scope: dict = {}  # noqa: RUF012 - read only: the fields of a line about a whole checkpoint file

    def jobs_for(self, ck: Any, name: str) -> list[Job]:
        """A source-fed strategy takes checkpoint ``ck`` (named ``name``) from the run's source: the jobs to queue.

        The default refuses: the strategy proposes its own jobs (:meth:`propose`) and no source feeds it.
        """
        raise TypeError(f"a source of checkpoints feeds a source-fed strategy, not {type(self).__name__}")

    @property
    def accepting(self) -> bool:
        """Whether it takes more checkpoints from the source (False: the run ends once its jobs are done)."""
        return True

    @abstractmethod
    def propose(self) -> list[Job]:
        """The rounds to queue now, given what is in (each proposed once)."""

    @abstractmethod
    def observe(self, job: Job, result: Mapping[str, Any], seconds: float = 0.0, slot: Any = None) -> Step:
        """Take ``job``'s result (a round's result dict, or its line on a replay); what to write and print."""

    @abstractmethod
    def failed(self, job: Job, error: BaseException) -> Step:
        """``job`` could not be evaluated (``error``'s first line says why); what to write and print."""

    @property
    @abstractmethod
    def finished(self) -> bool:
        """It is done: nothing is left to propose, ever (a source-driven strategy: True, the source decides)."""

    def wants(self, job: Job) -> bool:
        """Whether a queued ``job`` is still to be evaluated (a cell that failed drops its queued rounds)."""
        return True

    def replay(self, lines: Mapping[str, list[dict]], retry_failed: bool = False) -> Replayed:
        """Feed the lines a run wrote (side -> its file's lines, in file order) back through :meth:`observe`.

        The default replays nothing (a strategy whose rounds are independent resumes by skipping what is done).
        """
        return Replayed()

    def table(self) -> str:
        """What the run prints at its end when it is not :attr:`itemized`."""
        return ""


@dataclass
class Replayed:
    """What a replay found: rounds taken again, failed ones retried or left as they are."""

    looks: int = 0
    stopped: int = 0
    retried: int = 0
    left: int = 0


class StrategyKind(ABC):
    """A registered strategy: its name, a line about it, and how the launcher's modes map to it.

    An entry point of the group ``simeval.strategies`` names a subclass (instantiated without
    arguments) or an instance.
    """

    name: ClassVar[str]
    """Unique among the registered strategies."""
    summary: ClassVar[str]
    """One line: what question the strategy answers."""
    modes: ClassVar[tuple[str, ...]]
    """The launcher modes it drives (``fixed``, ``watch``, ``suite``, ``until-decided``, ``until-precise``, ...)."""

    @property
    @abstractmethod
    def strategy(self) -> type[Strategy]:
        """The :class:`Strategy` subclass a run of this kind builds."""


def values_of(data: Mapping[str, Any]) -> tuple[list[float], list[int] | None, bool]:
    """(returns, episode seeds, whether success is recorded) of a round's result (``eval/`` keys) or its line."""
    prefix = "eval/" if "eval/episode_returns" in data else ""
    returns = [float(v) for v in plain(data.get(f"{prefix}episode_returns")) or []]
    seeds = data.get(f"{prefix}episode_seeds")
    seeds = None if seeds is None else [int(v) for v in plain(seeds)]
    success = any(data.get(f"{prefix}{key}") is not None for key in _SUCCESS)
    return returns, seeds, success
