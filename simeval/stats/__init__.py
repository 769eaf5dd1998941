"""Statistics over per-episode arrays: intervals, paired comparisons, across-task aggregates.

Pure functions of numbers (numpy and scipy, no torch), deterministic for a
given ``seed``. Three layers:

* one cell (a task under one condition): :func:`mean_ci`;
* two checkpoints on one cell, with common random numbers (episode ``j`` has
  the same seed for both, so the two arrays are *paired*): :func:`paired`
  (the return: one interval, one verdict) and :func:`mcnemar` (success), each row
  of a family at :func:`family_confidence`, an aggregate row by
  :func:`mean_of_intervals`; their sequential forms, for looks at any number of
  episodes, are :mod:`simeval.sequential`'s;
* across tasks, with the definitions of rliable (Agarwal et al. 2021, "Deep
  Reinforcement Learning at the Edge of the Statistical Precipice"):
  :func:`iqm`, :func:`aggregate`, :func:`aggregate_difference`,
  :func:`probability_of_improvement`, :func:`performance_profile`.

Every bootstrap here (one checkpoint's interval, rliable's aggregates) is a
percentile bootstrap. When every resample gives the same number (a single
episode, identical values) the interval collapses to the point estimate. NaN
or infinite inputs raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from simeval.metrics import bootstrap_ci
from simeval.sequential import SequentialMcNemar, SequentialMean, SequentialPaired, verdict_of  # noqa: F401 - re-exported

# What the functions accept for "an array of per-episode numbers".
Array = Union[Sequence[float], np.ndarray]
# Per-task scores: task name -> 1-D array of per-episode scores (tasks may differ in length).
TaskScores = Mapping[str, Array]

STATISTICS = ("iqm", "mean", "median", "optimality_gap")
VERDICTS = ("better", "worse", "equivalent", "inconclusive")
# Resampled values held at once by a bootstrap (rows are drawn in chunks below this size).
_CHUNK_ELEMENTS = 4_000_000  # pragma: no mutate - memory only: any chunk size gives the same numbers (test_stats)


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
            ``equivalent`` (inside ``(-margin, margin)``), else ``inconclusive``.
        b_wins: The share of episodes B scored higher in, ties counted half
            (``mean_j([b_j > a_j] + 0.5 [b_j == a_j])``): a description, not a test.
        pairing_gain: ``(var(a) + var(b)) / var(b - a)``: how many times more episodes an
            unpaired comparison would need for the same interval width (1: pairing gained
            nothing; inf: every difference is the same; NaN: fewer than 2 pairs).
        method: ``"t"`` (Student's t on the differences) or ``"betting"`` (declared bounds).
    """

    n: int
    mean_a: float
    mean_b: float
    diff: Interval
    verdict: str
    b_wins: float
    pairing_gain: float
    method: str


@dataclass(frozen=True, eq=False)
class Profile:
    """A performance profile (fraction of scores above each threshold) with pointwise intervals.

    Attributes:
        taus: The thresholds.
        value: Fraction of all pooled scores ``> tau``, one per threshold.
        low: Lower ends of the pointwise stratified-bootstrap intervals.
        high: Upper ends.
    """

    taus: np.ndarray
    value: np.ndarray
    low: np.ndarray
    high: np.ndarray


# ----------------------------------------------------------------- validation


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
    return data


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


# ------------------------------------------------------------- bootstrap core


def _interval(value: float, boot: np.ndarray, confidence: float) -> Interval:
    """The percentile interval of bootstrap replicates ``boot`` (collapsed to ``value`` when they are all equal)."""
    if boot.size == 0 or np.all(boot == boot[0]):
        return Interval(float(value), float(value), float(value))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return Interval(float(value), float(low), float(high))


def _row_chunks(n_resamples: int, width: int) -> Iterator[int]:
    """Row counts of successive chunks of an ``n_resamples x width`` resample matrix."""
    rows = max(1, _CHUNK_ELEMENTS // max(width, 1))
    done = 0
    while done < n_resamples:
        step = min(rows, n_resamples - done)
        yield step
        done += step


def _resamples(n_resamples: int, sizes: Sequence[int], width: int, seed: int) -> Iterator[tuple[slice, list]]:
    """The stratified bootstrap in chunks: (the chunk's rows of the output, one index matrix per task).

    Each task's matrix is ``rows x n_t`` episode indices drawn within that task
    only, from the task's own generator (``default_rng(seed)`` for the first task,
    ``default_rng((seed, t))`` for task ``t``); ``width`` sizes the chunks, which
    change no number.
    """
    # One generator per task, so each task's draws are one stream however the rows are chunked: with one shared
    # generator the tasks' draws would interleave chunk by chunk, and the interval would depend on the chunk size.
    # Task 0's is default_rng(seed), so a single task's resamples are those of one call.
    rngs = [np.random.default_rng(seed if t == 0 else (seed, t)) for t in range(len(sizes))]
    row = 0
    for rows in _row_chunks(int(n_resamples), width):
        yield slice(row, row + rows), [rng.integers(0, n, size=(rows, n)) for rng, n in zip(rngs, sizes, strict=True)]
        row += rows


def _statistic(name: str, gamma: float) -> Callable[[list[np.ndarray]], np.ndarray]:
    """The aggregate ``name`` over per-task 2-D arrays (rows: resamples, columns: episodes), one value per row."""

    def iqm_rows(tasks: list[np.ndarray]) -> np.ndarray:
        from scipy.stats import trim_mean

        return np.asarray(trim_mean(np.concatenate(tasks, axis=1), 0.25, axis=1), dtype=np.float64)

    def mean_rows(tasks: list[np.ndarray]) -> np.ndarray:
        return np.mean(np.stack([t.mean(axis=1) for t in tasks], axis=1), axis=1)

    def median_rows(tasks: list[np.ndarray]) -> np.ndarray:
        return np.median(np.stack([t.mean(axis=1) for t in tasks], axis=1), axis=1)

    def gap_rows(tasks: list[np.ndarray]) -> np.ndarray:
        return gamma - np.mean(np.minimum(np.concatenate(tasks, axis=1), gamma), axis=1)

    table = {"iqm": iqm_rows, "mean": mean_rows, "median": median_rows, "optimality_gap": gap_rows}
    if name not in table:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}; got {name!r}.")
    return table[name]


# ------------------------------------------------------------------ one cell


def mean_ci(x: Array, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0) -> Interval:
    """Mean of ``x`` with a percentile-bootstrap interval (:func:`simeval.metrics.bootstrap_ci`).

    Args:
        x: Per-episode values.
        confidence: Coverage of the interval.
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling (``np.random.default_rng(seed)``).

    Returns:
        The mean and its interval; the interval collapses to the mean for a
        single episode or identical values.

    Raises:
        ValueError: ``x`` is empty, not 1-D or not finite.
    """
    data = _array(x, "x")
    _check_bootstrap(confidence, n_resamples)
    low, high = bootstrap_ci(data, confidence=confidence, n_resamples=int(n_resamples), seed=seed)
    return Interval(float(data.mean()), float(low), float(high))


def paired(
    a: Array,
    b: Array,
    confidence: float = 0.95,
    bounds: tuple[float, float] | None = None,
    margin: float = 0.0,
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
      :class:`simeval.sequential.SequentialPaired` after the ``n`` pairs: valid in finite
      samples for any distribution within the bounds. A value outside them is a ValueError.

    For a family of cells, pass each cell ``confidence=family_confidence(...)`` (Bonferroni):
    every interval then holds at once with the family's confidence.

    Args:
        a: Per-episode values of checkpoint A (the baseline).
        b: Per-episode values of checkpoint B, the same episodes in the same order.
        confidence: Coverage of the interval.
        bounds: ``(low, high)`` on one episode's value, or None.
        margin: The equivalence margin in the values' units (0: no ``equivalent`` verdict).

    Returns:
        The :class:`Paired` summary.

    Raises:
        ValueError: The arrays are empty, differ in length, are not finite, or leave ``bounds``.
    """
    from scipy.stats import t as student

    a_data, b_data = _array(a, "a"), _array(b, "b")
    if a_data.size != b_data.size:
        raise ValueError(f"a and b must be paired episode by episode: a has {a_data.size} values, b has {b_data.size}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
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
    return Paired(
        n=n,
        mean_a=float(a_data.mean()),
        mean_b=float(b_data.mean()),
        diff=diff,
        verdict=verdict_of(diff.low, diff.high, margin),
        b_wins=float(np.mean((b_data > a_data) + 0.5 * (b_data == a_data))),
        pairing_gain=_pairing_gain(a_data, b_data),
        method=method,
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
    if rows < 1:
        raise ValueError(f"a family has at least one row, got {rows}.")
    return 1.0 - alpha / rows


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


# --------------------------------------------------------------- across tasks


def normalized(scores: Array, low: float, high: float) -> np.ndarray:
    """Scores rescaled so that ``low`` maps to 0 and ``high`` to 1: ``(x - low) / (high - low)``.

    Args:
        scores: Raw scores (any shape).
        low: The score that becomes 0 (e.g. a random policy's).
        high: The score that becomes 1 (e.g. a reference policy's).

    Returns:
        The normalised scores as a float64 array of the same shape.

    Raises:
        ValueError: ``high == low``, or a bound or score is not finite.
    """
    data = np.asarray(scores, dtype=np.float64)
    _array(data.reshape(-1), "scores", allow_empty=True)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"low and high must be finite, got low={low}, high={high}.")
    if high == low:
        raise ValueError(f"high and low must differ to normalise, both are {low}.")
    return (data - low) / (high - low)


def iqm(x: Array) -> float:
    """Interquartile mean: the mean of the middle 50% of all scores (``scipy.stats.trim_mean(x, 0.25)``).

    Args:
        x: Scores, any shape (flattened, as rliable's ``aggregate_iqm``).

    Returns:
        The 25%-trimmed mean.
    """
    from scipy.stats import trim_mean

    data = _array(np.asarray(x, dtype=np.float64).reshape(-1), "x")
    return float(trim_mean(data, 0.25))


def _point(tasks: list[np.ndarray], statistic: Callable[[list[np.ndarray]], np.ndarray]) -> float:
    return float(statistic([t[np.newaxis, :] for t in tasks])[0])


def aggregate(
    scores: TaskScores, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0, gamma: float = 1.0
) -> dict[str, Interval]:
    """rliable's aggregate metrics over tasks, each with a stratified-bootstrap interval.

    Definitions (rliable ``metrics``): ``iqm``, the 25%-trimmed mean of all
    tasks' scores pooled; ``mean``, the mean of the per-task means;
    ``median``, the median of the per-task means; ``optimality_gap``,
    ``gamma - mean(min(score, gamma))`` over all scores pooled (how far below
    ``gamma`` the scores fall; lower is better). With equal episode counts per
    task the pooled statistics equal rliable's; with unequal counts a task's
    weight in ``iqm`` and ``optimality_gap`` is its share of the episodes.

    The bootstrap is stratified: each resample redraws episodes within every
    task independently, so every task keeps its number of episodes.

    Args:
        scores: Task name -> 1-D per-episode scores (normalise first with :func:`normalized`).
        confidence: Coverage of the intervals.
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling.
        gamma: Threshold of the optimality gap.

    Returns:
        ``{"iqm": ..., "mean": ..., "median": ..., "optimality_gap": ...}``.
    """
    tasks = list(_task_arrays(scores, "scores").values())
    _check_bootstrap(confidence, n_resamples)
    functions = {name: _statistic(name, gamma) for name in STATISTICS}
    boot = {name: np.empty(int(n_resamples)) for name in STATISTICS}
    sizes = [t.size for t in tasks]
    for rows, indices in _resamples(n_resamples, sizes, sum(sizes), seed):
        resampled = [t[idx] for t, idx in zip(tasks, indices, strict=True)]
        for name, function in functions.items():
            boot[name][rows] = function(resampled)
    return {name: _interval(_point(tasks, functions[name]), boot[name], confidence) for name in STATISTICS}


def aggregate_difference(
    scores_a: TaskScores,
    scores_b: TaskScores,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    statistic: str = "iqm",
    gamma: float = 1.0,
) -> Interval:
    """``stat(B) - stat(A)`` across tasks with a paired stratified-bootstrap interval.

    Within each task, A's and B's episodes are paired (common random numbers),
    so each resample draws one set of episode indices per task and applies it
    to both.

    Args:
        scores_a: Task name -> per-episode scores of A.
        scores_b: Task name -> per-episode scores of B (same tasks, same lengths).
        confidence: Coverage of the interval.
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling.
        statistic: One of ``"iqm"``, ``"mean"``, ``"median"``, ``"optimality_gap"``
            (see :func:`aggregate`). For the optimality gap, a negative difference is an improvement.
        gamma: Threshold of the optimality gap.

    Returns:
        The difference and its interval.

    Raises:
        ValueError: The tasks or their lengths differ, or a score is not finite.
    """
    a = _task_arrays(scores_a, "scores_a")
    b = _task_arrays(scores_b, "scores_b")
    _same_tasks(a, b, "scores_a", "scores_b")
    for task in a:
        if a[task].size != b[task].size:
            raise ValueError(
                f"task {task!r}: scores_a has {a[task].size} episodes and scores_b {b[task].size}; "
                "paired tasks need the same episodes."
            )
    _check_bootstrap(confidence, n_resamples)
    function = _statistic(statistic, gamma)
    names = list(a)
    tasks_a, tasks_b = [a[t] for t in names], [b[t] for t in names]
    sizes = [t.size for t in tasks_a]
    boot = np.empty(int(n_resamples))
    for rows, indices in _resamples(n_resamples, sizes, 2 * sum(sizes), seed):
        stat_a = function([t[idx] for t, idx in zip(tasks_a, indices, strict=True)])
        stat_b = function([t[idx] for t, idx in zip(tasks_b, indices, strict=True)])
        boot[rows] = stat_b - stat_a
    value = _point(tasks_b, function) - _point(tasks_a, function)
    return _interval(value, boot, confidence)


def probability_of_improvement(scores_a: TaskScores, scores_b: TaskScores) -> float:
    """rliable's average probability of improvement of B over A across tasks.

    For each task, the probability that a random episode of B scores higher
    than a random episode of A (ties count half): the Mann-Whitney ``U``
    statistic of B against A divided by ``n_a * n_b``. Episodes are not
    paired here (see :func:`paired` for the per-cell paired version), so tasks
    may have different episode counts for A and B.

    Args:
        scores_a: Task name -> per-episode scores of A.
        scores_b: Task name -> per-episode scores of B (same tasks).

    Returns:
        The per-task probabilities averaged over tasks, in [0, 1].
    """
    from scipy.stats import mannwhitneyu

    a = _task_arrays(scores_a, "scores_a")
    b = _task_arrays(scores_b, "scores_b")
    _same_tasks(a, b, "scores_a", "scores_b")
    per_task = []
    for task in a:
        x, y = b[task], a[task]
        if np.array_equal(x, y):
            per_task.append(0.5)
            continue
        u = mannwhitneyu(x, y, alternative="greater", method="asymptotic").statistic
        per_task.append(float(u) / (x.size * y.size))
    return float(np.mean(per_task))


def performance_profile(scores: TaskScores, taus: Array) -> np.ndarray:
    """rliable's score distribution: the fraction of all pooled scores above each threshold.

    Args:
        scores: Task name -> per-episode scores.
        taus: Thresholds.

    Returns:
        ``mean(score > tau)`` over all tasks' episodes pooled, one value per ``tau``.
    """
    pooled = np.concatenate(list(_task_arrays(scores, "scores").values()))
    grid = _array(taus, "taus", allow_empty=True)
    return (pooled[:, np.newaxis] > grid[np.newaxis, :]).mean(axis=0)


def performance_profile_ci(
    scores: TaskScores, taus: Array, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> Profile:
    """:func:`performance_profile` with pointwise stratified-bootstrap intervals.

    Each resample redraws episodes within every task; a resample is counted as
    how often it holds each episode, so the cost is one matrix product per
    task, whatever the number of thresholds.

    Args:
        scores: Task name -> per-episode scores.
        taus: Thresholds.
        confidence: Coverage of the intervals.
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling.

    Returns:
        The thresholds, the profile and its interval at every threshold.
    """
    tasks = list(_task_arrays(scores, "scores").values())
    grid = _array(taus, "taus", allow_empty=True)
    _check_bootstrap(confidence, n_resamples)
    sizes = [t.size for t in tasks]
    total = sum(sizes)
    value = performance_profile(scores, grid)
    boot = np.empty((int(n_resamples), grid.size))
    for rows, indices in _resamples(n_resamples, sizes, total, seed):
        count = rows.stop - rows.start
        above = np.zeros((count, grid.size))
        for task, idx in zip(tasks, indices, strict=True):
            n = task.size
            flat = (idx + n * np.arange(count)[:, np.newaxis]).reshape(-1)
            counts = np.bincount(flat, minlength=count * n).reshape(count, n)
            above += counts @ (task[:, np.newaxis] > grid[np.newaxis, :]).astype(np.float64)
        boot[rows] = above / total
    intervals = [_interval(float(value[k]), boot[:, k], confidence) for k in range(grid.size)]
    return Profile(
        taus=grid,
        value=value,
        low=np.array([i.low for i in intervals]),
        high=np.array([i.high for i in intervals]),
    )
