"""Input checks shared by the statistics: an array of per-episode numbers, per-task scores, bootstrap settings."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Union

import numpy as np

# What the functions accept for "an array of per-episode numbers".
Array = Union[Sequence[float], np.ndarray]
# Per-task scores: task name -> 1-D array of per-episode scores (tasks may differ in length).
TaskScores = Mapping[str, Array]
# The largest magnitude a value may have: beyond it, squares (variances) and differences overflow a double.
LARGEST = 1e150


def _array(x: Array, name: str, allow_empty: bool = False) -> np.ndarray:
    """``x`` as a 1-D float64 array; ValueError naming ``name`` if it is not one, is empty or is not finite."""
    try:
        data = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of numbers: {exc}") from None
    if data.ndim == 0:
        data = data.reshape(1)
    if data.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {data.shape}.")
    if data.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty.")
    bad = ~np.isfinite(data)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        kind = "NaN" if math.isnan(data[at]) else "an infinite value"
        raise ValueError(f"{name} contains {kind} (at index {at}).")
    big = np.flatnonzero(np.abs(data) > LARGEST)
    if len(big):
        at = int(big[0])
        raise ValueError(f"{name} {too_large(float(data[at]))} (at index {at}).")
    return data


def too_large(value: float) -> str:
    """The words of the refusal of a value beyond :data:`LARGEST` (after what names it)."""
    return f"has {value!r}, beyond {LARGEST:g} in magnitude (its differences and squares overflow): rescale the values"


def check_margin(margin: float) -> float:
    """The equivalence margin as a float; ValueError unless it is a finite number >= 0."""
    try:
        value = float(margin)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"margin must be a finite number >= 0 (0: no equivalence verdict), got {margin!r}.")
    return value


def check_confidence(confidence: float) -> float:
    """The confidence as a float; ValueError unless it is in (0, 1)."""
    if not (isinstance(confidence, numbers.Real) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
    return float(confidence)


def check_rows(rows: int) -> int:
    """A family's number of rows; ValueError unless it is an integer >= 1."""
    if isinstance(rows, bool) or not isinstance(rows, numbers.Integral) or rows < 1:
        raise ValueError(f"rows must be an integer >= 1 (a family has at least one row), got {rows!r}.")
    return int(rows)


def _task_arrays(scores: TaskScores, name: str) -> dict[str, np.ndarray]:
    """Each task's scores as a checked 1-D array, in the mapping's order."""
    if not isinstance(scores, Mapping):
        raise ValueError(f"{name} must be a mapping of task name -> per-episode scores, got {type(scores).__name__}.")
    if not scores:
        raise ValueError(f"{name} has no tasks.")
    return {task: _array(values, f"{name}[{task!r}]") for task, values in scores.items()}


def _same_tasks(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], name_a: str, name_b: str) -> None:
    if set(a) != set(b):
        only_a, only_b = sorted(map(str, set(a) - set(b))), sorted(map(str, set(b) - set(a)))
        raise ValueError(
            f"{name_a} and {name_b} have different tasks: only in {name_a} {only_a}, only in {name_b} {only_b}."
        )


def _check_bootstrap(confidence: float, n_resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples}.")
