"""Choosing the best of several checkpoints with a guarantee: successive elimination on paired confidence sequences.

Every pair of arms (checkpoints) playing the same episodes keeps an anytime-valid confidence
sequence for the difference of their means, the same sequences as
:class:`simeval.sequential.SequentialPaired` (the t-mixture CS without bounds, the betting CS
with them), here vectorised over the pairs. An arm is eliminated once some alive arm is
shown better than it; the run stops when one arm is left, or when every alive arm is shown
within ``margin`` of the leader, or when the caller's budget is spent.

Why the guarantee holds (any looks, any arms joining). Call the best arm ``b``. Only the
pairs that involve ``b`` must hold: while every sequence of a pair ``(b, j)`` holds, no
``LCB(mu_j - mu_b) > 0`` (so ``b`` is never eliminated) and ``UCB(mu_b - mu_c) <= margin``
whenever the rule stops ``within margin`` with the leader ``c``. So it is enough that the
error levels of the pairs of any one arm sum to at most ``alpha = 1 - confidence``:

* The first block of arms (those given to the constructor, and with ``max_arms`` every arm
  up to ``max_arms``) shares ``alpha_0``; each of its pairs runs at ``alpha_0 / (m - 1)``
  where ``m`` is the block's size: an arm of the block has ``m - 1`` pairs inside it.
* The ``k``-th arm overall (``k > m``, joining later) has its own share ``alpha_k``; its
  pairs with the ``k - 1`` arms before it run at ``alpha_k / (k - 1)`` each.
* The pairs of an arm ``b`` of the block then spend ``alpha_0`` inside it and
  ``alpha_k / (k - 1) <= alpha_k`` with each later arm ``k``: at most
  ``alpha_0 + sum_{k > m} alpha_k``. Those of a later arm ``b`` spend ``alpha_b`` with the
  arms before it and at most ``alpha_k`` with each later ``k``: at most ``sum_{k > m} alpha_k``.
* Shares, so that ``alpha_0 + sum_{k > m} alpha_k = alpha``: with ``max_arms`` given,
  ``alpha_0 = alpha`` over a block of ``max_arms`` (no arm may join past it). Without it
  (open-ended: a ``--watch`` run), ``alpha_k = alpha w_k`` with ``w_k = 6 / (pi^2 (k - 1)^2)``
  for ``k >= 2`` (``sum_{k >= 2} w_k = 1``) and the block of the first ``m`` arms pools its
  arms' shares: ``alpha_0 = alpha sum_{k=2..m} w_k``.

Rules shared with the paired comparisons (:mod:`simeval.stats.verdicts`): no elimination nor
stop before ``min_n`` paired episodes; without bounds (the t-mixture assumes near-symmetric
differences) none from a pair whose differences are all equal unless the task is
``deterministic`` (they give no interval), nor from one whose differences show a fall
(:func:`simeval.stats.verdicts.skewed`: declare bounds). The betting sequences hold for any
values within the bounds and decide from any. ``margin = 0`` never stops ``within margin``: with tied best arms the
selection runs to the budget (no sequence shows two equal means apart; one of them is
eliminated with probability at most ``alpha``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simeval.stats.sequential import GRID, t_mixture_radius, t_mixture_scale
from simeval.stats.verdicts import MIN_N, constant, skewed

REASONS = ("one left", "within margin", "budget")


def open_share(k: int) -> float:
    """The share of alpha of the ``k``-th arm (1-based) of an open-ended selection: ``6 / (pi^2 (k - 1)^2)``
    for ``k >= 2`` (they sum to 1), 0 for the first (an arm alone has no pair)."""
    return 0.0 if k < 2 else 6.0 / (math.pi**2 * (k - 1) ** 2)


@dataclass(frozen=True)
class Elimination:
    """Why an arm left the selection: the look (1-based) and episodes at which it was shown worse, the arm shown
    better than it, and the interval for ``mu_by - mu_arm`` that did (its low end above 0)."""

    look: int
    episodes: int
    by: int
    low: float
    high: float


class SequentialSelection:
    """Select the best of ``arms`` checkpoints on common episodes, anytime-valid (successive elimination).

    Feed it each look's per-episode values, one column per arm (``update(values)``, shape
    ``[n, arms]``; NaN, or anything, for eliminated arms: they are no longer read). After every
    look: ``alive`` (the arms not shown worse than another), ``best`` (the leader: the best
    mean among them), ``gap(arm)`` (the interval for ``mu_arm - mu_best``), ``done`` and
    ``reason``: ``one left``, ``within margin`` (every alive arm's gap to the leader is at most
    ``margin``: the leader is chosen, equivalent within the margin to the others), or
    ``budget`` (said by the caller with :meth:`finish`: the result is then the alive set,
    which holds the best arm, and the leader among it, not a choice).

    Guarantee: with probability at least ``confidence``, at every look and whatever arms join,
    the best arm is never eliminated; so a stop on ``one left`` or ``within margin`` chooses
    an arm whose mean is within ``margin`` of the best's. (The module's docstring proves it.)

    Args:
        arms: checkpoints at the start (at least 1; more may join with :meth:`add_arm`).
        confidence: the probability of the guarantee, in (0, 1).
        bounds: ``(low, high)`` on one episode's value of any arm: the betting CS, valid in
            finite samples; a value outside them is a ValueError (never clipped). ``None``:
            the t-mixture CS (exact for normal differences, asymptotic otherwise).
        margin: the equivalence margin (task units, >= 0; 0: stop only when one is left).
        max_arms: the most arms the run will hold, when known (a list of checkpoints): the
            whole alpha is spread over them. ``None``: open-ended, arms may keep joining, each
            with its own share (about 8% of alpha is set aside at 8 arms, 2% at 32).
        min_n: paired episodes before any elimination or stop.
        plan_n: where the t-mixture sequences are narrowest (the launcher's first look).
        deterministic: the task is deterministic: without bounds, a pair of arms whose
            differences are all equal has an interval of no width and may decide (otherwise it
            has none).
    """

    def __init__(
        self,
        arms: int,
        confidence: float = 0.95,
        bounds: tuple[float, float] | None = None,
        margin: float = 0.0,
        *,
        max_arms: int | None = None,
        min_n: int = MIN_N,
        plan_n: int = 16,
        deterministic: bool = False,
    ) -> None:
        if isinstance(arms, bool) or not isinstance(arms, int | np.integer) or arms < 1:
            raise ValueError(f"arms must be a whole number >= 1, got {arms!r}.")
        if not (isinstance(confidence, int | float) and 0 < confidence < 1):
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
        if not (isinstance(margin, int | float) and math.isfinite(margin) and margin >= 0):
            raise ValueError(f"margin must be a finite number >= 0, got {margin!r}.")
        if max_arms is not None and (not isinstance(max_arms, int | np.integer) or max_arms < arms):
            raise ValueError(f"max_arms must be a whole number >= arms ({arms}), got {max_arms!r}.")
        if min_n < 1 or plan_n < 1:
            raise ValueError(f"min_n and plan_n must be >= 1, got min_n={min_n!r}, plan_n={plan_n!r}.")
        if bounds is not None:
            lo, hi = (float(v) for v in bounds)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(f"bounds must be two finite numbers, low < high, got {bounds!r}.")
            bounds = (lo, hi)
        self.confidence, self.bounds, self.margin = float(confidence), bounds, float(margin)
        self.alpha = 1.0 - self.confidence
        self.max_arms = None if max_arms is None else int(max_arms)
        self.min_n, self.plan_n, self.deterministic = int(min_n), int(plan_n), bool(deterministic)
        self._block = self.max_arms if self.max_arms is not None else int(arms)
        self._columns: list[list[np.ndarray]] = [[] for _ in range(int(arms))]  # each arm's values, look by look
        self._looks: list[int] = []  # episodes per look
        self._alive = np.ones(int(arms), dtype=bool)
        self.eliminated: dict[int, Elimination] = {}
        self.reason: str | None = None
        # pairs (i, j), i < j: the interval for mu_j - mu_i, running intersection
        self._pairs: dict[tuple[int, int], _Pair] = {}
        for j in range(int(arms)):
            for i in range(j):
                self._pairs[(i, j)] = _Pair(self.pair_alpha(j), self._span)

    # --------------------------------------------------------------------------------- the alpha split

    @property
    def _span(self) -> float | None:
        return None if self.bounds is None else self.bounds[1] - self.bounds[0]

    def pair_alpha(self, j: int) -> float:
        """The error level of the sequence of a pair ``(i, j)`` with ``i < j`` (0-based arms): ``alpha_0 / (m - 1)``
        inside the first block of ``m``, else ``alpha_k / (k - 1)`` for the later arm, ``k = j + 1``."""
        k = j + 1
        if k <= self._block:
            pooled = 1.0 if self.max_arms is not None else sum(open_share(i) for i in range(2, self._block + 1))
            return self.alpha * pooled / (self._block - 1)
        return self.alpha * open_share(k) / (k - 1)

    # ---------------------------------------------------------------------------------------- reading

    @property
    def arms(self) -> int:
        """Arms so far (the initial ones and those added)."""
        return len(self._columns)

    @property
    def n(self) -> int:
        """Episodes played by every alive arm so far (the common episodes)."""
        return int(sum(self._looks))

    @property
    def looks(self) -> int:
        """Looks taken."""
        return len(self._looks)

    @property
    def alive(self) -> tuple[int, ...]:
        """The arms not eliminated, in order."""
        return tuple(int(i) for i in np.flatnonzero(self._alive))

    @property
    def done(self) -> bool:
        """Whether the selection has stopped (``reason`` says why)."""
        return self.reason is not None

    def means(self) -> dict[int, float]:
        """Each alive arm's mean over the common episodes (NaN before any)."""
        return {a: (float(np.concatenate(self._columns[a]).mean()) if self.n else math.nan) for a in self.alive}

    @property
    def best(self) -> int:
        """The leader: the alive arm with the best mean (the lowest index among equals; the first arm before any
        episode)."""
        means = self.means()
        if not self.n:
            return self.alive[0]
        return max(means, key=lambda a: (means[a], -a))

    def gap(self, arm: int, to: int | None = None) -> tuple[float, float]:
        """The interval for ``mu_arm - mu_to`` (``to``: the leader by default), from their pair's sequence;
        ``(0.0, 0.0)`` for an arm against itself."""
        to = self.best if to is None else to
        for a in (arm, to):
            if not 0 <= a < self.arms:
                raise ValueError(f"arm must be one of 0..{self.arms - 1}, got {a!r}.")
        if arm == to:
            return 0.0, 0.0
        i, j = min(arm, to), max(arm, to)
        pair = self._pairs[(i, j)]
        return (pair.low, pair.high) if arm == j else (-pair.high, -pair.low)

    def gaps(self) -> dict[int, tuple[float, float]]:
        """Each alive arm's interval for its gap to the leader, ``mu_arm - mu_best`` (the leader's: (0, 0))."""
        best = self.best
        return {a: self.gap(a, best) for a in self.alive}

    def describe(self) -> str:
        """The result in one line, said as what it is: a choice, a choice within the margin, or (budget) the alive
        set and its leader."""
        best, others = self.best, [a for a in self.alive if a != self.best]
        if self.reason == "one left":
            return f"arm {best} chosen: every other arm was shown worse."
        if self.reason == "within margin":
            return f"arm {best} chosen: equivalent within {self.margin:g} to arms {', '.join(map(str, others))}."
        alive = ", ".join(map(str, self.alive))
        state = "budget spent" if self.reason == "budget" else "still running"
        return f"{state}: not separated: arms {alive} (the best is among them); arm {best} leads."

    # ---------------------------------------------------------------------------------------- updating

    def update(self, values: Sequence[Sequence[float]] | np.ndarray) -> SequentialSelection:
        """Take one look's episodes, shape ``[n, arms]`` (row: an episode every arm played with the same seed;
        NaN for eliminated arms); returns self."""
        if self.done:
            raise ValueError(f"values: the selection stopped ({self.reason}); it takes no more looks.")
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.arms:
            raise ValueError(f"values must have shape [episodes, {self.arms}] (one column per arm), got {x.shape}.")
        alive = self.alive
        self._check(x[:, alive], alive, self.n)
        for a in range(self.arms):
            self._columns[a].append(x[:, a].copy() if self._alive[a] else np.full(len(x), np.nan))
        self._looks.append(len(x))
        if len(x):
            self._feed(self._pairs_of_alive(), len(self._looks) - 1)
        self._decide()
        return self

    def add_arm(self, past_values: Sequence[float] | np.ndarray) -> int:
        """Add an arm mid-run (a checkpoint that landed later) with its values on every episode played so far, in
        seed order (the looks it replayed; ``n`` of them); it joins on its own share of alpha (see the module).
        Returns its index. A stop on ``one left`` or ``within margin`` is reopened (the newcomer may be better); a
        spent budget is not."""
        if self.reason == "budget":
            raise ValueError("past_values: the selection's budget is spent; no arm may join.")
        if self.max_arms is not None and self.arms >= self.max_arms:
            raise ValueError(
                f"past_values: the selection was sized for max_arms={self.max_arms}; none may join past it."
            )
        x = np.asarray(past_values, dtype=np.float64)
        if x.ndim != 1 or len(x) != self.n:
            raise ValueError(f"past_values must be one value per episode played so far ({self.n}), got {x.shape}.")
        arm = self.arms
        self._check(x[:, None], (arm,), 0, "past_values")
        self.reason = None  # a stop is a statement about the arms so far: a new one reopens it
        cuts = np.cumsum([0, *self._looks])
        self._columns.append([x[cuts[i] : cuts[i + 1]].copy() for i in range(len(self._looks))])
        self._alive = np.append(self._alive, True)
        new = [(i, arm) for i in self.alive if i != arm]
        for i in range(arm):
            self._pairs[(i, arm)] = _Pair(self.pair_alpha(arm), self._span)
        for look in range(len(self._looks)):  # replay look by look: the same intervals as if it had been there
            if self._looks[look]:
                self._feed(new, look)
        self._decide()
        return arm

    def finish(self) -> SequentialSelection:
        """Say the budget is spent: ``reason`` becomes ``budget`` unless the selection stopped already; returns
        self."""
        if self.reason is None:
            self.reason = "budget"
        return self

    # --------------------------------------------------------------------------------------- internals

    def _check(self, x: np.ndarray, arms: Sequence[int], first: int, what: str = "values") -> None:
        bad = np.argwhere(~np.isfinite(x))
        if len(bad):
            row, col = (int(v) for v in bad[0])
            raise ValueError(
                f"{what}: arm {arms[col]} is alive but episode {first + row} is {float(x[row, col])!r} "
                "(NaN only for eliminated arms)."
            )
        if self.bounds is not None:
            lo, hi = self.bounds
            out = np.argwhere((x < lo) | (x > hi))
            if len(out):
                row, col = (int(v) for v in out[0])
                raise ValueError(
                    f"{what}: arm {arms[col]}, episode {first + row} is {float(x[row, col])!r}, outside the declared"
                    f" bounds [{lo:g}, {hi:g}]: fix the bounds (values are never clipped)."
                )

    def _pairs_of_alive(self) -> list[tuple[int, int]]:
        alive = self.alive
        return [(i, j) for jj, j in enumerate(alive) for i in alive[:jj]]

    def _feed(self, pairs: list[tuple[int, int]], look: int) -> None:
        """Update ``pairs`` (each has seen every look before ``look``) with look ``look``'s differences."""
        if not pairs:
            return
        first = np.array([p[0] for p in pairs])
        second = np.array([p[1] for p in pairs])
        objs = [self._pairs[p] for p in pairs]
        arms = sorted({*first.tolist(), *second.tolist()})
        where = {a: k for k, a in enumerate(arms)}
        first, second = [where[a] for a in first.tolist()], [where[a] for a in second.tolist()]
        if self.bounds is None:
            history = np.column_stack([np.concatenate(self._columns[a][: look + 1]) for a in arms])
            d = history[:, second] - history[:, first]  # [episodes so far, pairs]
            magnitude = np.abs(history).max(axis=0) if len(history) else np.zeros(len(arms))
            _t_mixture(objs, d, self.plan_n, self.deterministic, np.maximum(magnitude[first], magnitude[second]))
        else:
            new = np.column_stack([self._columns[a][look] for a in arms])
            _betting(objs, new[:, second] - new[:, first], self._span)

    def _decide(self) -> None:
        for i, j in self._pairs_of_alive():
            if not (self._alive[i] and self._alive[j]):
                continue
            pair = self._pairs[(i, j)]
            if not self._may_decide(pair):
                continue
            if pair.low > 0:
                self._eliminate(i, j, pair.low, pair.high)
            elif pair.high < 0:
                self._eliminate(j, i, -pair.high, -pair.low)
        if len(self.alive) == 1:
            if self.arms > 1:
                self.reason = "one left"
            return
        best = self.best
        others = [a for a in self.alive if a != best]
        pairs = [self._pairs[(min(a, best), max(a, best))] for a in others]
        if (
            self.margin > 0
            and all(self._may_decide(p) for p in pairs)
            and all(self.gap(a, best)[1] <= self.margin for a in others)
        ):
            self.reason = "within margin"

    def _may_decide(self, pair: _Pair) -> bool:
        return pair.n >= self.min_n and (self.deterministic or not pair.constant) and not pair.skewed

    def _eliminate(self, arm: int, by: int, low: float, high: float) -> None:
        self._alive[arm] = False
        self.eliminated[arm] = Elimination(len(self._looks), self.n, by, low, high)


class _Pair:
    """One pair's confidence sequence for ``mu_j - mu_i``: its level, running interval and, with bounds, the betting
    state."""

    __slots__ = ("alpha", "n", "low", "high", "constant", "skewed", "log_up", "log_down", "total", "squares")

    def __init__(self, alpha: float, span: float | None) -> None:
        self.alpha = alpha
        self.n = 0
        self.low, self.high = -math.inf, math.inf
        # the t-mixture's guards (it assumes near-symmetric differences): all equal, or a fall observed
        self.constant = self.skewed = False
        self.total = self.squares = 0.0
        self.log_up = self.log_down = None
        if span is not None:
            self.log_up, self.log_down = np.zeros(GRID), np.zeros(GRID)

    def narrow(self, low: float, high: float) -> None:
        lo, hi = max(self.low, low), min(self.high, high)
        self.low, self.high = (low, high) if lo > hi else (lo, hi)


def _t_mixture(pairs: list[_Pair], d: np.ndarray, plan_n: int, deterministic: bool, magnitude: np.ndarray) -> None:
    """The t-mixture CS of :class:`simeval.sequential.SequentialMean` for each column of ``d`` (all the pair's
    differences so far; ``magnitude``: the largest value they came from, for rounding), intersected into its pair.
    Identical differences give no interval unless ``deterministic`` (a zero-width one, kept in the running
    intersection, would decide once they vary)."""
    n = d.shape[0]
    for p, col, mag in zip(pairs, d.T, magnitude, strict=True):
        p.n = n
        p.constant, p.skewed = constant(col, float(mag)), skewed(col)
    if n < 2:
        return
    mean, sd = d.mean(axis=0), d.std(axis=0, ddof=1)
    radii: dict[float, float] = {}
    for p, m, s in zip(pairs, mean, sd, strict=True):
        if p.alpha not in radii:
            radii[p.alpha] = t_mixture_radius(n, p.alpha, t_mixture_scale(plan_n, p.alpha))
        radius = radii[p.alpha]
        if math.isinf(radius) or (p.constant and not deterministic):
            continue
        half = radius * float(s) / math.sqrt(n)
        p.narrow(float(m) - half, float(m) + half)


def _betting(pairs: list[_Pair], d: np.ndarray, span: float) -> None:
    """The hedged betting CS of :class:`simeval.sequential.SequentialMean` (bounds ``+-span``) for each column of
    ``d`` (this look's differences), vectorised over the pairs, intersected into each pair."""
    grid = (np.arange(GRID) + 0.5) / GRID
    alpha = np.array([p.alpha for p in pairs])
    up_log = np.stack([p.log_up for p in pairs])
    down_log = np.stack([p.log_down for p in pairs])
    count = np.array([p.n for p in pairs], dtype=np.float64)
    total = np.array([p.total for p in pairs])
    squares = np.array([p.squares for p in pairs])
    u = (d + span) / (2 * span)
    trunc = 0.5
    for row in u:
        i = count + 1
        mean_before = (0.5 + total) / i
        var_before = (0.25 + squares) / i
        lam = np.sqrt(2 * np.log(2 / alpha) / (var_before * i * np.log(1 + i)))
        delta = row[:, None] - grid[None, :]
        if np.all(lam <= trunc):  # the truncations trunc / m and trunc / (1 - m) exceed trunc: they do not bind
            bet = lam[:, None] * delta
            up_log += np.log1p(bet)
            down_log += np.log1p(-bet)
        else:
            up_log += np.log1p(np.minimum(lam[:, None], trunc / grid[None, :]) * delta)
            down_log += np.log1p(-np.minimum(lam[:, None], trunc / (1 - grid)[None, :]) * delta)
        count = i
        total = total + row
        squares = squares + (row - mean_before) ** 2
    capital = np.maximum(up_log, down_log) + math.log(0.5)
    rejected = capital >= np.log(1 / alpha)[:, None]
    step = 0.5 / GRID
    for k, p in enumerate(pairs):
        p.log_up, p.log_down = up_log[k], down_log[k]
        p.n, p.total, p.squares = int(count[k]), float(total[k]), float(squares[k])
        kept = np.flatnonzero(~rejected[k])
        if len(kept):
            low, high = max(0.0, float(grid[kept[0]]) - step), min(1.0, float(grid[kept[-1]]) + step)
        else:
            low = high = p.total / p.n
        p.narrow(-span + 2 * span * low, -span + 2 * span * high)
