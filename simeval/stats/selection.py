"""Choosing the best of several checkpoints with a guarantee: successive elimination on paired confidence sequences.

Every pair of arms (checkpoints) playing the same episodes keeps an anytime-valid confidence
sequence for the difference of their means, the same sequences as
:class:`simeval.sequential.SequentialPaired` (the t-mixture CS without bounds, the betting CS
with them), here vectorised over the pairs. An arm is eliminated once some alive arm is
shown better than it; the run stops when one arm is left, or when every alive arm is shown
within ``margin`` of the leader, or when the caller's budget is spent.

Which arms play. The leader plays every look; an arm shown within ``margin`` of the leader
(``UCB(mu_arm - mu_leader) <= margin``: *settled*) rests: it plays no look while the leader
stays the leader, and its pairs keep the interval they had. When the leader changes, a resting
arm not settled against the new one plays again: first the looks it missed, on their seeds
(:meth:`SequentialSelection.catch_up`), then the next look with the others. ``rest=False``
makes every alive arm play every look. Resting saves the episodes of the arms settled early
(those well below the leader, or well within the margin) while the close calls are decided.

Why the guarantee holds (any looks, any arms joining, arms resting). Call the best arm ``b``. Only the
pairs that involve ``b`` must hold: while every sequence of a pair ``(b, j)`` holds, no
``LCB(mu_j - mu_b) > 0`` (so ``b`` is never eliminated) and ``UCB(mu_b - mu_c) <= margin``
whenever the rule stops ``within margin`` with the leader ``c``. A pair's ``n``-th difference is
always the ``n``-th episode in seed order, whenever its arms play it (a resting arm catches up
on the same seeds), and a confidence sequence holds at every ``n`` at once: reading a pair's
interval at data-dependent times (an arm resting, catching up) changes none of these events.
So it is enough that the
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

Planned looks (``looks``, without bounds): each pair's interval is the repeated confidence
interval of a group-sequential design over exactly those looks, at the pair's level
(:mod:`simeval.stats.group_sequential`: exact for normal differences in the limit of known
variance, asymptotic otherwise), holding at every planned look at once. Pairs are read only
at planned looks (an arm resting, catching up or joining later plays the same looks, on
the same seeds), so the events above hold with the same probability; a look off the plan
is refused, and the budget is the plan's last look.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from simeval.stats.group_sequential import boundaries
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
        rest: an arm settled within ``margin`` of the leader rests (plays no look) until the
            leader changes (see the module); False: every alive arm plays every look.
        looks: planned looks (without bounds): the episodes per arm after which a look is
            taken, increasing, the last the budget. Each pair's interval is then the repeated
            confidence interval of a group-sequential design over exactly those looks
            (:class:`simeval.stats.group_sequential.GroupSequentialMean`'s, at the pair's level): narrower than
            the t-mixture's, valid at those looks only; an update past the plan is refused.
            ``None``: anytime (the t-mixture). With bounds, the betting CS either way.
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
        rest: bool = True,
        looks: Sequence[int] | None = None,
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
        self.rest = bool(rest)
        self.planned: tuple[int, ...] | None = None
        if looks is not None:
            planned = tuple(int(n) for n in looks)
            if not planned or planned[0] < 1 or any(b <= a for a, b in zip(planned, planned[1:], strict=False)):
                raise ValueError(f"looks must be increasing whole numbers >= 1 (episodes per arm), got {looks!r}.")
            if planned[-1] < 2:
                raise ValueError(f"looks: the plan needs a look after 2 or more episodes, got {looks!r}.")
            self.planned = planned
        self._planned_radii: dict[float, dict[int, float]] = {}
        self._block = self.max_arms if self.max_arms is not None else int(arms)
        self._columns: list[list[np.ndarray]] = [[] for _ in range(int(arms))]  # each arm's values, look by look
        self._looks: list[int] = []  # episodes per look
        self._alive = np.ones(int(arms), dtype=bool)
        self._active = np.ones(int(arms), dtype=bool)  # the arms that play the next look
        self._played: list[int] = [0] * int(arms)  # looks each arm has values for (a prefix of the looks)
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
    def active(self) -> tuple[int, ...]:
        """The arms that play the next look: the leader and every alive arm not settled against it (every alive
        arm with ``rest=False``); none once the selection stopped. An active arm that rested first plays the looks
        it missed (:meth:`behind`, :meth:`catch_up`)."""
        if self.done:
            return ()
        return tuple(int(i) for i in np.flatnonzero(self._active & self._alive))

    @property
    def resting(self) -> tuple[int, ...]:
        """The alive arms that do not play the next look (settled within the margin of the leader); none once the
        selection stopped."""
        if self.done:
            return ()
        active = set(self.active)
        return tuple(a for a in self.alive if a not in active)

    def looks_played(self, arm: int) -> int:
        """The looks ``arm`` has values for: ``looks`` for an arm that played every one, fewer for one that rested
        (its episodes: the first ``looks_played`` looks')."""
        return self._played[arm]

    def behind(self, arm: int) -> int:
        """How many episodes ``arm`` missed while it rested that it must play (:meth:`catch_up`) before the next
        look; 0 for an arm that is not active."""
        if arm not in self.active:
            return 0
        return int(sum(self._looks[self._played[arm] :]))

    def episodes(self, arm: int) -> int:
        """The episodes ``arm`` has played (its values the selection holds)."""
        return int(sum(self._looks[: self._played[arm]]))

    @property
    def done(self) -> bool:
        """Whether the selection has stopped (``reason`` says why)."""
        return self.reason is not None

    def means(self) -> dict[int, float]:
        """Each alive arm's mean over the episodes it played (NaN before any)."""
        return {a: self._mean(a) for a in self.alive}

    def _mean(self, arm: int) -> float:
        played = self._columns[arm][: self._played[arm]]
        return float(np.concatenate(played).mean()) if self.episodes(arm) else math.nan

    @property
    def best(self) -> int:
        """The leader: among the alive arms that played every look, the best mean (the lowest index among equals;
        the first arm before any episode)."""
        current = [a for a in self.alive if self._played[a] == len(self._looks)] or list(self.alive)
        if not self.n:
            return current[0]
        means = {a: self._mean(a) for a in current}
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
        """Take one look's episodes, shape ``[n, arms]`` (row: an episode every active arm played with the same
        seed; NaN, or anything, for the arms not :attr:`active`: they are not read); returns self."""
        if self.done:
            raise ValueError(f"values: the selection stopped ({self.reason}); it takes no more looks.")
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.arms:
            raise ValueError(f"values must have shape [episodes, {self.arms}] (one column per arm), got {x.shape}.")
        active = self.active
        late = self._lagging()
        if late:
            raise ValueError(
                f"values: arm {late[0]} rested and plays again: give its {self.behind(late[0])} missed episode(s) "
                "with catch_up() before the next look."
            )
        self._check(x[:, active], active, self.n)
        if self.planned is not None and self.n + len(x) not in self.planned:
            raise ValueError(
                f"values: the planned looks are after {', '.join(map(str, self.planned))} episodes per arm; a look "
                f"to {self.n + len(x)} is not one of them."
            )
        for a in range(self.arms):
            self._columns[a].append(x[:, a].copy() if a in active else np.full(len(x), np.nan))
        for a in active:
            self._played[a] += 1
        self._looks.append(len(x))
        self._sync()
        self._decide()
        return self

    def catch_up(self, arm: int, missed_values: Sequence[float] | np.ndarray) -> SequentialSelection:
        """Give an arm that rested and plays again (:attr:`active`, :meth:`behind` > 0) its values on the episodes
        it missed, in seed order (the looks after its last, on their seeds); its pairs take them look by look, as
        if it had played them then. Decisions wait for the next :meth:`update`. Returns self."""
        if arm not in self._lagging():
            raise ValueError(f"missed_values: arm {arm!r} missed no look it must play (it is not behind).")
        x = np.asarray(missed_values, dtype=np.float64)
        if x.ndim != 1 or len(x) != self.behind(arm):
            raise ValueError(
                f"missed_values must be one value per episode arm {arm} missed ({self.behind(arm)}), got {x.shape}."
            )
        first = self._played[arm]
        self._check(x[:, None], (arm,), self.episodes(arm), "missed_values")
        cuts = np.cumsum([0, *self._looks[first:]])
        for k, look in enumerate(range(first, len(self._looks))):
            self._columns[arm][look] = x[cuts[k] : cuts[k + 1]].copy()
        self._played[arm] = len(self._looks)
        self._sync()
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
        if any(self._played[a] < len(self._looks) for a in self.active):
            raise ValueError(
                "past_values: an arm that plays again has not caught up (catch_up) yet; add the arm after."
            )
        arm = self.arms
        self._check(x[:, None], (arm,), 0, "past_values")
        self.reason = None  # a stop is a statement about the arms so far: a new one reopens it
        cuts = np.cumsum([0, *self._looks])
        self._columns.append([x[cuts[i] : cuts[i + 1]].copy() for i in range(len(self._looks))])
        self._alive = np.append(self._alive, True)
        self._active = np.append(self._active, True)
        self._played.append(len(self._looks))
        for i in range(arm):
            self._pairs[(i, arm)] = _Pair(self.pair_alpha(arm), self._span)
        self._sync()  # look by look: the same intervals as if it had been there
        self._decide(resume=False)
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

    def _lagging(self) -> list[int]:
        """The active arms that rested and must play the episodes they missed (:meth:`behind`) before the next
        look."""
        return [a for a in self.active if self.behind(a)]

    def _sync(self) -> None:
        """Feed every pair of alive arms the looks both arms have values for and it has not taken, look by look."""

        def lags(pair: tuple[int, int]) -> bool:
            return self._pairs[pair].looks < min(self._played[pair[0]], self._played[pair[1]])

        due = [p for p in self._pairs_of_alive() if lags(p)]
        while due:
            look = min(self._pairs[p].looks for p in due)
            now = [p for p in due if self._pairs[p].looks == look]
            if self._looks[look]:
                self._feed(now, look)
            for p in now:
                self._pairs[p].looks += 1
            due = [p for p in due if lags(p)]

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
            _t_mixture(objs, d, self._radius, self.deterministic, np.maximum(magnitude[first], magnitude[second]))
        else:
            new = np.column_stack([self._columns[a][look] for a in arms])
            _betting(objs, new[:, second] - new[:, first], self._span)

    def _radius(self, n: int, alpha: float) -> float:
        """A pair's radius after ``n`` differences, in units of ``sd / sqrt(n)`` (inf: no interval): the t-mixture's
        (anytime), or the planned design's repeated interval at look ``n``."""
        if self.planned is None:
            return t_mixture_radius(n, alpha, t_mixture_scale(self.plan_n, alpha))
        if alpha not in self._planned_radii:
            from scipy.stats import norm, t

            spending = tuple(k for k in self.planned if k >= 2)
            self._planned_radii[alpha] = {
                k: (float(t.isf(norm.sf(c), k - 1)) if math.isfinite(c) else math.inf)
                for k, c in zip(spending, boundaries(alpha, spending), strict=True)
            }
        return self._planned_radii[alpha].get(n, math.inf)

    def _decide(self, resume: bool = True) -> None:
        """Eliminate, then stop or choose who plays the next look. ``resume=False`` (an arm joining between
        looks): no resting arm is woken, so the next look's players are those that were to play, and the newcomer."""
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
            self._active = self._alive.copy()
            if self.arms > 1:
                self.reason = "one left"
            return
        best = self.best
        settled = {a for a in self.alive if a != best and self._settled(a, best)}
        if len(settled) == len(self.alive) - 1:
            self.reason = "within margin"
        active = self._alive.copy()
        if self.rest:
            active[list(settled)] = False
        if not resume:
            active &= self._active
            active[best] = True
        self._active = active

    def _settled(self, arm: int, leader: int) -> bool:
        """Whether ``arm`` is shown within the margin of ``leader``: ``UCB(mu_arm - mu_leader) <= margin``, from a
        pair that may decide."""
        pair = self._pairs[(min(arm, leader), max(arm, leader))]
        return self.margin > 0 and self._may_decide(pair) and self.gap(arm, leader)[1] <= self.margin

    def _may_decide(self, pair: _Pair) -> bool:
        return pair.n >= self.min_n and (self.deterministic or not pair.constant) and not pair.skewed

    def _eliminate(self, arm: int, by: int, low: float, high: float) -> None:
        self._alive[arm] = False
        self.eliminated[arm] = Elimination(len(self._looks), self.n, by, low, high)


class _Pair:
    """One pair's confidence sequence for ``mu_j - mu_i``: its level, running interval and, with bounds, the betting
    state."""

    __slots__ = ("alpha", "n", "looks", "low", "high", "constant", "skewed", "log_up", "log_down", "total", "squares")

    def __init__(self, alpha: float, span: float | None) -> None:
        self.alpha = alpha
        self.n = 0
        self.looks = 0  # the looks it has taken (both arms' values)
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


def _t_mixture(
    pairs: list[_Pair], d: np.ndarray, radius_of: Callable[[int, float], float], deterministic: bool,
    magnitude: np.ndarray,
) -> None:  # fmt: skip
    """The t-based interval (``radius_of(n, alpha)`` in units of ``sd / sqrt(n)``: the t-mixture CS of
    :class:`simeval.sequential.SequentialMean`, or a planned design's) for each column of ``d`` (all the pair's
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
            radii[p.alpha] = radius_of(n, p.alpha)
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
