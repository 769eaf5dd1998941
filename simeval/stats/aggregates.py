"""Across tasks, with the definitions of rliable (Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of
the Statistical Precipice"): the aggregates with stratified-bootstrap intervals, the probability of improvement and
performance profiles."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simeval.stats._bootstrap import _interval, _resamples
from simeval.stats._checks import Array, TaskScores, _array, _check_bootstrap, _same_tasks, _task_arrays
from simeval.stats.intervals import Interval

STATISTICS = ("iqm", "mean", "median", "optimality_gap")


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
