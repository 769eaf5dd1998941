"""What one job evaluates a checkpoint on: a cell. A plain run has one, the nominal cell.

A job of the launcher is (checkpoint, cell). :class:`Nominal` is the cell of a
plain run (``--checkpoint``, ``--watch``): the run's own settings, no condition,
nothing added to its lines; a suite's cells (task x condition) are
:class:`simeval.launch.suite_run.SuiteCell`. Both answer :class:`JobCell`, so
one pipeline (:mod:`simeval.launch.pipeline`) runs them, one record builder
(:mod:`simeval.launch.lines`) writes their lines.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.conditions import Condition
    from simeval.launch.config import LaunchConfig


class BoundsError(ValueError):
    """A cell's episode returned a value outside the bounds its suite task declares (never clipped).

    Its message names the cell and the episode; the job is recorded as a failed line
    (``error_kind: "evaluation"``: the bounds are wrong, so only ``--retry-failed`` evaluates it again).
    """


class JobCell(Protocol):
    """What the pipeline asks of a cell."""

    key: tuple
    """Unique in the run; with the checkpoint's name, the key a resume and the attempts journal use."""
    condition: Condition | None
    """The condition its env carries (None: the nominal env)."""

    def config(self, cfg: LaunchConfig) -> LaunchConfig:
        """The run's settings for this cell (a suite task's env, episodes, seed, ...)."""

    def explicit(self, explicit: set[str]) -> set[str]:
        """The settings given for this cell (the run's, and those the cell sets)."""

    def context(self) -> dict[str, Any]:
        """The fields a results line of this cell carries besides the checkpoint's and the run's."""

    def check(self, result: dict) -> None:
        """Raise :class:`BoundsError` when an episode of ``result`` lies outside the cell's declared bounds."""

    def label(self, name: str) -> str:
        """How messages name this cell's job of checkpoint ``name``."""

    def started(self, ck: Checkpoint, name: str, where: str) -> str:
        """The line printed when the job starts (``where``: `` on worker i`` with several evaluators)."""

    def finished(self, ck: Checkpoint, name: str, result: dict, record: dict) -> str:
        """The lines printed when the job's result is in."""


class Nominal:
    """A plain run's only cell: the run's settings as given, no condition."""

    key: tuple = ()
    condition = None

    def config(self, cfg: LaunchConfig) -> LaunchConfig:
        """The run's settings unchanged."""
        return cfg

    def explicit(self, explicit: set[str]) -> set[str]:
        """The run's explicit settings unchanged."""
        return explicit

    def context(self) -> dict[str, Any]:
        """Nothing: a plain run's lines carry the checkpoint's and the run's fields only."""
        return {}

    def check(self, result: dict) -> None:
        """Nothing: a plain run declares no bounds."""

    def label(self, name: str) -> str:
        """``checkpoint NAME``."""
        return f"checkpoint {name}"

    def started(self, ck: Checkpoint, name: str, where: str) -> str:
        """``evaluating PATH (step N) ...``."""
        return f"evaluating {ck.path} (step {ck.step}){where} ..."

    def finished(self, ck: Checkpoint, name: str, result: dict, record: dict) -> str:
        """The terminal table of the evaluation."""
        return summary(result, ck, record.get("wall_time"))


def nominal(ck: Checkpoint, name: str) -> list[Nominal]:
    """A plain run's cells of any checkpoint: the nominal one."""
    return [Nominal()]


def summary(result: dict, ck: Checkpoint, wall_time: float | None = None) -> str:
    """The terminal table of one evaluation (``wall_time``: its seconds, shown when given).

    Counts (``num_episodes``) are integers, a mean episode length is shown as an integer when it is one,
    ``fps`` as a whole rate, the rest with two decimals.
    """
    keys = ("reward", "reward_ci_low", "reward_ci_high", "reward_std", "episode_length", "num_episodes", "fps")
    keys += ("success_rate",)  # only when info_keys or the env's log entries give one
    rows = [f"{'checkpoint':<16}{os.path.basename(ck.path)} (step {ck.step})"]
    rows += [f"{k:<16}{_shown(k, float(result[f'eval/{k}']))}" for k in keys if result.get(f"eval/{k}") is not None]
    if wall_time is not None:
        rows.append(f"{'wall_time':<16}{wall_time:.1f} s")
    return "\n".join(rows)


def _shown(key: str, value: float) -> str:
    """One value of the terminal table: integers as integers."""
    if key == "num_episodes" or (key == "episode_length" and value.is_integer()):
        return str(int(value))
    if key == "fps":
        return f"{value:.0f}"
    return f"{value:.2f}"
