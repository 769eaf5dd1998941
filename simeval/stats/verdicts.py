"""What an interval for B - A says: the one list of verdicts, the one rule that reads them, and when a verdict is
withheld (too few pairs, zero variance, a fall observed where the method assumes near-symmetry)."""

from __future__ import annotations

import numpy as np

VERDICTS = ("better", "worse", "equivalent", "inconclusive")
# No verdict from fewer pairs than this, whatever the interval (the guard below needs a few values to see a fall).
MIN_N = 4
# The reasons a verdict the interval reads is withheld (the result's ``reason``; "" when none is).
FEW_PAIRS = f"fewer than {MIN_N} pairs"
ZERO_VARIANCE = "zero variance: declare deterministic"
SKEWED = "skewed: declare bounds"
REASONS = (FEW_PAIRS, ZERO_VARIANCE, SKEWED)
# The skew guard: a difference farther from the median than OUTLIER_SCALES + OUTLIER_GROWTH * n^(1/3) robust
# scales (1.4826 MAD) is a fall. The n^(1/3) follows the largest of n t(3) draws (tail ~ x^-3), so data as heavy-tailed
# as t(3), symmetric, trip it in about 1% to 3% of samples at any n (benchmarks/stats_validity.py --only guard).
OUTLIER_SCALES = 12.0
OUTLIER_GROWTH = 2.2
_MAD_TO_SD = 1.4826  # the MAD of a normal distribution is 0.6745 sd


def verdict_of(low: float, high: float, margin: float = 0.0) -> str:
    """What an interval for B - A says: ``better`` above 0, ``worse`` below 0 (these take precedence),
    ``equivalent`` inside ``(-margin, margin)`` when ``margin > 0``, else ``inconclusive``."""
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if margin > 0 and -margin < low and high < margin:
        return "equivalent"
    return "inconclusive"


def outlier_threshold(n: int) -> float:
    """How many robust scales from the median a difference must lie, among ``n``, to count as a fall."""
    return OUTLIER_SCALES + OUTLIER_GROWTH * n ** (1.0 / 3.0)


def skewed(d: np.ndarray) -> bool:
    """Whether the differences ``d`` show a fall: one lies beyond :func:`outlier_threshold` robust scales from their
    median (any difference off the median when more than half share it: the scale is then 0)."""
    d = np.asarray(d, dtype=np.float64)
    if d.size < MIN_N:
        return False
    deviation = np.abs(d - np.median(d))
    far = float(deviation.max())
    if far == 0.0:
        return False
    scale = _MAD_TO_SD * float(np.median(deviation))
    return far > outlier_threshold(d.size) * scale


def constant(d: np.ndarray, magnitude: float = 0.0) -> bool:
    """Whether the differences ``d`` (two or more) are all the same number up to the rounding of ``b - a`` where
    ``|a|, |b| <= magnitude`` (a few units in the last place of the values)."""
    d = np.asarray(d, dtype=np.float64)
    if d.size < 2:
        return False
    scale = max(float(np.max(np.abs(d))), float(magnitude))
    return float(np.ptp(d)) <= 16 * np.finfo(np.float64).eps * scale


def withheld(d: np.ndarray, symmetric: bool, deterministic: bool = False, magnitude: float = 0.0) -> str:
    """Why no verdict may be read from an interval over the differences ``d`` ("" when one may).

    Fewer than :data:`MIN_N` pairs: :data:`FEW_PAIRS`, for every method. For a method that assumes
    near-symmetry (``symmetric``: t based, :mod:`simeval.stats.methods`): all differences equal and the task not
    declared ``deterministic``, :data:`ZERO_VARIANCE` (the t interval has no width); a fall observed
    (:func:`skewed`), :data:`SKEWED`. A bounded method holds for any distribution within its bounds.
    ``magnitude``: the largest ``|a|``, ``|b|`` the differences came from (their rounding).
    """
    d = np.asarray(d, dtype=np.float64)
    if d.size < MIN_N:
        return FEW_PAIRS
    if symmetric:
        if constant(d, magnitude):
            return "" if deterministic else ZERO_VARIANCE
        if skewed(d):
            return SKEWED
    return ""


def verdict_with_reason(
    low: float,
    high: float,
    margin: float,
    d: np.ndarray,
    symmetric: bool,
    deterministic: bool = False,
    magnitude: float = 0.0,
) -> tuple[str, str]:
    """The verdict :func:`verdict_of` reads from ``[low, high]`` and the reason it is withheld: ``("inconclusive",
    reason)`` when the interval would decide but :func:`withheld` gives a reason, else ``(verdict, "")``."""
    verdict = verdict_of(low, high, margin)
    if verdict == "inconclusive":
        return verdict, ""
    reason = withheld(d, symmetric, deterministic, magnitude)
    return ("inconclusive", reason) if reason else (verdict, "")
