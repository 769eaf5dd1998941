"""The launcher's failure search and replay from Python: the command line's runs, called as functions.

.. code-block:: python

    from simeval.launch.api import replay, search

    found = search("runs/exp1/ckpt/step_001001472.pt", "HalfCheetah-v5", {"body_mass_scale": (0.5, 3.0)},
                   out="runs/where-it-fails", max_episodes=512, fail_below=1880.0, seed=0)
    for region in found.map.regions():         # simeval.stats.failure_map.Region
        print(region.bounds, region.klass)
    line, index, _ = found.worst_failures(1)[0]
    again = replay(found.out, line, index, video=True)
    assert again["equal"]

Each function builds the command line its flags name and runs it (:func:`simeval.launch.launch`): the same
checks, lines and files as ``python -m simeval.launch --search ...`` / ``--replay ...``, and the same resume
(a second call into the same ``out`` replays the lines and evaluates nothing new). Bad input raises the
launcher's one-line error (:class:`~simeval.launch.config.ConfigError`) instead of printing it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.launch.config.search import search_flag
from simeval.launch.results import RESULTS

if TYPE_CHECKING:
    from simeval.stats.failure_map import FailureMap
    from simeval.strategies import SearchStrategy

__all__ = ["SearchRun", "replay", "search"]


@dataclass(frozen=True)
class SearchRun:
    """A finished (or budget-spent) search: its run directory, its lines, and its map rebuilt from them."""

    out: str
    """The run directory (``results.jsonl``, ``replays.jsonl``, ``videos/``)."""
    strategy: SearchStrategy
    """The search as the report rebuilds it from the lines (:func:`simeval.report.search.replay_search`)."""
    lines: list[dict[str, Any]]
    """Every results line, one per round."""

    @property
    def map(self) -> FailureMap:
        """The map: ``regions()``, ``worst()``, ``boundary()`` (one axis), ``as_data()``."""
        return self.strategy.map

    @property
    def stop(self) -> str | None:
        """Why the search stopped (``every region decided``, ``resolution reached``, ``budget``), or None."""
        return self.lines[-1].get("stop") if self.lines else None

    def worst_failures(self, k: int) -> list[tuple[int, int, float]]:
        """The ``k`` lowest-returning failed episodes of the failing regions, as (line, index, return): what
        ``--evidence k`` replays, and :func:`replay` takes."""
        from simeval.records import numbered_records

        return self.strategy.worst_failures(list(numbered_records(os.path.join(self.out, RESULTS))), k)


def search(
    checkpoint: str,
    env: str,
    ranges: Mapping[str, tuple[float, float]],
    *,
    out: str,
    max_episodes: int,
    fail_below: float | None = None,
    failure_rate: float = 0.5,
    resolution: float | Sequence[float] | None = None,
    num_envs: int = 16,
    max_steps: int | None = None,
    seed: int = 0,
    alpha: float = 0.05,
    look_every: int | None = None,
    evidence: int = 0,
    flags: Sequence[str] = (),
) -> SearchRun:
    """Search where ``checkpoint`` fails on ``env`` over one or two ``ranges`` (setting -> (low, high)), as
    ``--search`` does (docs/search.md); the run's map. ``flags``: any other launcher flags, as on the command line.

    Raises:
        ConfigError: bad input, in the launcher's one line (a setting the env cannot apply, a budget too small,
            an ``out`` that holds another search, ...).
        RuntimeError: the launcher ended with another exit code.
    """
    argv = ["--checkpoint", checkpoint, "--env", env, "--out", out, "--max-episodes", str(max_episodes)]
    argv += ["--num-envs", str(num_envs), "--seed", str(seed), "--alpha", repr(alpha)]
    for name, (low, high) in ranges.items():
        argv += ["--search", search_flag(name, low, high)]
    widths = [resolution] if isinstance(resolution, (int, float)) else list(resolution or [])
    for width in widths:
        argv += ["--resolution", repr(width)]
    if fail_below is not None:
        argv += ["--fail-below", repr(fail_below)]
    if failure_rate != 0.5:
        argv += ["--failure-rate", repr(failure_rate)]
    if max_steps is not None:
        argv += ["--max-steps", str(max_steps)]
    if look_every is not None:
        argv += ["--look-every", str(look_every)]
    if evidence:
        argv += ["--evidence", str(evidence)]
    _run([*argv, *flags])
    from simeval.records import read_records
    from simeval.report.search import replay_search

    return SearchRun(out, replay_search(out), list(read_records(os.path.join(out, RESULTS))))


def replay(run_dir: str, line: int, index: int, *, video: bool = False) -> dict[str, Any]:
    """Re-run episode ``index`` of results line ``line`` (from 1) of ``run_dir`` in its recorded round, as
    ``--replay DIR --replay-episode LINE:INDEX`` does; its line of ``run_dir/replays.jsonl`` (``equal``, ``return``,
    ``recorded_return``, ``video``, ``command``, ...).

    Raises:
        ConfigError: the run directory, its line or its checkpoint cannot give the episode back (one line).
        ReplayError: the return differs where the simulator promises the same.
    """
    from simeval.launch.replay import REPLAYS
    from simeval.records import read_records

    _run(["--replay", run_dir, "--replay-episode", f"{line}:{index}", *(["--video"] if video else [])])
    return list(read_records(os.path.join(run_dir, REPLAYS)))[-1]


def _run(argv: list[str]) -> None:
    from simeval.launch import launch

    code = launch(argv)
    if code != 0:
        raise RuntimeError(f"the launcher ended with exit code {code}: python -m simeval.launch {' '.join(argv)}")
