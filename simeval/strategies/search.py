"""SearchStrategy: where does a policy fail? An adaptive search over one or two condition ranges (``--search``).

Each searched setting is an axis ``[low, high]``; the map (:class:`simeval.stats.failure_map.FailureMap`) holds
regions, boxes of the axes, each with an anytime-valid interval for its mean failure probability under uniform
draws within it. A round is ``round_episodes`` episodes of the one checkpoint on one region: the region's bounds
are the cell's condition for that round, a ``[low, high]`` range drawn per episode from the episode's own seed
(:mod:`simeval.conditions`), so every episode records its drawn values (``episode_conditions``), and whether it
failed (its return below ``fail_below``, or no success where the task records success) is all the map takes.
The map proposes the regions that want a round; a region that straddles the level splits, its episodes going to
its children; the search stops when every region is decided or at the resolution, or when the next round would
pass ``max_episodes``.

**Seeds.** Round ``v`` of region ``key`` is seeded :func:`region_seed` ``(task seed, key, v)``: a hash of the
three, the same for every checkpoint, so two checkpoints searched the same way meet the same episodes, and no
two rounds of a search share a seed.

**Lines.** One ok line per round: the cell's fields (its ``condition_settings`` the region's ranges), ``search``
(the plan, :meth:`SearchPlan.as_data`), ``region`` (``key``, ``bounds``, ``round``), and on the last one
``stop`` and ``map`` (:meth:`FailureMap.as_data`). A replay feeds the lines back through :meth:`observe`, in file
order: the map it rebuilds is the map the run drew (the report does the same).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simeval.records import plain
from simeval.stats.failure_map import FailureMap, SearchAxis, key_text
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

_SUCCESS_KEYS = ("episode_success_once", "episode_success_at_end")
_SEARCH_TAG = 0x5EA7C4


def region_seed(seed: int, key: tuple[int, ...], visit: int) -> int:
    """The seed of round ``visit`` (from 0) of region ``key`` in a search whose task is seeded ``seed`` (a uint32)."""
    words = [int(seed) & 0xFFFFFFFF, _SEARCH_TAG, len(key), *(int(k) for k in key), int(visit)]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint32)[0])


@dataclass(frozen=True)
class SearchPlan:
    """What a search is: its axes, what a failed episode is, the level, the error, and how it spends episodes."""

    axes: tuple[SearchAxis, ...]
    fail_below: float | None
    """An episode fails when its return is below this; None: when it does not succeed."""
    failure_rate: float = 0.5
    confidence: float = 0.95
    round_episodes: int = 16
    max_episodes: int = 1024
    initial_cells: int = 4
    max_region_episodes: int = 128

    def new_map(self) -> FailureMap:
        """An empty map of this plan."""
        return FailureMap(
            self.axes,
            failure_rate=self.failure_rate,
            confidence=self.confidence,
            round_episodes=self.round_episodes,
            initial_cells=self.initial_cells,
            max_region_episodes=self.max_region_episodes,
        )

    @property
    def failure(self) -> str:
        """What a failed episode is, in words."""
        return "no success" if self.fail_below is None else f"return < {self.fail_below:g}"

    def as_data(self) -> dict:
        """The plan as a results line records it."""
        return {
            "axes": [{"name": a.name, "low": a.low, "high": a.high, "resolution": a.resolution} for a in self.axes],
            "fail_below": self.fail_below,
            "failure_rate": self.failure_rate,
            "confidence": self.confidence,
            "round_episodes": self.round_episodes,
            "max_episodes": self.max_episodes,
            "initial_cells": self.initial_cells,
            "max_region_episodes": self.max_region_episodes,
        }

    @classmethod
    def from_data(cls, data: Any, where: str = "search") -> SearchPlan:
        """A plan from a line's ``search`` field; ValueError (one line, starting with ``where``) when malformed."""
        if not isinstance(data, Mapping) or not isinstance(data.get("axes"), list):
            raise ValueError(f"{where}: not a search plan: {data!r:.80}")
        try:
            axes = tuple(SearchAxis(a["name"], a["low"], a["high"], a["resolution"]) for a in data["axes"])
            fields = {k: data[k] for k in ("failure_rate", "confidence", "round_episodes", "max_episodes",
                                           "initial_cells", "max_region_episodes")}  # fmt: skip
            return cls(axes, data.get("fail_below"), **fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: not a search plan ({type(exc).__name__}: {exc}).") from None


class SearchStrategy(Strategy):
    """The failure-region search of one checkpoint (see the module docstring).

    Args:
        ck: the checkpoint searched.
        name: its name in lines and messages.
        plan: the search.
        cell_for: the launcher's cell of a round: ``(region key, its bounds, round, seed) -> cell``.
        seed: the task's seed (the rounds' seeds derive from it).
        parallel: rounds in flight at once (the session's slots).
    """

    name = "search"
    noun = "round(s)"
    keep_going = False

    def __init__(
        self,
        ck: Any,
        name: str,
        plan: SearchPlan,
        cell_for: Callable[[tuple[int, ...], dict, int, int], Any],
        seed: int,
        parallel: int = 1,
    ) -> None:
        self.ck, self.ck_name, self.plan, self.cell_for = ck, name, plan, cell_for
        self.seed, self.parallel = int(seed), max(1, int(parallel))
        self.map = plan.new_map()
        self.rounds: dict[tuple[int, ...], int] = {}  # region key -> rounds proposed on it
        self.pending: dict[tuple[int, ...], Job] = {}
        self.stop: str | None = None

    # -- the strategy -------------------------------------------------------
    def propose(self) -> list[Job]:
        """The regions that want a round, as many as slots are free, while the budget holds another round."""
        if self.stop is not None:
            return []
        room = (self.plan.max_episodes - self.map.episodes) // self.plan.round_episodes - len(self.pending)
        free = min(self.parallel - len(self.pending), room)
        if free <= 0:
            return []
        jobs = []
        for key in self.map.next_regions(free, pending=list(self.pending)):
            job = self._job(key)
            self.pending[key] = job
            jobs.append(job)
        return jobs

    def _job(self, key: tuple[int, ...]) -> Job:
        visit = self.rounds.get(key, 0)
        self.rounds[key] = visit + 1
        seed = region_seed(self.seed, key, visit)
        cell = self.cell_for(key, self.map.bounds(key), visit, seed)
        return Job(self.ck, cell, self.ck_name, look=visit, seed=seed, owner=key)

    def observe(self, job: Job, result: Mapping[str, Any], seconds: float = 0.0, slot: Any = None) -> Step:
        """Take a round: each episode's drawn values and whether it failed go to the map; the round's line."""
        key = tuple(job.owner)
        self.pending.pop(key, None)
        values, failed = self.episodes_of(result, job.cell.label(job.name))
        self.map.observe(key, values, failed)
        self._update_stop()
        fields = {
            "search": self.plan.as_data(),
            "region": {"key": list(key), "bounds": _bounds_data(job.cell.bounds), "round": job.look},
        }
        if self.finished:
            fields.update(stop=self.stop, map=self.map.as_data())
        message = (
            f"{self.ck_name} region {box_text(job.cell.bounds)} round {job.look}: {sum(failed)}/{len(failed)} "
            f"failed; {self.map.episodes} episode(s), {self._counts()}"
        )
        return Step(writes=[Write(job, dict(result), seconds, slot, fields=fields)], message=message)

    def _update_stop(self) -> None:
        if self.stop is not None:
            return
        finished = self.map.finished
        if finished is not None and not self.pending:
            self.stop = finished
        elif self.plan.max_episodes - self.map.episodes < self.plan.round_episodes and not self.pending:
            self.stop = "budget"

    def failed(self, job: Job, error: BaseException) -> Step:
        """A round that could not run is the run's error (:attr:`keep_going` False): its failed line."""
        self.pending.pop(tuple(job.owner), None)
        self.stop = "failed"
        return Step(failures=[Failure(job, error, fields={"search": self.plan.as_data()})])

    @property
    def finished(self) -> bool:
        """The map is finished, the budget spent, or a round failed; nothing in flight."""
        return self.stop is not None and not self.pending

    def episodes_of(self, result: Mapping[str, Any], where: str) -> tuple[list[dict[str, float]], list[bool]]:
        """(each episode's drawn values of the axes, whether it failed) of a round's result or line; an
        :class:`EpisodeError` naming ``where`` when the round did not record what the search needs."""
        returns, _, has_success = values_of(result)
        prefix = "eval/" if "eval/episode_returns" in result else ""
        names = [a.name for a in self.plan.axes]
        if prefix:
            drawn = {n: plain(result.get(f"eval/episode_conditions/{n}")) for n in names}
        else:
            recorded = result.get("episode_conditions") or {}
            drawn = {n: recorded.get(n) for n in names}
        missing = [n for n, v in drawn.items() if v is None or len(v) != len(returns)]
        if missing:
            raise EpisodeError(
                f"{where}: the round did not record each episode's {missing[0]} "
                "(episode_conditions): a searched setting must be drawn per episode."
            )
        values = [{n: float(drawn[n][i]) for n in names} for i in range(len(returns))]
        if self.plan.fail_below is not None:
            return values, [not (r >= self.plan.fail_below) for r in returns]
        if not has_success:
            raise EpisodeError(
                f"{where}: the task records no success, so a failed episode is not defined: "
                "give --fail-below R (an episode fails when its return is below R)."
            )
        key = next(k for k in _SUCCESS_KEYS if result.get(f"{prefix}{k}") is not None)
        success = [float(v) for v in plain(result[f"{prefix}{key}"])]
        return values, [s < 0.5 for s in success]

    # -- replay and the table ---------------------------------------------------------
    def replay(self, lines: Mapping[str, list[dict]], retry_failed: bool = False) -> Replayed:
        """Feed the ok lines of this search (in file order) back through :meth:`observe`; a failed line is left
        (the same command evaluates that round again)."""
        found = Replayed()
        for record in lines.get("", []):
            if record.get("status") != "ok" or "region" not in record:
                if record.get("status") == "failed":
                    found.retried += 1
                continue
            region = record["region"]
            key = tuple(int(k) for k in region["key"])
            job = self._job_replayed(key, int(region["round"]))
            self.observe(job, record)
            found.looks += 1
        self.stop = None if self.stop == "failed" else self.stop
        found.stopped = int(self.finished)
        return found

    def _job_replayed(self, key: tuple[int, ...], visit: int) -> Job:
        expected = self.rounds.get(key, 0)
        if visit != expected:
            raise ValueError(
                f"a line of region {key_text(key)} round {visit} is not the round this search would run next "
                f"(round {expected}): the lines are not this search's, in its order."
            )
        job = self._job(key)
        self.pending[key] = job
        return job

    def worst_failures(self, lines: list[tuple[int, Mapping[str, Any]]], k: int) -> list[tuple[int, int, float]]:
        """The ``k`` lowest-returning failed episodes inside the map's ``fail`` regions (where none is decided yet:
        inside the ``uncertain`` ones whose failure rate is at least the level), as (line number, index in the line,
        return), from the run's numbered lines (the evidence a run replays)."""
        regions = self.map.regions()
        failing = [r for r in regions if r.klass == "fail"] or [
            r for r in regions if r.klass == "uncertain" and r.n and r.estimate >= self.plan.failure_rate
        ]
        found = []
        for number, record in lines:
            if record.get("status") != "ok" or "region" not in record:
                continue
            values, failed = self.episodes_of(record, f"line {number}")
            returns = record["episode_returns"]
            for i, (drawn, bad) in enumerate(zip(values, failed, strict=True)):
                inside = any(all(lo <= drawn[n] <= hi for n, (lo, hi) in r.bounds.items()) for r in failing)
                if bad and inside:
                    found.append((float(returns[i]), number, i))
        return [(number, i, ret) for ret, number, i in sorted(found)[: max(0, int(k))]]

    def _counts(self) -> str:
        regions = self.map.regions()
        counts = {k: sum(r.klass == k for r in regions) for k in ("fail", "uncertain", "pass")}
        return ", ".join(f"{v} {k}" for k, v in counts.items())

    def table(self) -> str:
        """The map as the run prints it at its end (:func:`map_table`)."""
        return map_table(self.map.as_data(), self.plan, self.stop, self.ck_name)


def _bounds_data(bounds: Mapping[str, tuple[float, float]]) -> dict[str, list[float]]:
    return {name: [float(lo), float(hi)] for name, (lo, hi) in bounds.items()}


def box_text(bounds: Mapping[str, Any]) -> str:
    """A region's bounds as messages, tables and pages show them: ``mass [0.5, 1.125] x push [0, 2.5]``."""
    return " x ".join(f"{name} [{lo:.4g}, {hi:.4g}]" for name, (lo, hi) in bounds.items())


def map_table(data: Mapping[str, Any], plan: SearchPlan, stop: str | None, name: str) -> str:
    """A map (:meth:`FailureMap.as_data`) as text: the regions, each with its episodes, estimate, interval and
    class; the boundary (one axis) and the worst region; what failure means and what the classes guarantee."""
    regions = data["regions"]
    rows = [
        f"failure map of {name}: failure = {plan.failure}, failure region = P(fail) >= {plan.failure_rate:g}; "
        f"classes hold together with {plan.confidence:.0%} confidence over every region and round",
        f"{'region':<40} {'episodes':>8} {'failed':>7} {'rate':>6}  {'interval':<16} class",
    ]
    for r in regions:
        box = box_text(r["bounds"])
        rate = "-" if r["estimate"] is None else f"{r['estimate']:.2f}"
        rows.append(
            f"{box:<40} {r['n']:>8} {r['failures']:>7} {rate:>6}  [{r['low']:.2f}, {r['high']:.2f}]{'':<4} "
            f"{r['class']}"
        )
    boundary = data.get("boundary")
    if boundary is not None:
        axis = plan.axes[0].name
        if boundary.get("low") is not None:
            rows.append(
                f"boundary: {axis} in [{boundary['low']:.4g}, {boundary['high']:.4g}] (failure {boundary['direction']} "
                f"along {axis}; assumes the failure probability is monotone along it)"
            )
        else:
            rows.append(f"boundary: none ({boundary.get('reason')})")
    for w in (r for r in regions if r["key"] == data.get("worst")):
        rows.append(f"worst region: {box_text(w['bounds'])} ({w['failures']}/{w['n']} failed)")
    spent = data.get("episodes", 0)
    why = {"budget": "the budget (--max-episodes) is spent", None: "not finished"}.get(stop, stop)
    rows.append(f"{spent} episode(s) of {plan.max_episodes}; stopped: {why}")
    if any(math.isinf(float(r["high"])) or r["n"] == 0 for r in regions):
        rows.append("a region without episodes has no interval: it is uncertain")
    return "\n".join(rows)


class Search(StrategyKind):
    """The failure-region search (``--search``)."""

    name = "search"
    summary = "where does the policy fail: an adaptive map of failure over one or two condition ranges"
    modes = ("search",)

    @property
    def strategy(self) -> type[Strategy]:
        """:class:`SearchStrategy`."""
        return SearchStrategy
