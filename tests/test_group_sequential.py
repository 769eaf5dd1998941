"""Planned looks (``--design planned``): the group-sequential boundaries, the repeated intervals, the look plan.

The boundaries are checked against published values (gsDesign's ``sfLDOF`` / ld98, two-sided
0.05, five equal looks) and, for unequal looks, against scipy's multivariate normal probability
that no look crosses (the canonical joint distribution of the looks' z statistics); the
repeated intervals against their formula; the error over all looks by a seeded Monte Carlo slice
(the full table is docs/statistics.md's).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sst

from simeval.group_sequential import GroupSequentialMean, boundaries, spent
from simeval.sequential import LookPlan, SequentialMean, SequentialPaired


def test_five_equal_looks_give_the_published_obrien_fleming_type_boundaries():
    assert boundaries(0.05, (1, 2, 3, 4, 5)) == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=3e-4)
    assert boundaries(0.05, (7,)) == pytest.approx((sst.norm.isf(0.025),), rel=1e-9)  # one look: the fixed test
    assert spent(0.05, 1.0) == pytest.approx(0.05) and spent(0.05, 0.0) == 0.0


@pytest.mark.parametrize("alpha, looks", [(0.05, (4, 8, 12, 16)), (0.01, (3, 5, 9, 10)), (0.0025, (8, 16, 24, 40))])
def test_the_chance_that_no_look_crosses_is_one_minus_alpha(alpha, looks):
    c = np.array(boundaries(alpha, looks))
    n = np.array(looks, dtype=float)
    cov = np.sqrt(np.minimum.outer(n, n) / np.maximum.outer(n, n))  # corr(Z_j, Z_k) = sqrt(n_j / n_k)
    finite = np.isfinite(c)
    inside = sst.multivariate_normal(np.zeros(finite.sum()), cov[np.ix_(finite, finite)], abseps=1e-7,
                                     maxpts=2_000_000).cdf(c[finite], lower_limit=-c[finite])  # fmt: skip
    assert 1 - inside == pytest.approx(alpha, rel=2e-3)
    assert np.all(np.diff(c[finite]) < 0)  # O'Brien-Fleming: strict early, near the fixed test's at the end


def test_the_repeated_interval_is_the_t_interval_at_the_looks_boundary_and_never_widens():
    rng = np.random.default_rng(5)
    x = rng.normal(3.0, 2.0, 30)
    seq = GroupSequentialMean(0.95, (10, 20, 30))
    c = boundaries(0.05, (10, 20, 30))
    lows, highs = [], []
    for k, n in enumerate((10, 20, 30)):
        seq.update(x[n - 10 : n])
        half = sst.t.isf(sst.norm.sf(c[k]), n - 1) * x[:n].std(ddof=1) / math.sqrt(n)
        lows.append(x[:n].mean() - half)
        highs.append(x[:n].mean() + half)
        assert (seq.low, seq.high) == pytest.approx((max(lows), min(highs)))
    assert seq.n == 30 and seq.mean == pytest.approx(x.mean())


def test_updates_must_land_on_the_planned_looks_and_values_must_be_finite_and_within_bounds():
    seq = GroupSequentialMean(0.95, (4, 8), name="Ant-v5 / nominal", bounds=(0, 10))
    with pytest.raises(ValueError, match=r"^Ant-v5 / nominal: the planned looks are after 4, 8 episodes; an update "
                                         r"to 3 is not one of them\.$"):  # fmt: skip
        seq.update([1, 2, 3])
    with pytest.raises(ValueError, match="episode 2 returned 11.0, outside the declared bounds"):
        seq.update([1, 2, 11, 3])
    with pytest.raises(ValueError, match="episode 1 is nan"):
        seq.update([1, math.nan, 2, 3])
    assert math.isinf(seq.half_width)
    seq.update([1, 2, 3, 4])
    assert math.isfinite(seq.half_width)


def test_a_look_plan_of_planned_looks_uses_them_where_no_bounds_are_declared():
    plan = LookPlan("until-decided", 0.05, 2, 8, 20, design="planned")
    assert plan.looks() == (8, 16, 20)
    seq = plan.paired(None, "cell")
    assert isinstance(seq.differences, GroupSequentialMean) and seq.differences.looks == (8, 16, 20)
    assert seq.differences.confidence == pytest.approx(1 - 0.05 / 2)
    # declared bounds keep the finite-sample betting sequence, valid at any looks; so does until-precise
    assert isinstance(plan.paired((0, 1), "cell").differences, SequentialMean)
    precise = LookPlan("until-precise", 0.05, 1, 8, 16, precision=1.0, design="planned")
    assert isinstance(precise.mean(None, "cell"), GroupSequentialMean)
    assert isinstance(precise.mean((0, 10), "cell"), SequentialMean)
    # the design travels with the lines; a plan written before it existed reads as anytime
    assert LookPlan.from_data(plan.as_data()) == plan
    old = {k: v for k, v in plan.as_data().items() if k != "design"}
    assert LookPlan.from_data(old).design == "anytime"
    with pytest.raises(ValueError, match="design must be one of anytime, planned, got 'fast'"):
        LookPlan("until-decided", 0.05, 1, 8, 16, design="fast")


def test_planned_looks_hold_their_error_over_every_look_and_decide_a_clear_effect_early():
    rng = np.random.default_rng(33)
    looks = (8, 16, 24, 32, 40)
    misses, early = 0, 0
    reps = 400
    for _ in range(reps):
        a = rng.normal(100, 20, 40)
        seq = SequentialPaired(0.95, looks=looks)
        for n in looks:
            seq.update(a[n - 8 : n], a[n - 8 : n] + rng.normal(0.0, 1.0, 8))
            misses += not (seq.low <= 0.0 <= seq.high)
            if not (seq.low <= 0.0 <= seq.high):
                break
    assert misses / reps <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps)
    for _ in range(100):
        seq = SequentialPaired(0.95, looks=looks)
        for n in looks:
            a = rng.normal(100, 20, 8)
            seq.update(a, a + rng.normal(1.0, 1.0, 8))  # one sd better: the fixed t-test needs about 10
            if seq.verdict == "better":
                early += n <= 24  # O'Brien-Fleming spends little early: the third of five looks
                break
    assert early >= 90
