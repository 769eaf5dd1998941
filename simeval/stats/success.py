"""Success on paired episodes: McNemar's exact test and its interval (the sequential form is
:class:`simeval.stats.sequential.SequentialMcNemar`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simeval.stats._checks import Array, _array
from simeval.stats.intervals import Interval


@dataclass(frozen=True)
class McNemar:
    """Success of B against success of A on the same episodes: McNemar's exact test and its interval.

    Only the discordant episodes (exactly one of the two succeeded) carry evidence; the
    estimand is the share of them that B won, 0.5 when the two succeed equally often.

    Attributes:
        n: Episode pairs.
        b_only: Episodes B succeeded in and A failed.
        a_only: Episodes A succeeded in and B failed.
        share: ``b_only / (a_only + b_only)`` with its exact (Clopper-Pearson) interval;
            ``[0, 1]`` around NaN when no episode is discordant.
        p_value: The exact two-sided test of a share of 0.5 (twice the smaller binomial tail,
            at most 1): below ``1 - confidence`` exactly when ``share``'s interval excludes 0.5.
        verdict: ``better`` (the interval lies above 0.5), ``worse`` (below) or ``inconclusive``.
    """

    n: int
    b_only: int
    a_only: int
    share: Interval
    p_value: float
    verdict: str


def mcnemar(a: Array, b: Array, confidence: float = 0.95) -> McNemar:
    """Compare B's success with A's on paired episodes (0/1 per episode, or any values: nonzero is success).

    Args:
        a: Per-episode success of checkpoint A (the baseline).
        b: Per-episode success of checkpoint B, the same episodes in the same order.
        confidence: Coverage of the interval; the test's level is ``1 - confidence``.

    Returns:
        The :class:`McNemar` summary.

    Raises:
        ValueError: The arrays are empty, differ in length or are not finite.
    """
    from scipy.stats import beta, binom

    a_data, b_data = _array(a, "a") != 0, _array(b, "b") != 0
    if a_data.size != b_data.size:
        raise ValueError(f"a and b must be paired episode by episode: a has {a_data.size} values, b has {b_data.size}.")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
    b_only, a_only = int((b_data & ~a_data).sum()), int((a_data & ~b_data).sum())
    m = b_only + a_only
    if m == 0:
        return McNemar(int(a_data.size), 0, 0, Interval(math.nan, 0.0, 1.0), 1.0, "inconclusive")
    tail = (1 - confidence) / 2
    low = 0.0 if b_only == 0 else float(beta.ppf(tail, b_only, m - b_only + 1))
    high = 1.0 if b_only == m else float(beta.ppf(1 - tail, b_only + 1, m - b_only))
    p_value = min(1.0, 2 * float(min(binom.cdf(b_only, m, 0.5), binom.sf(b_only - 1, m, 0.5))))
    verdict = "better" if low > 0.5 else "worse" if high < 0.5 else "inconclusive"
    return McNemar(int(a_data.size), b_only, a_only, Interval(b_only / m, low, high), p_value, verdict)
