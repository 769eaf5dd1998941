"""One episode's values as a method takes them: finite, within declared bounds, never clipped."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def checked(
    x: Sequence[float] | np.ndarray, bounds: tuple[float, float] | None, name: str, first: int, label: str = ""
) -> np.ndarray:
    """``x`` as float64; a ValueError naming ``name`` and the first episode (numbered from ``first``) that is
    not finite or lies outside ``bounds``."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    of = f" of {label}" if label else ""
    bad = np.flatnonzero(~np.isfinite(x))
    if len(bad):
        raise ValueError(f"{name}: episode {first + int(bad[0])}{of} is {float(x[bad[0]])!r}.")
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
