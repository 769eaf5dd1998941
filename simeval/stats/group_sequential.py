"""Planned looks: a group-sequential design with O'Brien-Fleming-type alpha spending, and its repeated intervals.

When the looks are fixed before the run (every ``look_every`` episodes up to
``max_episodes``, as the launcher's are), a group-sequential design spends the error
over exactly those looks and nowhere else: it needs about as many episodes at most as
the fixed-n t-test of the same power, and stops early when the effect is clear, so it
uses fewer on average (docs/statistics.md prints how many fewer, per effect size). The
price: the looks and the budget are part of the design. Adding looks or episodes later
(a resume with a larger ``--max-episodes``) voids the guarantee; the anytime-valid
sequences of :mod:`simeval.stats.sequential` keep it.

* The boundaries: Lan & DeMets (1983, "Discrete sequential boundaries for clinical
  trials", Biometrika) with their O'Brien-Fleming-type spending function
  ``alpha(t) = 4 - 4 Phi(z_{1 - alpha/4} / sqrt(t))`` (``alpha / 2`` a side) over the information fractions
  ``t_k = n_k / n_K``, two-sided, computed by the recursive numerical integration of
  Armitage, McPherson & Rowe (1969) as Jennison & Turnbull (2000, "Group Sequential
  Methods with Applications to Clinical Trials", ch. 19) set it out.
* The statistic: the t statistic of the values at each look, through its
  z-equivalent (Jennison & Turnbull, section 11.2): a look rejects ``m`` when
  ``|t| >= t_{n_k - 1}^{-1}(Phi(c_k))``. The repeated confidence intervals (ch. 9)
  ``mean +- t_{n_k-1}^{-1}(Phi(c_k)) sd / sqrt(n_k)`` hold the true mean at every look
  at once with the stated confidence (exactly for normal values in the limit of known
  variance, asymptotically otherwise); the verdict reads them, so they cannot disagree.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from simeval.stats.running import RunningInterval, bounds_of, checked

Region = tuple[np.ndarray, np.ndarray, np.ndarray]  # grid, Simpson weights, sub-density
SPENDING = "O'Brien-Fleming-type (Lan-DeMets)"


def spent(alpha: float, t: float) -> float:
    """The error the O'Brien-Fleming-type spending function has spent by information fraction ``t``: two-sided,
    ``alpha / 2`` on each side, ``alpha(t) = 4 - 4 Phi(z_{1 - alpha/4} / sqrt(t))`` (gsDesign's ``sfLDOF`` and
    ld98's two-sided form)."""
    from scipy.stats import norm

    if t <= 0:
        return 0.0
    return float(min(alpha, 4.0 * norm.sf(norm.isf(alpha / 4.0) / math.sqrt(min(t, 1.0)))))


def _crossing(c: float, tk: float, delta: float, region: Region | None) -> float:
    """The chance, under the null, of running on to look ``k`` (information ``tk``) and crossing ``+-c`` there."""
    from scipy.stats import norm

    if region is None:
        return float(2.0 * norm.sf(c))
    grid, weights, density = region
    b, sd = c * math.sqrt(tk), math.sqrt(delta)
    tails = norm.cdf((-b - grid) / sd) + norm.sf((b - grid) / sd)
    return float(np.sum(weights * density * tails))


def _carried(c: float, tk: float, delta: float, region: Region | None) -> Region:
    """The sub-density of ``S_k = Z_k sqrt(t_k)`` over the runs still going after look ``k`` (``|S_k| <
    c sqrt(t_k)``), on a Simpson grid fine against the next increment's spread."""
    from scipy.stats import norm

    half = min(c, 8.0) * math.sqrt(tk)  # beyond 8 sd: under 1e-15 of the mass
    step = min(2 * half / 400, math.sqrt(delta) / 8)
    m = int(math.ceil(half / step)) * 2  # an even number of intervals
    grid = np.linspace(-half, half, m + 1)
    simpson = np.ones(m + 1)
    simpson[1:-1:2], simpson[2:-1:2] = 4.0, 2.0
    weights = simpson * (2 * half / m) / 3.0
    if region is None:
        return grid, weights, norm.pdf(grid / math.sqrt(tk)) / math.sqrt(tk)
    before, before_weights, before_density = region
    sd = math.sqrt(delta)
    kernel = norm.pdf((grid[:, None] - before[None, :]) / sd) / sd
    return grid, weights, kernel @ (before_weights * before_density)


def _excess(c: float, target: float, tk: float, delta: float, region: Region | None) -> float:
    return _crossing(c, tk, delta, region) - target


@functools.lru_cache(maxsize=512)
def boundaries(alpha: float, looks: tuple[int, ...]) -> tuple[float, ...]:
    """Two-sided z boundaries ``c_k`` for looks after ``looks[k]`` values (cumulative, increasing; the last is
    the budget): under the null, the chance that some ``|Z_k| >= c_k`` is ``alpha``, spent as :func:`spent`
    says. ``inf`` where a look spends nothing a double can hold."""
    from scipy.optimize import brentq

    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}.")
    n = np.asarray(looks, dtype=np.float64)
    if not len(n) or n[0] <= 0 or np.any(np.diff(n) <= 0):
        raise ValueError(f"looks must be increasing positive counts, got {looks!r}.")
    out: list[float] = []
    region = None
    t_before, spent_before = 0.0, 0.0
    for tk in n / n[-1]:
        target, delta = spent(alpha, tk) - spent_before, tk - t_before
        c = math.inf
        if target > 1e-15:
            excess = functools.partial(_excess, target=target, tk=tk, delta=delta, region=region)
            hi = 1.0
            while excess(hi) > 0:
                hi *= 2.0
            c = 1e-9 if excess(1e-9) <= 0 else brentq(excess, 1e-9, hi, xtol=1e-10)
            spent_before += target
        out.append(c)
        region = _carried(c, tk, delta, region)
        t_before = tk
    return tuple(out)


class GroupSequentialMean(RunningInterval):
    """Repeated confidence intervals for a mean over planned looks (a group-sequential design).

    Feed it the values in seed order so that the count after each update is one of
    ``looks`` (``update(x)``); after every look ``low``/``high`` hold the mean, at every
    look at once, with the stated confidence. The running intersection is reported, so an
    interval never widens.

    Args:
        confidence: the probability that the intervals at every look all hold the mean.
        looks: the values after which a look is taken, increasing; the last is the budget.
            Looks before 2 values give no interval and spend no error.
        name: what errors call this stream (a cell's name).
        bounds: ``(low, high)`` on one value: a value outside them is a ValueError naming the
            episode (never clipped). The intervals do not use them.
    """

    def __init__(
        self,
        confidence: float,
        looks: Sequence[int],
        name: str = "the evaluation",
        bounds: tuple[float, float] | None = None,
    ) -> None:
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
        self.looks = tuple(int(n) for n in looks)
        self.confidence, self.name, self.bounds = confidence, name, bounds_of(bounds)
        self.alpha = 1.0 - confidence
        spending = tuple(n for n in self.looks if n >= 2)
        if not spending:
            raise ValueError(f"{name}: planned looks need at least one look after 2 or more values, got {looks!r}.")
        self._bounds = dict(zip(spending, boundaries(self.alpha, spending), strict=True))
        super().__init__()
        self.constant_is_exact = True  # as SequentialMean's: whether a look of identical values is kept

    def update(self, x: Sequence[float] | np.ndarray) -> GroupSequentialMean:
        """Take the next values, in seed order, up to the next planned look; returns self."""
        from scipy.stats import norm, t

        x = checked(x, self.bounds, self.name, self.n)
        n = self.n + len(x)
        if n not in self.looks:
            raise ValueError(
                f"{self.name}: the planned looks are after {', '.join(map(str, self.looks))} episodes; "
                f"an update to {n} is not one of them."
            )
        self._values.extend(x.tolist())
        c = self._bounds.get(n)
        if c is None or not math.isfinite(c):
            return self
        values = np.asarray(self._values)
        mean, sd = float(values.mean()), float(values.std(ddof=1))
        half = float(t.isf(norm.sf(c), n - 1)) * sd / math.sqrt(n) if sd > 0 else 0.0
        low, high = mean - half, mean + half
        self._narrow(low, high, provisional=sd == 0 and not self.constant_is_exact)
        return self
