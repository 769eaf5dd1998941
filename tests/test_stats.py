"""stats.py: checked against hand-computed values, synthetic data with a known answer, scipy and rliable.

rliable (google-research/rliable, archived) is the oracle of the across-task
definitions: its ``metrics`` and ``library`` functions are called on the same
random data, never imported by simeval itself. hypothesis draws the property
cases (derandomized: the same cases every run).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu, trim_mean, ttest_1samp

from simeval import stats
from simeval.metrics import bootstrap_ci
from simeval.stats import Interval

PROPS = settings(max_examples=60, derandomize=True, deadline=None)
values = st.lists(st.integers(-50, 50).map(float) | st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=25)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _tasks(matrix: np.ndarray) -> dict[str, np.ndarray]:
    """A (episodes x tasks) matrix, rliable's layout, as simeval's task -> scores mapping."""
    return {f"task{m}": matrix[:, m] for m in range(matrix.shape[1])}


# ------------------------------------------------------------------ mean_ci


def test_mean_ci_is_the_mean_with_metrics_bootstrap_interval_by_name():
    data = _rng().normal(3.0, 1.0, size=80)
    ci = stats.mean_ci(data, confidence=0.9, n_resamples=500, seed=4, method="percentile bootstrap")
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
    result = stats.paired(a, a + 1, deterministic=True)  # a verdict from zero variance needs the declaration
    assert result.n == 20 and result.mean_a == pytest.approx(9.5) and result.mean_b == pytest.approx(10.5)
    assert result.diff == Interval(1.0, 1.0, 1.0)
    assert (result.verdict, result.method, result.b_wins, result.pairing_gain) == ("better", "t", 1.0, math.inf)
    # Random (non-integer) returns: b - a is 1 up to rounding, and so is the interval.
    noisy = _rng().normal(size=50) * 100
    diff = stats.paired(noisy, noisy + 1).diff
    assert (diff.value, diff.low, diff.high) == pytest.approx((1.0, 1.0, 1.0), abs=1e-12)


@pytest.mark.parametrize("confidence", [0.9, 0.95, 1 - 0.05 / 12])
def test_without_bounds_the_interval_is_scipys_t_interval_on_the_differences(confidence):
    rng = _rng(1)
    a = rng.normal(0.0, 5.0, size=23)  # the episode's difficulty, shared by both checkpoints
    b = a + 0.5 + rng.normal(0.0, 1.0, size=23)
    result = stats.paired(a, b, confidence=confidence)
    ci = ttest_1samp(b - a, 0.0).confidence_interval(confidence)
    assert (result.diff.low, result.diff.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert result.diff.value == pytest.approx(np.mean(b - a)) and result.method == "t"
    assert result == stats.paired(a, b, confidence=confidence)  # deterministic: nothing is drawn


def test_with_bounds_the_interval_is_the_betting_sequence_after_the_n_pairs():
    rng = _rng(2)
    a = rng.uniform(0, 50, 60)
    b = np.clip(a + 40 + rng.normal(0, 5, 60), 0, 100)
    result = stats.paired(a, b, confidence=0.99, bounds=(0, 100))
    seq = stats.SequentialPaired(0.99, (0, 100)).update(a, b)
    assert (result.diff.low, result.diff.high, result.method) == (seq.low, seq.high, "betting")
    assert result.diff.value == pytest.approx(seq.diff) and result.verdict == seq.verdict == "better"
    with pytest.raises(ValueError, match=r"episode 3 of B returned 101\.0, outside the declared bounds"):
        stats.paired([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 101.0], bounds=(0, 100))


def test_one_pair_gives_no_interval_and_no_verdict():
    result = stats.paired([3.0], [5.0])
    assert (result.diff.low, result.diff.high, result.verdict) == (-math.inf, math.inf, "inconclusive")
    assert math.isnan(result.pairing_gain) and result.b_wins == 1.0


def test_the_equivalent_verdict_needs_the_whole_interval_inside_the_margin():
    rng = _rng(3)
    a = rng.normal(100, 20, 200)
    b = a + rng.normal(0, 1, 200)
    assert stats.paired(a, b, margin=1.0).verdict == "equivalent"
    assert stats.paired(a, b, margin=0.05).verdict == "inconclusive"  # narrower than the interval
    assert stats.paired(a, b + 5, margin=1.0).verdict == "better"  # better and worse take precedence


def test_pairing_beats_the_unpaired_intervals_under_common_random_numbers():
    rng = _rng(2)
    a = rng.normal(0.0, 5.0, size=200)
    b = a + 0.5 + rng.normal(0.0, 0.5, size=200)
    result = stats.paired(a, b)
    one_width = stats.mean_ci(a)
    assert result.diff.high - result.diff.low < 0.2 * (one_width.high - one_width.low)
    assert result.diff.low > 0  # the shift is resolved; each mean's own interval is ten times wider than it
    assert result.pairing_gain == pytest.approx((np.var(a, ddof=1) + np.var(b, ddof=1)) / np.var(b - a, ddof=1))
    assert result.pairing_gain > 50


def test_share_b_ahead_counts_ties_as_half_by_hand():
    result = stats.paired([0, 0, 0, 0], [1, 0, -1, 1])  # win, tie, loss, win
    assert result.b_wins == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    same = stats.paired(np.arange(5.0), np.arange(5.0))
    assert (same.b_wins, same.diff, same.verdict) == (0.5, Interval(0.0, 0.0, 0.0), "inconclusive")


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
    with pytest.raises(ValueError, match=r"^confidence must be in \(0, 1\)"):
        stats.paired([1.0, 2.0], [2.0, 3.0], confidence=1.0)


@PROPS
@given(a=values)
def test_paired_with_itself_is_no_difference(a):
    result = stats.paired(a, a)
    assert result.diff == Interval(0.0, 0.0, 0.0) or len(a) == 1
    assert result.b_wins == 0.5 and result.verdict == "inconclusive"


@PROPS
@given(
    pairs=st.lists(st.tuples(values.map(lambda v: v[0]), values.map(lambda v: v[0])), min_size=1, max_size=25),
    bounded=st.booleans(),
)
def test_swapping_a_and_b_negates_the_difference_and_complements_share_b_ahead(pairs, bounded):
    a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    bounds = (-1e3, 1e3) if bounded else None
    ab, ba = stats.paired(a, b, bounds=bounds), stats.paired(b, a, bounds=bounds)
    assert (ba.diff.value, ba.diff.low, ba.diff.high) == pytest.approx(
        (-ab.diff.value, -ab.diff.high, -ab.diff.low), abs=1e-6 if bounded else 1e-9
    )
    assert ba.b_wins == pytest.approx(1 - ab.b_wins, abs=1e-12)
    assert {ab.verdict, ba.verdict} in ({"inconclusive"}, {"better", "worse"})
    assert ab.diff.low <= ab.diff.high and 0.0 <= ab.b_wins <= 1.0
    assert (ab.pairing_gain == ba.pairing_gain) or (math.isnan(ab.pairing_gain) and math.isnan(ba.pairing_gain))


# ------------------------------------------------- the family and its aggregate row


def test_family_confidence_is_bonferronis_share():
    assert stats.family_confidence(0.05, 1) == pytest.approx(0.95)
    assert stats.family_confidence(0.05, 20) == pytest.approx(1 - 0.0025)
    assert stats.family_confidence(0.1, 4) == pytest.approx(0.975)
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\)"):
        stats.family_confidence(1.5, 3)
    with pytest.raises(ValueError, match=r"a family has at least one row"):
        stats.family_confidence(0.05, 0)


def test_bonferroni_holds_the_family_wise_error_over_many_cells():
    # 30 cells, no difference anywhere, 12 normal episodes each, 400 suites: a false verdict anywhere in at most
    # 5% of the suites (plus two Monte Carlo errors); uncorrected 95% intervals would err in most suites.
    rng = _rng(30)
    reps, cells, n = 400, 30, 12
    d = rng.normal(0, 1, size=(reps, cells, n))
    confidence = stats.family_confidence(0.05, cells)
    from scipy.stats import t as student

    half = student.ppf(1 - (1 - confidence) / 2, n - 1) * d.std(axis=2, ddof=1) / math.sqrt(n)
    mean = d.mean(axis=2)
    wrong = np.any((mean - half > 0) | (mean + half < 0), axis=1)
    assert wrong.mean() <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps)
    one = stats.paired(np.zeros(n), d[0, 0], confidence=confidence).diff  # the vectorised interval is paired()'s
    assert (one.low, one.high) == pytest.approx((mean[0, 0] - half[0, 0], mean[0, 0] + half[0, 0]), rel=1e-12)
    loose = student.ppf(0.975, n - 1) * d.std(axis=2, ddof=1) / math.sqrt(n)
    assert np.any((mean - loose > 0) | (mean + loose < 0), axis=1).mean() > 0.5


def test_mean_of_intervals_averages_the_scaled_ends():
    got = stats.mean_of_intervals([Interval(10.0, 5.0, 15.0), Interval(-2.0, -3.0, 1.0)], [10.0, 2.0])
    assert (got.value, got.low, got.high) == pytest.approx(((1.0 - 1.0) / 2, (0.5 - 1.5) / 2, (1.5 + 0.5) / 2))
    open_ended = stats.mean_of_intervals([Interval(1.0, -math.inf, math.inf), Interval(1.0, 0.5, 1.5)], [1.0, 1.0])
    assert (open_ended.low, open_ended.high) == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="one scale per interval"):
        stats.mean_of_intervals([Interval(1.0, 0.0, 2.0)], [1.0, 2.0])
    with pytest.raises(ValueError, match="scales must be finite and positive"):
        stats.mean_of_intervals([Interval(1.0, 0.0, 2.0)], [0.0])


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
    x = scores_a["t0"]
    taus = np.linspace(0.0, 1.0, 5)

    def everything():
        return (
            stats.mean_ci(x, n_resamples=300),
            stats.aggregate(scores_a, n_resamples=300),
            stats.aggregate_difference(scores_a, scores_b, n_resamples=300),
            [p.tolist() for p in _profile_arrays(stats.performance_profile_ci(scores_a, taus, n_resamples=300))],
        )

    one_chunk = everything()
    monkeypatch.setattr(stats._bootstrap, "_CHUNK_ELEMENTS", chunk)
    assert everything() == one_chunk


# ------------------------------------------------- the audit's findings (issue 46)


@pytest.mark.parametrize(
    ("a", "b"), [([-1e308] * 3, [1e308] * 3), ([1e300, -1e300, 0.0], [0.0, 1e300, -1e300]), ([0.0] * 3, [1e300] * 3)]
)
def test_values_whose_differences_overflow_are_one_line_errors_not_infinite_intervals(a, b):
    """paired([-1e308]*3, [1e308]*3) was Interval(inf, nan, nan) and 1e300s gave (-inf, inf): now refused."""
    with pytest.raises(ValueError, match=r"^[ab] .*magnitude") as caught:
        stats.paired(a, b)
    assert "\n" not in str(caught.value)


def test_no_verdict_below_the_minimum_n_nor_from_zero_variance_unless_deterministic():
    """Two pairs of identical differences were `better` at any confidence."""
    tiny = stats.paired([0, 0], [1e-9, 1e-9], confidence=0.999999)
    assert (tiny.verdict, tiny.reason) == ("inconclusive", stats.FEW_PAIRS)
    assert stats.MIN_N <= 4  # the shipped demo decides at 4 episodes
    constant = stats.paired([0] * 6, [1e-9] * 6)
    assert (constant.verdict, constant.reason) == ("inconclusive", stats.ZERO_VARIANCE)
    assert constant.diff == Interval(1e-9, 1e-9, 1e-9)  # the interval is still the method's
    declared = stats.paired([0] * 6, [1e-9] * 6, deterministic=True)
    assert (declared.verdict, declared.reason) == ("better", "")
    at_min = stats.paired([0.0, 0.1, 0.0, 0.2], [5.0, 5.2, 5.1, 5.0])
    assert (at_min.n, at_min.verdict, at_min.reason) == (stats.MIN_N, "better", "")


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: stats.paired([1, 2], [2, 3], margin=-1), r"^margin must be a finite number >= 0"),
        (lambda: stats.paired([1, 2], [2, 3], margin=math.nan), r"^margin must be a finite number >= 0"),
        (lambda: stats.SequentialPaired(margin=-1), r"^margin must be a finite number >= 0"),
        (lambda: stats.family_confidence(0.05, 2.5), r"^rows must be an integer >= 1"),
        (lambda: stats.family_confidence(0.05, 0), r"^rows must be an integer >= 1"),
        (lambda: stats.SequentialPaired().update([[1.0, 2.0]], [[1.0, 2.0]]), r"^the comparison: A .*1-D"),
        (lambda: stats.SequentialMean().update([[1.0, 2.0]]), r"^the evaluation: .*1-D"),
    ],
)
def test_input_checks_are_the_same_everywhere(call, pattern):
    """paired accepted margin=-1 and NaN (SequentialPaired refused), family_confidence(0.05, 2.5) returned 0.98,
    SequentialPaired.update flattened 2-D input (paired refused)."""
    with pytest.raises(ValueError, match=pattern) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_a_fall_observed_withholds_the_t_verdict_but_not_the_bounded_one():
    """Skewed differences without bounds gave false verdicts silently: with a fall in the data, the t verdict
    is withheld (`skewed: declare bounds`); the betting interval under declared bounds keeps its verdict."""
    rng = np.random.default_rng(3)
    # The cell: A returns ~3000 and falls to ~200 one episode in ten, B never falls (equal means); here
    # one fall in 40 episodes, so the t-interval alone would call B worse.
    a, b = 3000.0 + rng.normal(0, 50, 40), 2720.0 + rng.normal(0, 50, 40)
    a[7] = 200.0
    old = stats.paired(a, b)
    assert old.method == "t" and old.diff.high < 0  # the t interval alone would call B worse
    assert (old.verdict, old.reason) == ("inconclusive", stats.SKEWED)
    bounded = stats.paired(a, b, bounds=(0.0, 4000.0))
    assert bounded.reason == "" and bounded.verdict == stats.verdict_of(bounded.diff.low, bounded.diff.high)
    rng = np.random.default_rng(4)
    normal = [stats.paired(np.zeros(20), rng.normal(1.0, 1.0, 20)) for _ in range(200)]
    assert sum(p.reason == stats.SKEWED for p in normal) <= 4  # normal data: the guard almost never fires
