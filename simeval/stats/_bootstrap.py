"""The percentile bootstrap every resampled interval here shares: the interval of replicates, and the stratified
resamples drawn in chunks (memory only: the chunk size changes no number)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from simeval.stats.intervals import Interval

# Resampled values held at once by a bootstrap (rows are drawn in chunks below this size).
_CHUNK_ELEMENTS = 4_000_000  # pragma: no mutate - memory only: any chunk size gives the same numbers (test_stats)


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
