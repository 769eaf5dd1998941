"""One cell's intervals: one checkpoint's mean, B against A on paired episodes, a family of cells, its aggregate row."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simeval.metrics import ROUND_CI_METHOD, mean_interval
from simeval.stats._checks import Array, _array, _check_bootstrap, check_confidence, check_margin, check_rows
from simeval.stats.methods import METHODS
from simeval.stats.sequential import SequentialPaired
from simeval.stats.verdicts import verdict_with_reason


@dataclass(frozen=True)
class Interval:
    """A point estimate and its confidence interval ``[low, high]``.

    Attributes:
        value: The point estimate.
        low: Lower end of the interval.
        high: Upper end of the interval.
    """

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Paired:
    """Checkpoint B against checkpoint A on one cell, episode by episode: one interval, its verdict.

    Attributes:
        n: Number of episode pairs.
        mean_a: Mean of A's per-episode values.
        mean_b: Mean of B's per-episode values.
        diff: ``mean(b - a)`` and its interval (see :func:`paired` for the method).
        verdict: What ``diff``'s interval says: ``better`` (above 0), ``worse`` (below 0),
            ``equivalent`` (inside ``(-margin, margin)``), else ``inconclusive``; ``inconclusive``
            too where ``reason`` withholds what the interval says.
        b_wins: The share of episodes B scored higher in, ties counted half
            (``mean_j([b_j > a_j] + 0.5 [b_j == a_j])``): a description, not a test.
        pairing_gain: ``(var(a) + var(b)) / var(b - a)``: how many times more episodes an
            unpaired comparison would need for the same interval width (1: pairing gained
            nothing; inf: every difference is the same; NaN: fewer than 2 pairs).
        method: ``"t"`` (Student's t on the differences) or ``"betting"`` (declared bounds): a name
            of :data:`simeval.stats.methods.METHODS`.
        reason: Why the verdict the interval reads is withheld (one of
            :data:`simeval.stats.verdicts.REASONS`: fewer than ``MIN_N`` pairs, zero variance in an
            undeclared-deterministic task, ``skewed: declare bounds``), or ``""``.
    """

    n: int
    mean_a: float
    mean_b: float
    diff: Interval
    verdict: str
    b_wins: float
    pairing_gain: float
    method: str
    reason: str = ""


def mean_ci(
    x: Array, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0, method: str = ROUND_CI_METHOD
) -> Interval:
    """Mean of ``x`` with the interval of every evaluation round (``reward_ci_low`` / ``reward_ci_high``).

    ``method="t"`` (the default): Student's t-interval (:func:`simeval.metrics.t_ci`), which holds
    its coverage at the sizes people use where the percentile bootstrap fell short (docs/statistics.md,
    "One cell"); ``"percentile bootstrap"``: the rounds' interval before (:func:`simeval.metrics.bootstrap_ci`).

    Args:
        x: Per-episode values.
        confidence: Coverage of the interval.
        n_resamples: Bootstrap resamples (the percentile bootstrap's).
        seed: Seed of the resampling (``np.random.default_rng(seed)``; the percentile bootstrap's).
        method: One of :data:`simeval.metrics.CI_METHODS`.

    Returns:
        The mean and its interval; the interval collapses to the mean for a
        single episode or identical values.

    Raises:
        ValueError: ``x`` is empty, not 1-D or not finite; an unknown ``method``.
    """
    data = _array(x, "x")
    _check_bootstrap(confidence, n_resamples)
    low, high = mean_interval(data, method, confidence=confidence, n_resamples=int(n_resamples), seed=seed)
    return Interval(float(data.mean()), float(low), float(high))


def paired(
    a: Array,
    b: Array,
    confidence: float = 0.95,
    bounds: tuple[float, float] | None = None,
    margin: float = 0.0,
    deterministic: bool = False,
) -> Paired:
    """Compare B with A on one cell, where episode ``j`` of both ran with the same seed.

    One procedure gives the interval and the verdict, so they cannot disagree; it is a
    test of the mean difference (not of symmetry), with no Monte Carlo floor on its
    evidence:

    * without ``bounds``: Student's t-interval on the differences ``b - a`` (exact for
      normal differences, close for near-symmetric ones; skewed differences at small n
      undercover: docs/statistics.md prints by how much). One pair gives ``(-inf, inf)``;
      identical differences give a zero-width interval at their value.
    * with ``bounds`` (on one episode's value, of either checkpoint): the betting interval of
      :class:`simeval.stats.sequential.SequentialPaired` after the ``n`` pairs: valid in finite
      samples for any distribution within the bounds. A value outside them is a ValueError.

    The verdict is withheld (``inconclusive``, with the ``reason``) below
    :data:`simeval.stats.verdicts.MIN_N` pairs; and, for the t-interval, from differences that
    are all equal unless the task is declared ``deterministic``, and where the differences show
    a fall (:func:`simeval.stats.verdicts.skewed`: ``skewed: declare bounds``).

    For a family of cells, pass each cell ``confidence=family_confidence(...)`` (Bonferroni):
    every interval then holds at once with the family's confidence.

    Args:
        a: Per-episode values of checkpoint A (the baseline).
        b: Per-episode values of checkpoint B, the same episodes in the same order.
        confidence: Coverage of the interval.
        bounds: ``(low, high)`` on one episode's value, or None.
        margin: The equivalence margin in the values' units (0: no ``equivalent`` verdict).
        deterministic: Whether the task is deterministic: identical differences are then a verdict.

    Returns:
        The :class:`Paired` summary.

    Raises:
        ValueError: The arrays are empty, differ in length, are not finite or beyond 1e150 in
            magnitude, or leave ``bounds``; ``margin`` is not a finite number >= 0.
    """
    from scipy.stats import t as student

    a_data, b_data = _array(a, "a"), _array(b, "b")
    if a_data.size != b_data.size:
        raise ValueError(f"a and b must be paired episode by episode: a has {a_data.size} values, b has {b_data.size}.")
    check_confidence(confidence)
    margin = check_margin(margin)
    n = int(a_data.size)
    d = b_data - a_data
    mean = float(d.mean())
    if bounds is not None:
        seq = SequentialPaired(confidence, bounds, margin, name="paired").update(a_data, b_data)
        diff, method = Interval(mean, seq.low, seq.high), "betting"
    elif n < 2:
        diff, method = Interval(mean, -math.inf, math.inf), "t"
    else:
        half = float(student.ppf(1 - (1 - confidence) / 2, n - 1)) * float(d.std(ddof=1)) / math.sqrt(n)
        diff, method = Interval(mean, mean - half, mean + half), "t"
    symmetric = METHODS[method].assumes_symmetry
    magnitude = float(max(np.max(np.abs(a_data)), np.max(np.abs(b_data))))
    verdict, reason = verdict_with_reason(diff.low, diff.high, margin, d, symmetric, deterministic, magnitude)
    return Paired(
        n=n,
        mean_a=float(a_data.mean()),
        mean_b=float(b_data.mean()),
        diff=diff,
        verdict=verdict,
        b_wins=float(np.mean((b_data > a_data) + 0.5 * (b_data == a_data))),
        pairing_gain=_pairing_gain(a_data, b_data),
        method=method,
        reason=reason,
    )


def _pairing_gain(a: np.ndarray, b: np.ndarray) -> float:
    if a.size < 2:
        return math.nan
    shared = float(a.var(ddof=1) + b.var(ddof=1))
    alone = float((b - a).var(ddof=1))
    if alone == 0.0:
        return math.inf if shared > 0 else 1.0
    return shared / alone


def family_confidence(alpha: float, rows: int) -> float:
    """Each row's confidence so that ``rows`` intervals hold at once with probability ``1 - alpha`` (Bonferroni).

    Bonferroni needs no independence between the rows (cells of one run share a policy),
    and an interval that holds makes its verdict right: the family-wise error of the
    verdicts is at most ``alpha``, whatever the number of rows.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}.")
    return 1.0 - alpha / check_rows(rows)


def mean_of_intervals(intervals: Sequence[Interval], scales: Sequence[float]) -> Interval:
    """The mean over cells of each cell's interval divided by its scale, end by end.

    When every cell's interval holds (as :func:`family_confidence` makes them do together),
    this interval holds the mean over cells of the normalised differences: an aggregate row
    that belongs to the cells' family and adds no error of its own. Cells weigh equally,
    whatever their number of episodes.
    """
    if not intervals or len(intervals) != len(scales):
        raise ValueError("mean_of_intervals needs one scale per interval, and at least one interval.")
    if any(not (math.isfinite(s) and s > 0) for s in scales):
        raise ValueError(f"scales must be finite and positive, got {list(scales)}.")
    k = len(intervals)
    return Interval(
        sum(i.value / s for i, s in zip(intervals, scales, strict=True)) / k,
        sum(i.low / s for i, s in zip(intervals, scales, strict=True)) / k,
        sum(i.high / s for i, s in zip(intervals, scales, strict=True)) / k,
    )
