"""A suite task's ``search:`` block: where the task's policy fails, searched as ``--search`` searches one env.

.. code-block:: yaml

    tasks:
      - env: HalfCheetah-v5
        conditions: {nominal: {}}     # optional beside a search (absent: the task has no cells)
        search:
          ranges: {body_mass_scale: [0.5, 3.0], push: [-3, 3]}   # one or two settings, each [LOW, HIGH]
          max_episodes: 1024          # the search's total
          resolution: 0.1             # optional: one width for all, or {setting: width} (default 1/16 of each)
          fail_below: 1880            # optional: an episode fails below this return (default: when it fails
                                      # the task's success)
          failure_rate: 0.5           # optional: the failure region is where P(fail) >= this
          evidence: 2                 # optional: then replay the 2 worst failed episodes with video

A suite run of one checkpoint (``--suite FILE --checkpoint CK``) evaluates the suite's cells into
``OUT/results.jsonl``, then searches each task that has a block into ``OUT/search/<ENV>/``
(:func:`simeval.launch.suite_run.run_searches`): a search run
directory (``results.jsonl`` with one line per round; ``python -m simeval.report OUT/search/<ENV>`` draws its
map). Each search plays the task's ``num_envs``, ``max_steps``, ``seed`` and what its policy sees, with the run's
``--look-every`` and ``--alpha``; the same command resumes the cells and every search. A block is data: its
settings are condition terms' names, checked as a condition's are, and nothing in it names code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.conditions import Condition
from simeval.launch.config.search import MAX_AXES, range_problem, resolution_problem, search_flag

if TYPE_CHECKING:
    from simeval.launch.config import LaunchConfig

_BLOCK = ("ranges", "max_episodes", "resolution", "fail_below", "failure_rate", "evidence")


@dataclass(frozen=True)
class SuiteSearch:
    """A task's ``search:`` block, checked as data."""

    ranges: tuple[tuple[str, float, float], ...]
    """(setting, low, high), one or two, in file order."""
    resolutions: tuple[float, ...]
    """The widest a region may be when refining stops, per range."""
    max_episodes: int
    fail_below: float | None = None
    failure_rate: float = 0.5
    evidence: int = 0

    def config(self, cfg: LaunchConfig) -> LaunchConfig:
        """``cfg`` (already the task's settings) as the ``--search`` run of this block."""
        return dataclasses.replace(
            cfg,
            suite=None,
            search=[search_flag(name, low, high) for name, low, high in self.ranges],
            resolution=[repr(r) for r in self.resolutions],
            fail_below=self.fail_below,
            failure_rate=self.failure_rate,
            max_episodes=self.max_episodes,
            evidence=self.evidence,
        )

    @property
    def condition(self) -> Condition:
        """The searched settings as a condition drawing each over its whole range (what the simulator must apply)."""
        return Condition.parse({name: [low, high] for name, low, high in self.ranges}, "search")


def parse_search(data: Any, where: str) -> SuiteSearch:
    """A task's ``search:`` block (``where``: ``tasks[i].search``); ValueError naming the field when it is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: a mapping with ranges and max_episodes, got {data!r:.80}.")
    for key in data:
        if key not in _BLOCK:
            raise ValueError(f"{where}.{key}: unknown field; a search block has {', '.join(_BLOCK)}.")
    ranges = _ranges(data.get("ranges"), f"{where}.ranges")
    total = data.get("max_episodes")
    if not isinstance(total, int) or isinstance(total, bool) or total < 1:
        raise ValueError(f"{where}.max_episodes: the search's total episodes, a whole number >= 1, got {total!r:.80}.")
    evidence = data.get("evidence", 0)
    if not isinstance(evidence, int) or isinstance(evidence, bool) or evidence < 0:
        raise ValueError(f"{where}.evidence: episodes to replay with video, a whole number >= 0, got {evidence!r:.80}.")
    rate = data.get("failure_rate", 0.5)
    if not _number(rate) or not 0 < rate < 1:
        raise ValueError(f"{where}.failure_rate: a probability in (0, 1), got {rate!r:.80}.")
    fail_below = data.get("fail_below")
    if fail_below is not None and not _number(fail_below):
        raise ValueError(f"{where}.fail_below: a finite return, got {fail_below!r:.80}.")
    return SuiteSearch(
        ranges=ranges,
        resolutions=_resolutions(data.get("resolution"), ranges, f"{where}.resolution"),
        max_episodes=total,
        fail_below=None if fail_below is None else float(fail_below),
        failure_rate=float(rate),
        evidence=evidence,
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _ranges(data: Any, where: str) -> tuple[tuple[str, float, float], ...]:
    """``{setting: [LOW, HIGH]}``, one or two settings, each a condition term's range."""
    if not isinstance(data, Mapping) or not 1 <= len(data) <= MAX_AXES:
        raise ValueError(f"{where}: one or two settings, each [LOW, HIGH] (e.g. {{body_mass_scale: [0.5, 3.0]}}).")
    out = []
    for name, span in data.items():
        pair = isinstance(span, list) and len(span) == 2
        if not pair or range_problem(*span):
            raise ValueError(f"{where}.{name}: [LOW, HIGH] with finite numbers LOW < HIGH, got {span!r:.80}.")
        out.append((str(name), float(span[0]), float(span[1])))
    Condition.parse({name: [low, high] for name, low, high in out}, where)  # the settings' names and values
    return tuple(out)


def _resolutions(data: Any, ranges: tuple[tuple[str, float, float], ...], where: str) -> tuple[float, ...]:
    """One width for every range, ``{setting: width}`` (a range left out: 1/16 of it), or None (1/16 of each)."""
    given = data if isinstance(data, Mapping) else {name: data for name, _, _ in ranges} if data is not None else {}
    names = [name for name, _, _ in ranges]
    for name in given:
        if name not in names:
            raise ValueError(f"{where}.{name}: not a searched setting ({', '.join(names)}).")
    out = []
    for name, low, high in ranges:
        value = given.get(name, (high - low) / 16)
        problem = resolution_problem(value, low, high)
        if problem:
            field = f"{where}.{name}" if isinstance(data, Mapping) else where
            raise ValueError(f"{field}: {problem}, got {value!r:.80}.")
        out.append(float(value))
    return tuple(out)
