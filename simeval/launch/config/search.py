"""The search section: ``--search SETTING=LOW:HIGH``, where a policy fails over one or two condition ranges.

It reuses the strategy section's look flags: ``--look-every`` (episodes per round on a region, default
``--num-envs``), ``--max-episodes`` (the search's total) and ``--alpha`` (the map's error, family-wise over regions
and rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simeval.launch.config.base import ConfigError, Section, opt

MAX_AXES = 2


def search_flag(name: str, low: float, high: float) -> str:
    """``--search``'s value for the range ``[low, high]`` of ``name``, as :attr:`SearchSection.searched` reads it
    back (the numbers exactly)."""
    return f"{name}={low!r}:{high!r}"


def range_problem(low: object, high: object) -> str | None:
    """Why ``low``, ``high`` cannot be a searched range (finite numbers, ``low < high``), or None."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
    if not numbers or not (math.isfinite(low) and math.isfinite(high) and low < high):  # type: ignore[arg-type]
        return "finite numbers LOW < HIGH"
    return None


def resolution_problem(value: object, low: float, high: float) -> str | None:
    """Why ``value`` cannot be the resolution of the range ``[low, high]`` (a width in ``(0, high - low]``), or None."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (number and 0 < value <= high - low):  # type: ignore[operator]
        return f"a width in (0, {high - low:g}], the range {low:g}:{high:g}"
    return None


@dataclass
class SearchSection(Section):
    """``--search``: the searched ranges, what a failed episode is, the level and the resolution."""

    title = "search"
    reads = ("checkpoints", "watch", "serve", "suite", "until_decided", "until_precise", "select_best", "baseline",
             "time_budget", "logger", "launcher", "design", "policy_server")  # fmt: skip
    looks = ("search",)

    search: str | list | None = opt(
        None,
        "search where the policy fails over a condition range, SETTING=LOW:HIGH (e.g. body_mass_scale=0.5:3.0; "
        "give it twice for a 2-D map): regions are refined where the failure rate is uncertain; writes the map "
        "to OUT/results.jsonl",
        action="append",
        metavar="SETTING=LOW:HIGH",
    )
    fail_below: float | None = opt(
        None, "--search: an episode fails when its return is below this (default: when it does not succeed)"
    )
    failure_rate: float = opt(
        0.5, "--search: the failure region is where an episode fails with at least this probability"
    )
    resolution: str | list | None = opt(
        None,
        "--search: the widest a region may be when the search stops refining it, per searched setting in "
        "--search order (one value for all; default: 1/16 of each range)",
        action="append",
    )

    evidence: int = opt(
        0,
        "--search: then replay the K lowest-returning failed episodes of the failing regions exactly, with video "
        "(OUT/replays.jsonl, OUT/videos/; the report's --html page links them)",
        metavar="K",
    )

    def prepare(self) -> None:
        """``search`` and ``resolution`` as lists (a repeated flag, a YAML list or one value)."""
        for name in ("search", "resolution"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, list):
                setattr(self, name, list(value) if isinstance(value, tuple) else [value])

    @property
    def searched(self) -> list[tuple[str, float, float]]:
        """``--search`` as (setting, low, high) in the order given; ConfigError (one line) for a malformed one."""
        out = []
        for text in self.search or []:
            name, _, span = str(text).partition("=")
            low, _, high = span.partition(":")
            try:
                lo, hi = float(low), float(high)
            except ValueError:
                lo = hi = math.nan
            if not name.strip() or range_problem(lo, hi):
                raise ConfigError(
                    f"--search {text!r}: expected SETTING=LOW:HIGH with finite numbers LOW < HIGH "
                    "(e.g. body_mass_scale=0.5:3.0)."
                )
            out.append((name.strip(), lo, hi))
        return out

    @property
    def resolutions(self) -> list[float]:
        """Each searched setting's resolution (default: 1/16 of its range); ConfigError for a malformed one."""
        searched = self.searched
        given = list(self.resolution or [])
        if len(given) not in (0, 1, len(searched)):
            raise ConfigError(
                f"--resolution is given {len(given)} times for {len(searched)} --search ranges: give one value "
                "for all, or one per --search in its order."
            )
        out = []
        for i, (name, lo, hi) in enumerate(searched):
            if not given:
                out.append((hi - lo) / 16)
                continue
            text = given[0] if len(given) == 1 else given[i]
            try:
                value = float(text)
            except (TypeError, ValueError):
                value = math.nan
            problem = resolution_problem(value, lo, hi)
            if problem:
                raise ConfigError(f"--resolution {text!r} for {name}: {problem}.")
            out.append(value)
        return out

    def check(self) -> None:
        """The search's flags, and what it cannot be combined with; each error one line."""
        if not self.search:
            for name, given in (
                ("--fail-below", self.fail_below is not None),
                ("--failure-rate", self.failure_rate != 0.5),
                ("--resolution", bool(self.resolution)),
                ("--evidence", bool(self.evidence)),
            ):
                if given:
                    raise ConfigError(f"{name} sets the failure search: add --search SETTING=LOW:HIGH.")
            return
        searched = self.searched
        if len(searched) > MAX_AXES:
            raise ConfigError(f"--search is given {len(searched)} times: a map has one or two axes.")
        names = [name for name, _, _ in searched]
        if len(set(names)) != len(names):
            raise ConfigError(f"--search names {names[0]} twice: give each setting once.")
        self.resolutions  # noqa: B018 - checks --resolution
        if self.evidence < 0:
            raise ConfigError(f"--evidence must be >= 0 (episodes to replay), got {self.evidence}.")
        if not 0 < self.failure_rate < 1:
            raise ConfigError(f"--failure-rate must be in (0, 1), got {self.failure_rate}.")
        if self.fail_below is not None and not math.isfinite(self.fail_below):
            raise ConfigError(f"--fail-below must be a finite return, got {self.fail_below}.")
        if self.suite:
            raise ConfigError(
                f"--search with --suite {self.suite}: give each task its own search: block in the suite instead."
            )
        others = {
            "--watch": self.watch, "--serve": self.serve, "--until-decided": self.until_decided,
            "--until-precise": self.until_precise is not None, "--select-best": self.select_best,
            "--baseline": self.baseline, "--time-budget": self.time_budget is not None,
            "--policy-server": self.policy_server,
        }  # fmt: skip
        given = [name for name, value in others.items() if value]
        if given:
            raise ConfigError(f"--search maps one --checkpoint over its ranges: leave {given[0]} out.")
        if len(self.checkpoints) != 1:
            raise ConfigError("--search needs one --checkpoint (the policy whose failures it maps).")
        if self.design != "anytime":
            raise ConfigError("--search classes its regions with anytime-valid intervals: leave --design out.")
        if self.logger != "csv":
            raise ConfigError(f"--search writes its rounds to results.jsonl only: leave --logger {self.logger} out.")
