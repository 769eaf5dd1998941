"""One episode's values as a method takes them (finite, within declared bounds, never clipped), and the running
interval a sequence reports over them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from simeval.stats._checks import LARGEST


def checked(
    x: Sequence[float] | np.ndarray, bounds: tuple[float, float] | None, name: str, first: int, label: str = ""
) -> np.ndarray:
    """``x`` as a 1-D float64 array; a ValueError naming ``name`` and the first episode (numbered from ``first``)
    that is not finite, beyond :data:`~simeval.stats._checks.LARGEST` in magnitude or outside ``bounds``, or
    naming ``label`` when ``x`` is not 1-D (one value per episode)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim > 1:
        raise ValueError(f"{name}: {label or 'the values'} must be 1-D (one value per episode), got shape {x.shape}.")
    x = x.reshape(-1)
    of = f" of {label}" if label else ""
    bad = np.flatnonzero(~np.isfinite(x))
    if len(bad):
        raise ValueError(f"{name}: episode {first + int(bad[0])}{of} is {float(x[bad[0]])!r}.")
    big = np.flatnonzero(np.abs(x) > LARGEST)
    if len(big):
        raise ValueError(
            f"{name}: episode {first + int(big[0])}{of} is {float(x[big[0]])!r}, beyond {LARGEST:g} in magnitude "
            "(its differences and squares overflow): rescale the values."
        )
    if bounds is not None:
        lo, hi = bounds
        out = np.flatnonzero((x < lo) | (x > hi))
        if len(out):
            episode, value = first + int(out[0]), float(x[out[0]])
            raise ValueError(
                f"{name}: episode {episode}{of} returned {value!r}, outside the declared bounds "
                f"[{lo}, {hi}]: fix the bounds (values are never clipped)."
            )
    return x


def bounds_of(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    """``bounds`` as two floats, low < high (None stays None); ValueError when they are not."""
    if bounds is None:
        return None
    lo, hi = (float(v) for v in bounds)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"bounds must be two finite numbers, low < high, got {bounds!r}.")
    return lo, hi


class RunningInterval:
    """The values a sequence took and the running intersection of its intervals: the accessors every sequence
    shares (:class:`~simeval.stats.sequential.SequentialMean`,
    :class:`~simeval.stats.group_sequential.GroupSequentialMean`)."""

    def __init__(self) -> None:
        self._values: list[float] = []
        self._low, self._high = -math.inf, math.inf
        self._kept = (-math.inf, math.inf)  # the intersection over the looks that were not provisional

    def _narrow(self, low: float, high: float, provisional: bool = False) -> None:
        """Intersect the running interval with ``[low, high]``, the latest look's. A ``provisional`` look's interval
        (zero spread in a task not declared deterministic) is reported but not kept: later looks intersect without
        it, so values that all happened to agree at first cannot pin the interval to their value."""
        low_kept, high_kept = self._kept
        self._low, self._high = max(low_kept, low), min(high_kept, high)
        if self._low > self._high:  # the running intersection emptied: only by chance; keep the last interval
            self._low, self._high = low, high
        if not provisional:
            self._kept = (self._low, self._high)

    @property
    def n(self) -> int:
        """Values taken (episodes)."""
        return len(self._values)

    @property
    def mean(self) -> float:
        """The mean so far (NaN before any value)."""
        return float(np.mean(self._values)) if self._values else math.nan

    @property
    def low(self) -> float:
        """The interval's lower end (``-inf`` before the first finite interval)."""
        return self._low

    @property
    def high(self) -> float:
        """The interval's upper end (``inf`` before the first finite interval)."""
        return self._high

    @property
    def half_width(self) -> float:
        """Half the interval's width (``inf`` before the first finite interval)."""
        return (self._high - self._low) / 2
