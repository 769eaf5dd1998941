"""stats.py: checked against hand-computed values, synthetic data with a known answer, scipy and rliable.

rliable (google-research/rliable, archived) is the oracle of the across-task
definitions: its ``metrics`` and ``library`` functions are called on the same
random data, never imported by simeval itself. hypothesis draws the property
cases (derandomized: the same cases every run).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu, permutation_test, trim_mean

from simeval import stats
from simeval.metrics import bootstrap_ci
from simeval.stats import Interval, Paired

PROPS = settings(max_examples=60, derandomize=True, deadline=None)
values = st.lists(st.integers(-50, 50).map(float) | st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=25)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _tasks(matrix: np.ndarray) -> dict[str, np.ndarray]:
    """A (episodes x tasks) matrix, rliable's layout, as simeval's task -> scores mapping."""
    return {f"task{m}": matrix[:, m] for m in range(matrix.shape[1])}


def _family_member(p_value: float, diff: float = 1.0) -> Paired:
    point = Interval(diff, diff, diff)
    return Paired(n=10, mean_a=0.0, mean_b=diff, diff=point, p_improvement=Interval(1, 1, 1), p_value=p_value)


# ------------------------------------------------------------------ mean_ci


def test_mean_ci_is_the_mean_with_metrics_bootstrap_interval():
    data = _rng().normal(3.0, 1.0, size=80)
    ci = stats.mean_ci(data, confidence=0.9, n_resamples=500, seed=4)
    assert ci.value == pytest.approx(data.mean())
    assert (ci.low, ci.high) == bootstrap_ci(data, confidence=0.9, n_resamples=500, seed=4)
    assert ci.low < ci.value < ci.high


def test_mean_ci_collapses_for_one_episode_or_identical_values():
    assert stats.mean_ci([5.0]) == Interval(5.0, 5.0, 5.0)
    assert stats.mean_ci([2.0, 2.0, 2.0]) == Interval(2.0, 2.0, 2.0)


@pytest.mark.parametrize("bad", [[1.0, math.nan], [1.0, math.inf], [], [[1.0, 2.0]]])
def test_mean_ci_rejects_bad_input_naming_the_argument(bad):
    with pytest.raises(ValueError, match=r"^x ") as caught:
        stats.mean_ci(bad)
    assert "\n" not in str(caught.value)


# ----------------------------------------------------------------- paired


def test_a_constant_shift_gives_a_collapsed_interval_exactly():
    a = np.arange(20.0)
    result = stats.paired(a, a + 1)
    assert result.n == 20 and result.mean_a == pytest.approx(9.5) and result.mean_b == pytest.approx(10.5)
    assert result.diff == Interval(1.0, 1.0, 1.0)
    assert result.p_improvement == Interval(1.0, 1.0, 1.0)
    # Random (non-integer) returns: b - a is 1 up to rounding, and so is the interval.
    noisy = _rng().normal(size=50) * 100
    diff = stats.paired(noisy, noisy + 1).diff
    assert (diff.value, diff.low, diff.high) == pytest.approx((1.0, 1.0, 1.0), abs=1e-12)


def test_paired_interval_covers_a_known_shift():
    rng = _rng(1)
    a = rng.normal(0.0, 5.0, size=400)  # the episode's difficulty, shared by both checkpoints
    b = a + 0.5 + rng.normal(0.0, 1.0, size=400)
    result = stats.paired(a, b)
    assert result.diff.low < 0.5 < result.diff.high
    assert result.diff.low < result.diff.value < result.diff.high
    assert result.diff.high - result.diff.low == pytest.approx(2 * 1.96 / math.sqrt(400), rel=0.2)
    assert result.p_value < 0.01
    assert result == stats.paired(a, b)  # deterministic for the seed


def test_paired_interval_coverage_is_near_nominal():
    # 100 synthetic cells with a true shift of 0.3: the 95% interval should miss it about 5 times.
    covered = 0
    for k in range(100):
        rng = _rng(100 + k)
        a = rng.normal(0.0, 3.0, size=60)
        b = a + 0.3 + rng.normal(0.0, 1.0, size=60)
        diff = stats.paired(a, b, n_resamples=500, seed=k, n_permutations=1).diff
        covered += diff.low <= 0.3 <= diff.high
    assert 85 <= covered <= 100


def test_pairing_beats_the_unpaired_intervals_under_common_random_numbers():
    rng = _rng(2)
    a = rng.normal(0.0, 5.0, size=200)
    b = a + 0.5 + rng.normal(0.0, 0.5, size=200)
    paired_width = stats.paired(a, b).diff
    one_width = stats.mean_ci(a)
    assert paired_width.high - paired_width.low < 0.2 * (one_width.high - one_width.low)
    assert paired_width.low > 0  # the shift is resolved; each mean's own interval is ten times wider than it


def test_p_improvement_is_one_when_b_always_wins_and_a_half_for_identical_arrays():
    rng = _rng(3)
    a = rng.normal(size=30)
    wins = stats.paired(a, a + rng.uniform(0.1, 1.0, size=30))
    assert wins.p_improvement == Interval(1.0, 1.0, 1.0)
    same = stats.paired(a, a)
    assert same.p_improvement == Interval(0.5, 0.5, 0.5)
    assert same.diff == Interval(0.0, 0.0, 0.0)
    assert same.p_value == 1.0


def test_p_improvement_counts_ties_as_half_by_hand():
    result = stats.paired([0, 0, 0, 0], [1, 0, -1, 1])  # win, tie, loss, win
    assert result.p_improvement.value == pytest.approx((1 + 0.5 + 0 + 1) / 4)


def test_p_value_is_small_for_a_big_consistent_shift_and_large_for_symmetric_noise():
    rng = _rng(4)
    a = rng.normal(size=40)
    assert stats.paired(a, a + 2.0 + rng.normal(0, 0.1, size=40)).p_value < 0.005
    # b - a = -3..3 without 0: symmetric about 0, the observed mean is exactly the null's centre.
    symmetric = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    assert stats.paired(np.zeros(6), symmetric).p_value == 1.0
    noise = rng.normal(0.0, 1.0, size=200)
    assert stats.paired(np.zeros(200), noise - noise.mean() + 0.01).p_value > 0.5


def _sign_flip_p_value(d: np.ndarray) -> float:
    """The exact two-sided sign-flip p-value of mean(d) == 0, by enumerating all 2**n sign patterns (numpy only)."""
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    means = np.abs(signs @ d) / d.size
    return float(np.mean(means >= abs(d.mean()) * (1 - 1e-9)))


# Data and arguments chosen here, not copied from stats.paired: ties (zero differences), one pair, an odd size,
# all-negative differences, an explicit n_permutations that makes a 12-pair test exact, and an explicit seed.
EXACT_CASES = {
    "ties": (np.zeros(8), np.array([0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), {}),  # 2 * 4 / 2**8 = 1/32
    "one-pair": (np.array([3.0]), np.array([5.0]), {}),
    "odd-size-mixed": (np.arange(9.0), np.arange(9.0) + [1.5, -0.5, 2.0, 0.25, -1.0, 3.0, 0.5, -0.25, 1.0], {}),
    "all-worse": (np.full(7, 10.0), np.full(7, 10.0) - np.array([0.1, 0.4, 0.2, 0.8, 0.3, 0.9, 0.5]), {"seed": 99}),
    "n-permutations-exact": (
        np.linspace(-1.0, 1.0, 12),
        np.linspace(-1.0, 1.0, 12) + np.array([0.3, -0.2, 0.5, 0.1, -0.4, 0.6, 0.2, -0.1, 0.4, 0.3, -0.3, 0.2]),
        {"n_resamples": 500, "n_permutations": 4096, "seed": 5},  # 2**12 = 4096 permutations: exact
    ),
}


@pytest.mark.parametrize("case", sorted(EXACT_CASES))
def test_p_value_equals_the_exact_sign_flip_p_value(case):
    a, b, kwargs = EXACT_CASES[case]
    expected = _sign_flip_p_value(b - a)
    if a.size > 1:  # the enumeration agrees with scipy's one-sample sign-flip test, exact: another formulation
        scipy_exact = permutation_test(
            (b - a,), lambda d, axis: np.mean(d, axis=axis), permutation_type="samples", n_resamples=np.inf
        ).pvalue
        assert expected == pytest.approx(min(1.0, scipy_exact), rel=1e-12)
    assert stats.paired(a, b, **kwargs).p_value == pytest.approx(expected, rel=1e-9)
    if case == "ties":
        assert expected == pytest.approx(1 / 32)
    if case == "one-pair":  # its two sign patterns, d and -d, are equally extreme
        assert expected == 1.0


def test_monte_carlo_p_value_is_within_its_error_of_an_independent_estimate():
    # 40 pairs: 2**40 sign patterns, so stats.paired draws n_permutations of them. The reference is a
    # sign-flip Monte Carlo of its own (another generator, 200,000 draws).
    rng = _rng(40)
    a = rng.normal(size=40)
    d = 0.25 + rng.standard_t(3, size=40)
    n_permutations = 5000
    got = stats.paired(a, a + d, n_permutations=n_permutations, seed=3).p_value
    signs = np.random.default_rng(2024).choice((-1.0, 1.0), size=(200_000, d.size))
    reference = float(np.mean(np.abs(signs @ d) / d.size >= abs(d.mean()) * (1 - 1e-9)))
    assert 0.01 < reference < 0.5  # neither end: the comparison means something
    assert abs(got - reference) <= 4 * np.sqrt(reference * (1 - reference) / n_permutations) + 2 / n_permutations


def test_exact_p_value_by_hand():
    # Six positive differences: of the 2**6 sign patterns, only all-plus and all-minus are as extreme.
    assert stats.paired(np.zeros(6), np.arange(1.0, 7.0)).p_value == pytest.approx(2 / 64)


@pytest.mark.parametrize(
    ("a", "b", "pattern"),
    [
        ([1.0, 2.0], [1.0], r"^a and b must be paired"),
        ([], [], r"^a is empty"),
        ([1.0, 2.0], [1.0, math.nan], r"^b contains NaN \(at index 1\)"),
        ([math.inf, 2.0], [1.0, 2.0], r"^a contains an infinite value"),
    ],
)
def test_paired_rejects_bad_input_in_one_line(a, b, pattern):
    with pytest.raises(ValueError, match=pattern) as caught:
        stats.paired(a, b)
    assert "\n" not in str(caught.value)


@PROPS
@given(a=values)
def test_paired_with_itself_is_no_difference(a):
    result = stats.paired(a, a, n_resamples=200)
    assert result.diff == Interval(0.0, 0.0, 0.0)
    assert result.p_improvement == Interval(0.5, 0.5, 0.5)
    assert result.p_value == 1.0


@PROPS
@given(pairs=st.lists(st.tuples(values.map(lambda v: v[0]), values.map(lambda v: v[0])), min_size=1, max_size=25))
def test_swapping_a_and_b_negates_the_difference_and_complements_p_improvement(pairs):
    a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    ab, ba = stats.paired(a, b, n_resamples=200), stats.paired(b, a, n_resamples=200)
    assert (ba.diff.value, ba.diff.low, ba.diff.high) == pytest.approx(
        (-ab.diff.value, -ab.diff.high, -ab.diff.low), abs=1e-9
    )
    pi, ip = ab.p_improvement, ba.p_improvement
    assert (ip.value, ip.low, ip.high) == pytest.approx((1 - pi.value, 1 - pi.high, 1 - pi.low), abs=1e-9)
    assert ba.p_value == pytest.approx(ab.p_value, abs=1e-9)
    assert ab.diff.low <= ab.diff.high and 0.0 <= pi.low <= pi.high <= 1.0 and 0.0 < ab.p_value <= 1.0


# ------------------------------------------------------------ Holm, verdicts


def _holm_by_hand(p: list[float]) -> list[float]:
    """Holm (1979), step-down, as written: the k-th smallest (from 1) times m - k + 1, running max, cap 1."""
    m = len(p)
    ranked = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for k, i in enumerate(ranked, start=1):
        running = max(running, min(1.0, (m - k + 1) * p[i]))
        out[i] = running
    return out


def test_holm_textbook_example():
    # m = 4; sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running max
    # 0.02, 0.03, 0.06, 0.06: at alpha 0.05 Holm rejects the two smallest, Bonferroni (x4) only 0.005.
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert stats.holm([0.2]) == [0.2]
    assert stats.holm([]) == []


@PROPS
@given(p=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_holm_properties(p):
    adjusted = stats.holm(p)
    assert adjusted == pytest.approx(_holm_by_hand(p), abs=1e-12)
    assert all(raw <= adj <= 1.0 for raw, adj in zip(p, adjusted, strict=True))
    in_raw_order = [adjusted[i] for i in np.argsort(p, kind="stable")]
    assert all(x <= y for x, y in zip(in_raw_order[:-1], in_raw_order[1:], strict=True))
    assert min(adjusted) <= min(1.0, len(p) * min(p)) + 1e-15  # never more conservative than Bonferroni


def test_holm_matches_statsmodels():
    multipletests = pytest.importorskip("statsmodels.stats.multitest").multipletests
    p = _rng(5).uniform(0, 0.1, size=12)
    assert stats.holm(list(p)) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-12)


def test_holm_rejects_bad_p_values():
    with pytest.raises(ValueError, match=r"p_values must lie in \[0, 1\]"):
        stats.holm([0.5, 1.5])
    with pytest.raises(ValueError, match=r"p_values contains NaN"):
        stats.holm([0.5, math.nan])


def test_a_cell_significant_alone_is_inconclusive_in_a_family():
    # A real cell: six positive paired differences, exact p = 2/64 = 0.031.
    cell = stats.paired(np.zeros(6), np.arange(1.0, 7.0))
    worse = stats.paired(np.arange(1.0, 7.0), np.zeros(6))
    nothing = stats.paired(np.ones(6), np.ones(6))
    assert stats.verdicts([cell]) == ["better"]
    assert stats.verdicts([worse]) == ["worse"]
    # With three more cells Holm multiplies its p-value by 4: 0.125.
    assert stats.verdicts([cell, nothing, nothing, nothing]) == ["inconclusive"] * 4


def test_verdicts_use_the_adjusted_p_value_and_the_sign():
    family = [_family_member(0.001, 2.0), _family_member(0.001, -2.0), _family_member(0.04), _family_member(0.5)]
    # Holm: 0.004, 0.003, 0.08, 0.5.
    assert stats.verdicts(family) == ["better", "worse", "inconclusive", "inconclusive"]
    assert stats.verdicts(family, alpha=0.1) == ["better", "worse", "better", "inconclusive"]
    assert stats.verdicts([]) == []


# -------------------------------------------------------- normalized, IQM


def test_normalized_maps_low_to_zero_and_high_to_one():
    out = stats.normalized([10.0, 20.0, 30.0, 40.0], low=20.0, high=40.0)
    assert out.dtype == np.float64 and list(out) == [-0.5, 0.0, 0.5, 1.0]
    assert stats.normalized(np.ones((2, 3)), 0.0, 2.0).shape == (2, 3)
    with pytest.raises(ValueError, match="high and low must differ"):
        stats.normalized([1.0], 3.0, 3.0)
    with pytest.raises(ValueError, match="scores contains NaN"):
        stats.normalized([1.0, math.nan], 0.0, 1.0)


def test_iqm_by_hand_and_against_scipy():
    assert stats.iqm(np.arange(1.0, 9.0)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert stats.iqm([100.0, -100.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == pytest.approx(3.5)  # outliers trimmed
    assert stats.iqm(np.arange(1.0, 11.0)) == pytest.approx(5.5)  # n=10 trims 2 each side: 3..8
    assert stats.iqm([7.0]) == 7.0
    data = _rng(6).exponential(size=(13, 7))
    assert stats.iqm(data) == pytest.approx(trim_mean(data.ravel(), 0.25))
    with pytest.raises(ValueError, match="^x contains NaN"):
        stats.iqm([1.0, math.nan])


# ----------------------------------------------------------- across tasks


def test_aggregate_intervals_contain_the_point_and_shrink_with_more_episodes():
    rng = _rng(7)
    small = {f"t{m}": rng.beta(2, 5, size=20) for m in range(5)}
    large = {f"t{m}": rng.beta(2, 5, size=500) for m in range(5)}
    out_small, out_large = stats.aggregate(small), stats.aggregate(large)
    assert set(out_small) == {"iqm", "mean", "median", "optimality_gap"}
    for name in out_small:
        for ci in (out_small[name], out_large[name]):
            assert ci.low <= ci.value <= ci.high, name
        assert out_large[name].high - out_large[name].low < 0.5 * (out_small[name].high - out_small[name].low), name
    assert out_small == stats.aggregate(small)  # deterministic for the seed
    assert out_small != stats.aggregate(small, seed=1)


def test_aggregate_point_estimates_by_hand_with_unequal_tasks():
    scores = {"a": [0.0, 1.0], "b": [0.5, 0.5, 0.5, 2.0]}
    out = stats.aggregate(scores, n_resamples=50)
    pooled = np.array([0.0, 1.0, 0.5, 0.5, 0.5, 2.0])
    assert out["mean"].value == pytest.approx((0.5 + 0.875) / 2)  # the mean of the task means
    assert out["median"].value == pytest.approx((0.5 + 0.875) / 2)  # two tasks: the median is the same
    assert out["iqm"].value == pytest.approx(trim_mean(pooled, 0.25))  # trims one each side: 0.5, 0.5, 0.5, 1
    assert out["optimality_gap"].value == pytest.approx(1 - np.minimum(pooled, 1).mean())
    assert stats.aggregate(scores, gamma=2.0, n_resamples=50)["optimality_gap"].value == pytest.approx(
        2 - pooled.mean()
    )


def test_the_bootstrap_is_stratified_every_task_keeps_its_size():
    # Task "zero" always 0 (10 episodes), task "one" always >= 1 (30 episodes). In every stratified
    # resample exactly 10 of the 40 clipped scores are 0 and 30 are 1: the optimality gap is 0.25 and
    # the mean of task "zero" 0, so their intervals collapse. An unstratified (pooled) resample would
    # draw a varying number of zeros.
    rng = _rng(8)
    scores = {"zero": np.zeros(10), "one": 1.0 + rng.uniform(size=30)}
    out = stats.aggregate(scores)
    assert out["optimality_gap"] == Interval(0.25, 0.25, 0.25)
    assert out["iqm"].low > 1.0  # the 10 zeros are exactly the trimmed lower quarter, every time
    assert out["mean"].low > 0.5 * 1.0 and out["mean"].high < 0.5 * 2.0
    assert out["mean"].high - out["mean"].low > 0  # task "one" still varies


def test_aggregate_collapses_when_nothing_varies():
    out = stats.aggregate({"a": [1.0, 1.0], "b": [3.0]})
    assert out["mean"] == Interval(2.0, 2.0, 2.0)
    assert out["optimality_gap"] == Interval(0.0, 0.0, 0.0)


def test_aggregate_rejects_bad_input_naming_the_task():
    with pytest.raises(ValueError, match=r"^scores\['b'\] contains NaN"):
        stats.aggregate({"a": [1.0], "b": [math.nan]})
    with pytest.raises(ValueError, match=r"^scores\['a'\] is empty"):
        stats.aggregate({"a": []})
    with pytest.raises(ValueError, match=r"^scores has no tasks"):
        stats.aggregate({})
    with pytest.raises(ValueError, match=r"^statistic must be one of"):
        stats.aggregate_difference({"a": [1.0]}, {"a": [1.0]}, statistic="max")


def test_aggregate_difference_of_a_shift_is_the_shift_with_a_collapsed_interval():
    # Pairing: B is A shifted by 0.1 episode by episode, so every paired resample differs by exactly
    # 0.1 in mean, IQM and median; an unpaired bootstrap would give an interval as wide as A's own.
    rng = _rng(9)
    a = {f"t{m}": rng.uniform(size=50) for m in range(4)}
    b = {task: values + 0.1 for task, values in a.items()}
    for statistic in ("iqm", "mean", "median"):
        ci = stats.aggregate_difference(a, b, statistic=statistic)
        assert (ci.value, ci.low, ci.high) == pytest.approx((0.1, 0.1, 0.1), abs=1e-12), statistic
    own = stats.aggregate(a)["iqm"]
    assert own.high - own.low > 0.05


def test_aggregate_difference_covers_a_known_improvement():
    rng = _rng(10)
    a = {f"t{m}": rng.normal(0.5, 0.2, size=200) for m in range(3)}
    b = {task: values + 0.05 + rng.normal(0, 0.05, size=200) for task, values in a.items()}
    ci = stats.aggregate_difference(a, b, statistic="mean")
    assert ci.low < 0.05 < ci.high and ci.low > 0
    gap = stats.aggregate_difference(a, b, statistic="optimality_gap")
    assert gap.high < 0  # B closer to 1: a smaller gap


def test_aggregate_difference_needs_the_same_tasks_and_episodes():
    with pytest.raises(ValueError, match=r"different tasks: only in scores_a \['x'\], only in scores_b \['y'\]"):
        stats.aggregate_difference({"x": [1.0]}, {"y": [1.0]})
    with pytest.raises(ValueError, match=r"task 'x': scores_a has 2 episodes and scores_b 1"):
        stats.aggregate_difference({"x": [1.0, 2.0]}, {"x": [1.0]})


def test_probability_of_improvement_by_hand():
    # B = [1, 2] against A = [0, 1]: of the 4 pairs B wins 3 and ties 1 -> 3.5 / 4.
    assert stats.probability_of_improvement({"t": [0.0, 1.0]}, {"t": [1.0, 2.0]}) == pytest.approx(0.875)
    two = stats.probability_of_improvement({"t": [0.0, 1.0], "u": [5.0]}, {"t": [1.0, 2.0], "u": [0.0, 1.0, 2.0]})
    assert two == pytest.approx((0.875 + 0.0) / 2)
    same = {"t": [1.0, 2.0, 3.0]}
    assert stats.probability_of_improvement(same, same) == 0.5
    a, b = _rng(11).normal(size=17), _rng(12).normal(size=9)
    u = mannwhitneyu(b, a).statistic
    assert stats.probability_of_improvement({"t": a}, {"t": b}) == pytest.approx(u / (17 * 9))


def test_performance_profile_by_hand():
    scores = {"a": [0.0, 0.5], "b": [1.0]}
    assert list(stats.performance_profile(scores, [-1.0, 0.0, 0.5, 1.0])) == pytest.approx([1, 2 / 3, 1 / 3, 0])
    profile = stats.performance_profile_ci(scores, [-1.0, 0.0, 1.0], n_resamples=200)
    assert list(profile.value) == pytest.approx([1, 2 / 3, 0])
    assert profile.low[0] == profile.high[0] == 1.0 and profile.low[2] == profile.high[2] == 0.0
    # Task "b" (one episode) always contributes its 1.0; task "a" contributes 0, 1 or 2 scores above 0.
    assert profile.low[1] == pytest.approx(1 / 3) and profile.high[1] == 1.0


def test_performance_profile_interval_contains_the_profile_and_is_deterministic():
    rng = _rng(13)
    scores = {f"t{m}": rng.uniform(size=100) for m in range(4)}
    taus = np.linspace(0, 1, 21)
    profile = stats.performance_profile_ci(scores, taus)
    assert np.all(profile.low <= profile.value) and np.all(profile.value <= profile.high)
    assert np.array_equal(profile.high, stats.performance_profile_ci(scores, taus).high)
    assert np.all(np.diff(profile.value) <= 0)  # a fraction above a rising threshold never rises


# ------------------------------------------------------------ rliable oracle


@pytest.fixture(scope="module")
def rliable():
    """rliable's modules, or a skip where it is not installed (a failure in CI, SIMEVAL_REQUIRE_ALL=1)."""
    pytest.importorskip("arch")
    return pytest.importorskip("rliable.library")


@pytest.mark.parametrize("seed", range(5))
def test_point_estimates_equal_rliable(rliable, seed):
    from rliable import library, metrics

    rng = _rng(20 + seed)
    matrix = rng.beta(0.7, 0.7, size=(int(rng.integers(3, 40)), int(rng.integers(1, 8)))) * 1.4 - 0.2
    other = rng.beta(0.9, 0.7, size=(int(rng.integers(3, 40)), matrix.shape[1])) * 1.4 - 0.2
    out = stats.aggregate(_tasks(matrix), n_resamples=20)
    assert out["iqm"].value == pytest.approx(metrics.aggregate_iqm(matrix), abs=1e-12)
    assert out["mean"].value == pytest.approx(metrics.aggregate_mean(matrix), abs=1e-12)
    assert out["median"].value == pytest.approx(metrics.aggregate_median(matrix), abs=1e-12)
    assert out["optimality_gap"].value == pytest.approx(metrics.aggregate_optimality_gap(matrix), abs=1e-12)
    assert stats.aggregate(_tasks(matrix), gamma=0.5, n_resamples=20)["optimality_gap"].value == pytest.approx(
        metrics.aggregate_optimality_gap(matrix, gamma=0.5), abs=1e-12
    )
    assert stats.iqm(matrix) == pytest.approx(metrics.aggregate_iqm(matrix), abs=1e-12)
    # probability_of_improvement(a, b) is P(B > A): rliable's (scores_x=B, scores_y=A).
    assert stats.probability_of_improvement(_tasks(matrix), _tasks(other)) == pytest.approx(
        metrics.probability_of_improvement(other, matrix), abs=1e-12
    )
    taus = np.linspace(-0.3, 1.3, 17)
    assert stats.performance_profile(_tasks(matrix), taus) == pytest.approx(
        library.score_distributions(matrix, taus), abs=1e-12
    )


def _close_intervals(ours: tuple[float, float], theirs: tuple[float, float]) -> bool:
    # Two independent 2000-resample bootstraps: their percentile ends differ by a few % of the width.
    tolerance = 0.15 * (theirs[1] - theirs[0]) + 1e-12
    return abs(ours[0] - theirs[0]) <= tolerance and abs(ours[1] - theirs[1]) <= tolerance


def test_stratified_intervals_agree_with_rliable(rliable):
    from rliable import library, metrics

    matrix = _rng(30).beta(0.8, 1.5, size=(40, 5))
    np.random.seed(0)  # rliable's StratifiedBootstrap draws from numpy's global generator
    functions = (metrics.aggregate_iqm, metrics.aggregate_mean, metrics.aggregate_median)
    points, intervals = library.get_interval_estimates(
        {"x": matrix}, lambda s: np.array([f(s) for f in functions]), reps=2000
    )
    ours = stats.aggregate(_tasks(matrix))
    for k, name in enumerate(("iqm", "mean", "median")):
        assert ours[name].value == pytest.approx(points["x"][k])
        assert _close_intervals((ours[name].low, ours[name].high), tuple(intervals["x"][:, k])), name
    taus = np.linspace(0, 1, 6)
    profile_points, profile_intervals = library.create_performance_profile({"x": matrix}, taus, reps=2000)
    profile = stats.performance_profile_ci(_tasks(matrix), taus)
    assert profile.value == pytest.approx(profile_points["x"])
    for k in range(1, 5):
        assert _close_intervals((profile.low[k], profile.high[k]), tuple(profile_intervals["x"][:, k])), taus[k]


def _profile_arrays(profile) -> tuple:
    return profile.value, profile.low, profile.high


@pytest.mark.parametrize("chunk", [1, 7, 3 * 47 + 1, 1000])
def test_the_bootstrap_chunk_size_changes_no_number(chunk, monkeypatch):
    """Resamples are drawn in chunks (memory); each task draws from a generator of its own, so how the rows are
    chunked (here down to one row at a time) leaves every interval as in one chunk, on one task and on several."""
    rng = np.random.default_rng(5)
    scores_a = {"t0": rng.normal(0.5, 0.2, 47), "t1": rng.normal(0.3, 0.1, 31), "t2": rng.normal(0.8, 0.3, 12)}
    scores_b = {k: v + rng.normal(0.05, 0.1, v.size) for k, v in scores_a.items()}
    x, y = scores_a["t0"], scores_b["t0"]
    taus = np.linspace(0.0, 1.0, 5)

    def everything():
        return (
            stats.mean_ci(x, n_resamples=300),
            stats.paired(x, y, n_resamples=300, n_permutations=300),
            stats.aggregate(scores_a, n_resamples=300),
            stats.aggregate_difference(scores_a, scores_b, n_resamples=300),
            [p.tolist() for p in _profile_arrays(stats.performance_profile_ci(scores_a, taus, n_resamples=300))],
        )

    one_chunk = everything()
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", chunk)
    assert everything() == one_chunk
