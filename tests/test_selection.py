"""SequentialSelection: choosing the best checkpoint with a guarantee (issue 46, part 3).

The references are computed here, not by the code under test: the t-mixture boundary by
solving its Bayes factor for t with scipy, each pair's error level by hand from the split the
module's docstring proves, and the betting sequence against SequentialPaired's own.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from simeval.sequential import SequentialPaired, t_mixture_scale
from simeval.stats.selection import SequentialSelection

ALPHA = 0.05


def bf_radius(n: int, alpha: float, g: float) -> float:
    """The |t| at which the t-test's Bayes factor with a N(0, g) prior on the effect size reaches 1/alpha."""
    nu = n - 1

    def log_bf(t: float) -> float:
        return (
            -0.5 * math.log(1 + n * g)
            - (nu + 1) / 2 * math.log1p(t * t / (nu * (1 + n * g)))
            + (nu + 1) / 2 * math.log1p(t * t / nu)
        )

    target = math.log(1 / alpha)
    if log_bf(1e6) < target:
        return math.inf
    return optimize.brentq(lambda t: log_bf(t) - target, 0.0, 1e6, xtol=1e-12)


def by_hand_cs(d: np.ndarray, looks: list[int], alpha: float, plan_n: int) -> tuple[float, float]:
    """The running intersection, look by look, of mean +- radius * sd / sqrt(n) over the differences ``d``."""
    g = t_mixture_scale(plan_n, alpha)
    low, high = -math.inf, math.inf
    for n in np.cumsum(looks):
        x = d[:n]
        r = bf_radius(int(n), alpha, g) if n >= 2 else math.inf
        if math.isfinite(r):
            half = r * x.std(ddof=1) / math.sqrt(n)
            low, high = max(low, x.mean() - half), min(high, x.mean() + half)
    return low, high


def test_two_arms_are_a_paired_comparison_at_the_whole_alpha():
    rng = np.random.default_rng(1)
    x = rng.normal([0.0, 0.3], 1.0, (40, 2))
    sel = SequentialSelection(2, 1 - ALPHA, max_arms=2, plan_n=8)
    looks = [8] * 5
    for k in range(5):
        sel.update(x[8 * k : 8 * (k + 1)])
        if sel.done:
            looks = looks[: k + 1]
            break
    low, high = by_hand_cs(x[:, 1] - x[:, 0], looks, ALPHA, 8)
    assert sel.gap(1, 0) == pytest.approx((low, high), rel=1e-9)


def test_the_pairs_of_any_arm_spend_at_most_alpha_whatever_joins():
    for start, joined, max_arms in ((2, 30, None), (8, 10, None), (1, 5, None), (5, 3, 8), (32, 0, None)):
        sel = SequentialSelection(start, 1 - ALPHA, max_arms=max_arms)
        for _ in range(joined):
            sel.add_arm([])
        total = sel.arms
        spent = [0.0] * total
        for j in range(total):
            for i in range(j):
                spent[i] += sel.pair_alpha(j)
                spent[j] += sel.pair_alpha(j)
        assert max(spent) <= ALPHA * (1 + 1e-12)
    # by hand: 8 known arms spread alpha over 7 pairs each; open-ended, the third arm k = 3 gets 6 / (pi^2 2^2) of it,
    # over its 2 pairs
    assert SequentialSelection(8, 0.95, max_arms=8).pair_alpha(5) == pytest.approx(0.05 / 7)
    open_ended = SequentialSelection(2, 0.95)
    assert open_ended.pair_alpha(1) == pytest.approx(0.05 * 6 / math.pi**2)
    assert open_ended.pair_alpha(2) == pytest.approx(0.05 * 6 / (math.pi**2 * 4) / 2)


def test_an_obviously_worse_arm_is_eliminated_named_with_its_look():
    rng = np.random.default_rng(2)
    sel = SequentialSelection(3, 0.95, max_arms=3, plan_n=4)
    sel.update(rng.normal([0.0, 20.0, 20.0], 1.0, (2, 3)))
    assert sel.alive == (0, 1, 2)  # two pairs: below the minimum of 4 before any verdict
    sel.update(rng.normal([0.0, 20.0, 20.0], 1.0, (2, 3)))
    assert sel.alive == (1, 2)
    out = sel.eliminated[0]
    assert (out.look, out.episodes) == (2, 4) and out.by in (1, 2) and out.low > 0
    row = np.array([[np.nan, 20.1, 19.9]] * 4)
    sel.update(row)  # NaN for the eliminated arm is what a caller sends
    assert 0 not in sel.alive


def test_tied_arms_with_margin_zero_run_to_the_budget():
    for seed in range(3):
        rng = np.random.default_rng(seed)
        sel = SequentialSelection(3, 0.95, plan_n=4)
        for _ in range(40):
            sel.update(rng.normal(1.0, 1.0, (4, 3)))
            assert not sel.done
        sel.finish()
        assert sel.reason == "budget" and sel.best in sel.alive
        assert "not separated" in sel.describe()


def test_within_margin_stops_on_the_leader():
    rng = np.random.default_rng(3)
    sel = SequentialSelection(3, 0.95, margin=0.5, max_arms=3, plan_n=4)
    while not sel.done:
        sel.update(rng.normal([1.0, 1.0, -5.0], 0.2, (4, 3)))
    assert sel.reason == "within margin" and sel.alive == (0, 1)
    low, high = sel.gap(1 - sel.best)
    assert high <= 0.5
    assert "equivalent within 0.5" in sel.describe()


def test_one_left():
    rng = np.random.default_rng(4)
    sel = SequentialSelection(3, 0.95, max_arms=3, plan_n=4)
    while not sel.done:
        sel.update(rng.normal([0.0, 1.0, 3.0], 0.5, (4, 3)))
    assert sel.reason == "one left" and sel.best == 2 and sel.alive == (2,)
    with pytest.raises(ValueError, match="stopped"):
        sel.update(np.zeros((4, 3)))


def test_add_arm_replays_its_looks_on_its_own_share():
    rng = np.random.default_rng(5)
    x = rng.normal([0.0, 0.1, 0.2], 1.0, (24, 3))
    sel = SequentialSelection(2, 0.95, plan_n=4)
    for k in range(3):
        sel.update(x[4 * k : 4 * (k + 1), :2])
    arm = sel.add_arm(x[:12, 2])
    assert arm == 2 and sel.alive == (0, 1, 2)
    for k in range(3, 6):
        sel.update(x[4 * k : 4 * (k + 1)])
    share = 0.05 * 6 / (math.pi**2 * 4) / 2
    low, high = by_hand_cs(x[:, 2] - x[:, 0], [4] * 6, share, 4)
    assert sel.gap(2, 0) == pytest.approx((low, high), rel=1e-9)
    low, high = by_hand_cs(x[:, 1] - x[:, 0], [4] * 6, 0.05 * 6 / math.pi**2, 4)
    assert sel.gap(1, 0) == pytest.approx((low, high), rel=1e-9)


def test_a_late_arm_may_reopen_a_stop_and_a_sized_run_refuses_one_more():
    rng = np.random.default_rng(6)
    sel = SequentialSelection(2, 0.95, plan_n=4)
    while not sel.done:
        sel.update(rng.normal([0.0, 3.0], 0.5, (4, 2)))
    assert sel.reason == "one left"
    sel.add_arm(rng.normal(6.0, 0.5, sel.n))
    assert not sel.done and sel.alive == (1, 2)
    while not sel.done:
        sel.update(rng.normal([math.nan, 3.0, 6.0], 0.5, (4, 3)))
    assert sel.reason == "one left" and sel.alive == (2,) and sel.eliminated[1].by == 2
    full = SequentialSelection(2, 0.95, max_arms=2)
    with pytest.raises(ValueError, match="max_arms=2"):
        full.add_arm([])


def test_bounds_use_the_betting_sequence_of_a_paired_comparison():
    rng = np.random.default_rng(7)
    x = (rng.random((12, 2)) < [0.4, 0.7]).astype(float)
    sel = SequentialSelection(2, 0.95, bounds=(0, 1), max_arms=2)
    ref = SequentialPaired(0.95, bounds=(0, 1))
    for k in range(3):
        sel.update(x[4 * k : 4 * (k + 1)])
        ref.update(x[4 * k : 4 * (k + 1), 0], x[4 * k : 4 * (k + 1), 1])
        assert sel.gap(1, 0) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_zero_variance_differences_decide_only_when_deterministic():
    base = np.arange(8.0)
    x = np.column_stack([base, base + 1.0])
    assert SequentialSelection(2, 0.95, max_arms=2).update(x).alive == (0, 1)
    assert SequentialSelection(2, 0.95, max_arms=2, deterministic=True).update(x).alive == (1,)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SequentialSelection(2, confidence=1.0), "confidence must be in"),
        (lambda: SequentialSelection(2, confidence=0.0), "confidence must be in"),
        (lambda: SequentialSelection(2, margin=-1.0), "margin must be"),
        (lambda: SequentialSelection(2, margin=math.nan), "margin must be"),
        (lambda: SequentialSelection(0), "arms must be"),
        (lambda: SequentialSelection(3, max_arms=2), "max_arms must be"),
        (lambda: SequentialSelection(2, bounds=(1, 0)), "bounds must be"),
        (lambda: SequentialSelection(2).update([1.0, 2.0]), r"shape \[episodes, 2\]"),
        (lambda: SequentialSelection(2).update(np.zeros((4, 3))), r"shape \[episodes, 2\]"),
        (lambda: SequentialSelection(2).update([[1.0, math.nan]]), "arm 1 is alive but episode 0 is nan"),
        (lambda: SequentialSelection(2, bounds=(0, 1)).update([[0.5, 2.0]]), "arm 1, episode 0 is 2.0, outside"),
        (lambda: SequentialSelection(2).update(np.zeros((4, 2))).add_arm([1.0]), "one value per episode"),
    ],
)
def test_bad_input_is_a_one_line_error(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def elimination_rates(arms: int, late: int, reps: int, seed: int, confidence: float) -> np.ndarray:
    """How often each arm is eliminated when every arm has the same mean: each is then a best arm, which the
    guarantee keeps with probability >= confidence (each one, not all at once)."""
    eliminated = np.zeros(arms + late)
    for r in range(reps):
        rng = np.random.default_rng([seed, r])
        sel = SequentialSelection(arms, confidence, plan_n=4)
        for look in range(25):
            if look == 5:
                for _ in range(late):
                    sel.add_arm(rng.normal(0.0, 1.0, sel.n))
            x = rng.normal(0.0, 1.0, (4, sel.arms))
            x[:, [a for a in range(sel.arms) if a not in sel.alive]] = np.nan
            sel.update(x)
            if sel.done:
                break
        eliminated[list(sel.eliminated)] += 1
    return eliminated / reps


def test_monte_carlo_slice_no_best_arm_eliminated():
    # 8 equal arms, 4 joining after 5 looks, confidence 0.8, 25 looks of 4 episodes. Measured: each arm eliminated
    # in 0 to 0.07 of 60 runs (0.01 on average); with the split dropped (every pair at 0.2), in 0.13 to 0.32 (0.21).
    rates = elimination_rates(4, 4, reps=60, seed=46, confidence=0.8)
    assert rates.max() <= 0.2 and rates.mean() <= 0.08


def test_the_study_row_at_eight_arms_holds_its_target():
    # benchmarks/stats_validity.py's selection row (8 arms, normal data, the gradual training-run spread): docs
    # measured 36% of the Bonferroni sweep's episodes (uncapped, 100 runs, arms resting); 40 runs here, held to 50%,
    # the target, and no guarantee broken.
    import stats_validity as study

    data = study.SELECTION_DATA[0]
    levels = study.selection_levels("training, gradual", 8)
    n_sweep = study.sweep_n(data, levels, study.SELECTION_POWER, 46)
    assert 250 <= n_sweep <= 310  # by hand: ((2.69 + 0.84) / 0.21)^2 = 282 for the arm nearest outside the margin
    rng = np.random.default_rng(46)
    runs = [study.selection_run(data, levels, rng, 6 * n_sweep, plan_n=64) for _ in range(40)]
    assert not any(r.error for r in runs)
    assert all(r.stop is not None for r in runs)
    assert np.mean([r.episodes[-1] for r in runs]) <= 0.5 * 8 * n_sweep


def test_identical_first_differences_leave_no_zero_width_interval_behind():
    # Four identical differences have a t-mixture interval of no width; kept in the running intersection, it would
    # decide the moment the differences vary. Without bounds and not deterministic, it is no interval at all.
    rng = np.random.default_rng(8)
    first = np.column_stack([np.arange(4.0), np.arange(4.0) + 0.5])
    then = rng.normal(0.0, 1.0, (4, 2))
    sel = SequentialSelection(2, 0.95, max_arms=2, plan_n=4).update(first).update(then)
    assert sel.alive == (0, 1)
    d = np.concatenate([first[:, 1] - first[:, 0], then[:, 1] - then[:, 0]])
    assert sel.gap(1, 0) == pytest.approx(by_hand_cs(d, [8], ALPHA, 4), rel=1e-9)


def test_a_fall_without_bounds_withholds_the_elimination():
    # 41 differences near 1, one of them a fall to -5 (about 60 robust scales from the median): the t-mixture
    # interval (by hand, below) lies above 0, but it assumes near-symmetry, which a fall breaks: no elimination from
    # it (the paired comparisons' skew guard: declare bounds).
    rng = np.random.default_rng(9)
    base = rng.normal(0.0, 1.0, 41)
    d = 1.0 + rng.normal(0.0, 0.1, 41)
    d[20] = -5.0
    x = np.column_stack([base, base + d])
    sel = SequentialSelection(2, 0.95, max_arms=2, plan_n=4).update(x)
    low, high = by_hand_cs(d, [41], ALPHA, 4)
    assert low > 0 and sel.gap(1, 0) == pytest.approx((low, high), rel=1e-9)
    assert sel.alive == (0, 1) and not sel.done


def test_with_bounds_identical_differences_still_decide():
    # The betting sequence holds for any values within the bounds: a checkpoint that always fails beside one that
    # always succeeds is shown worse (the zero-variance rule is the t-mixture's, which such data would fool).
    sel = SequentialSelection(2, 0.95, bounds=(0, 1), max_arms=2)
    for _ in range(10):
        sel.update(np.column_stack([np.zeros(4), np.ones(4)]))
        if sel.done:
            break
    assert sel.reason == "one left" and sel.best == 1 and sel.eliminated[0].low > 0


def test_planned_looks_give_each_pair_the_repeated_interval_of_a_group_sequential_design():
    # The pair's interval at each planned look is GroupSequentialMean's on the pair's differences at the pair's level.
    from simeval.stats.group_sequential import GroupSequentialMean

    rng = np.random.default_rng(12)
    x = rng.normal([0.0, 0.3, 0.5], 1.0, (24, 3))
    plan = (4, 8, 12, 16, 20, 24)
    sel = SequentialSelection(3, 0.95, max_arms=3, looks=plan, rest=False)
    reference = GroupSequentialMean(1 - sel.pair_alpha(2), plan)
    for k in range(6):
        sel.update(x[4 * k : 4 * (k + 1)])
        reference.update(x[4 * k : 4 * (k + 1), 2] - x[4 * k : 4 * (k + 1), 0])
        if 2 not in sel.alive or 0 not in sel.alive or sel.done:
            break
        assert sel.gap(2, 0) == pytest.approx((reference.low, reference.high), rel=1e-9)
    assert k >= 2


def test_planned_looks_refuse_a_look_off_the_plan_in_one_line():
    sel = SequentialSelection(2, 0.95, max_arms=2, looks=(4, 8))
    sel.update(np.zeros((4, 2)) + [0.0, 0.1] + np.arange(4.0)[:, None])
    with pytest.raises(ValueError, match="the planned looks are after 4, 8 episodes per arm; a look to 10") as err:
        sel.update(np.ones((6, 2)))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="looks must be increasing"):
        SequentialSelection(2, looks=(8, 4))
