"""simeval.stats.failure_map: the adaptive search for the failure region of one or two condition axes.

What a user relies on: a clear pass/fail split is found and the boundary interval holds the true
crossing; a parent's episodes seed its children (none lost, none counted twice, in order); the
error levels of every region the tree could create sum to at most alpha; the map is a function of
the observations (a resumed run rebuilds it); bad inputs are one-line ValueErrors; and a seeded
slice of benchmarks/search_validity.py (the Monte Carlo study of docs/search.md) covers the
crossing while spending fewer episodes than the uniform grid.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import search_validity as study

from simeval.stats import FailureMap, SearchAxis, SequentialMean, UniformGrid

MASS = SearchAxis("mass", 0.5, 3.0, 0.1)  # 32 finest cells
X, Y = SearchAxis("x", 0.0, 1.0, 0.125), SearchAxis("y", 0.0, 1.0, 0.125)  # 8 x 8 finest cells


def drive(m, prob, rng, log=None, parallel=3):
    """Run ``m`` to its end, episodes failing ~ Bernoulli(prob(x)); ``log`` collects every observe call's arguments."""
    names = [a.name for a in m.axes]
    while m.finished is None:
        keys = m.next_regions(parallel)
        assert keys, "an unfinished map must want a round"
        for key in keys:
            b = m.bounds(key)
            x = rng.uniform([b[n][0] for n in names], [b[n][1] for n in names], size=(m.round_episodes, len(names)))
            values = [dict(zip(names, row, strict=True)) for row in x.tolist()]
            failed = (rng.random(len(x)) < prob(x)).tolist()
            if log is not None:
                log.append((key, values, failed))
            m.observe(key, values, failed)
    return m


def step_up(x):
    return np.where(x[:, 0] >= 1.73, 0.9, 0.05)


def step_down(x):
    return np.where(x[:, 0] < 1.73, 0.9, 0.05)


@pytest.mark.parametrize(("prob", "direction"), [(step_up, "increasing"), (step_down, "decreasing")])
def test_a_step_response_is_split_into_pass_and_fail_and_the_boundary_holds_the_crossing(prob, direction):
    m = drive(FailureMap([MASS]), prob, np.random.default_rng(5))
    assert m.finished in ("every region decided", "resolution reached")
    for r in m.regions():
        assert r.klass == ("pass" if r.high < 0.5 else "fail" if r.low >= 0.5 else "uncertain")  # read from the CS
        lo, hi = r.bounds["mass"]
        above = max(0.0, hi - max(lo, 1.73)) / (hi - lo)  # the share of the region at or above the step
        truth = 0.9 * above + 0.05 * (1 - above) if direction == "increasing" else 0.05 * above + 0.9 * (1 - above)
        if r.klass != "uncertain":
            assert r.klass == ("fail" if truth >= 0.5 else "pass"), r  # every decided region is right
        if hi <= 1.5 or lo >= 2.0:
            assert r.klass != "uncertain", r  # far from the crossing every region is decided
    b = m.boundary()
    assert b.found and b.direction == direction
    assert b.low <= 1.73 <= b.high
    finest = 2.5 / 32
    assert b.high - b.low <= 3 * finest + 1e-9  # refined to the resolution on both sides of the crossing
    worst = m.worst()
    assert worst.klass == "fail" and worst.estimate == max(r.estimate for r in m.regions() if r.klass != "pass")
    assert m.as_data()["worst"] == list(worst.key)  # what the printed table's worst region reads


def test_a_round_splits_a_region_and_its_episodes_seed_the_children_in_order():
    axis = SearchAxis("mass", 0.0, 1.0, 0.25)
    m = FailureMap([axis], round_episodes=24, initial_cells=1, split_after=24)
    low_half = [(0.02 * i, i < 6) for i in range(12)]  # in [0, 0.5): fails first, then passes
    high_half = [(0.5 + 0.04 * i, i >= 6) for i in range(12)]  # from the midpoint (it goes above) on
    episodes = [e for pair in zip(low_half, high_half, strict=True) for e in pair]  # interleaved, as seeds run
    values, failed = [{"mass": v} for v, _ in episodes], [f for _, f in episodes]
    m.observe(m.next_regions(1)[0], values, failed)  # 12 of 24 failed: the estimate is P, the root splits
    leaves = {r.key: r for r in m.regions()}
    assert set(leaves) == {(1, 0), (1, 1)}
    alpha = m.alpha_split()[1].alpha_each
    for key, half in (((1, 0), low_half), ((1, 1), high_half)):
        outcomes = [float(f) for _, f in half]
        assert leaves[key].n == len(half) and leaves[key].failures == sum(outcomes)
        in_order = SequentialMean(1 - alpha, bounds=(0, 1)).update(outcomes)
        backwards = SequentialMean(1 - alpha, bounds=(0, 1)).update(outcomes[::-1])
        assert (in_order.low, in_order.high) != (backwards.low, backwards.high)  # the order shows in the interval
        assert (leaves[key].low, leaves[key].high) == (max(0.0, in_order.low), min(1.0, in_order.high))
    # a round that began on the root before it split goes to the leaves that hold its values
    m.observe((0, 0), [{"mass": 0.4}, {"mass": 0.8}], [True, False])
    assert [r.n for r in m.regions()] == [13, 13]
    assert sum(r.failures for r in m.regions()) == sum(failed) + 1


def test_no_episode_is_lost_or_counted_twice_through_every_split():
    log = []
    m = drive(
        FailureMap([SearchAxis("x", 0.0, 1.0, 1 / 16), SearchAxis("y", 0.0, 1.0, 1 / 16)], round_episodes=6),
        lambda x: np.where(x[:, 0] + x[:, 1] > 1.1, 0.9, 0.05),
        np.random.default_rng(2),
        log,
    )
    episodes, failures = sum(len(f) for _, _, f in log), sum(sum(f) for _, _, f in log)
    leaves = m.regions()
    assert sum(r.n for r in leaves) == episodes == m.episodes
    assert sum(r.failures for r in leaves) == failures
    assert any(r.key[0] >= 2 for r in leaves)  # it did split, twice at least
    every = {r.key: r for r in m.regions(include_split=True)}
    for r in every.values():  # a split region's episodes are all in its children (which may have more)
        children = [c for c in every.values() if c.key[0] == r.key[0] + 1 and _inside(c, r)]
        if children and r.key not in {leaf.key for leaf in leaves}:
            assert sum(c.n for c in children) >= r.n
    area = sum((r.bounds["x"][1] - r.bounds["x"][0]) * (r.bounds["y"][1] - r.bounds["y"][0]) for r in leaves)
    assert math.isclose(area, 1.0)  # the leaves tile the square


def _inside(child, parent):
    return all(
        parent.bounds[n][0] <= child.bounds[n][0] and child.bounds[n][1] <= parent.bounds[n][1] for n in child.bounds
    )


@pytest.mark.parametrize(
    "axes",
    [[MASS], [X, Y], [SearchAxis("a", 0, 1, 0.01), SearchAxis("b", 0, 10, 5.0)], [SearchAxis("c", 0, 1, 1.0)]],
    ids=["one axis", "two axes", "two axes of different depths", "no split"],
)
def test_the_alpha_split_sums_to_at_most_alpha_over_every_possible_cell(axes):
    m = FailureMap(axes, confidence=0.9)
    levels = m.alpha_split()
    assert sum(lv.cells * lv.alpha_each for lv in levels) <= 0.1 * (1 + 1e-12)
    assert len(levels) == m.depth + 1
    for lv in levels:
        assert lv.cells == math.prod(lv.per_axis)
        assert all(math.isclose(w, (a.high - a.low) / c) for w, a, c in zip(lv.widths, axes, lv.per_axis, strict=True))
    assert all(
        w <= a.resolution * (1 + 1e-9) for w, a in zip(levels[-1].widths, axes, strict=True)
    )  # the finest at resolution
    if len(levels) > 1:
        assert any(w > a.resolution for w, a in zip(levels[-2].widths, axes, strict=True))  # and no deeper than needed
    grid = UniformGrid(axes, confidence=0.9).alpha_split()
    assert len(grid) == 1 and grid[0].per_axis == levels[-1].per_axis
    assert math.isclose(grid[0].cells * grid[0].alpha_each, 0.1)


def test_the_map_is_a_deterministic_function_of_the_observations():
    log = []
    first = drive(FailureMap([MASS]), step_up, np.random.default_rng(9), log)
    again = FailureMap([MASS])
    for key, values, failed in log:  # a resumed run replays its lines
        again.observe(key, values, failed)
    assert again.as_data() == first.as_data()
    assert json.loads(json.dumps(first.as_data(), allow_nan=False)) == first.as_data()
    other = FailureMap([MASS])
    for key, values, failed in log[:-1] + [(log[-1][0], log[-1][1], [not f for f in log[-1][2]])]:
        other.observe(key, values, failed)
    assert other.as_data() != first.as_data()  # the comparison can tell maps apart


def test_pending_regions_are_not_offered_and_the_least_sampled_come_first():
    m = FailureMap([MASS])
    first = m.next_regions(2)
    assert len(first) == 2 and len(set(first)) == 2
    rest = m.next_regions(10, pending=first)
    assert not set(rest) & set(first) and len(rest) == 2  # four initial cells
    m.observe(first[0], [{"mass": sum(m.bounds(first[0])["mass"]) / 2}] * 8, [False] * 8)
    assert m.next_regions(4)[-1] == first[0]  # the sampled one comes last
    assert m.next_regions(0) == []


def test_a_region_at_the_resolution_samples_to_the_cap_and_stays_uncertain():
    axis = SearchAxis("mass", 0.0, 1.0, 0.25)
    m = drive(
        FailureMap([axis], initial_cells=2, max_region_episodes=12),  # the cap comes before two rounds
        lambda x: np.full(len(x), 0.5),
        np.random.default_rng(1),
    )
    assert m.finished == "resolution reached"
    for r in m.regions():
        assert r.key[0] == m.depth and r.klass == "uncertain" and 12 <= r.n < 12 + m.round_episodes
    assert m.boundary().reason == "no region decided pass"


def test_a_region_at_the_resolution_stops_once_its_interval_at_the_cap_would_still_hold_p():
    axis = SearchAxis("mass", 0.0, 1.0, 0.25)
    cap = 400
    m = drive(FailureMap([axis], initial_cells=2, max_region_episodes=cap), lambda x: np.full(len(x), 0.5),
              np.random.default_rng(1))  # fmt: skip
    assert m.finished == "resolution reached"
    for r in m.regions():
        at_cap = (r.high - r.low) / 2 * math.sqrt(r.n / cap)
        assert r.klass == "uncertain" and 2 * m.round_episodes <= r.n < cap and abs(r.estimate - 0.5) < at_cap, r
    far = drive(FailureMap([axis], initial_cells=2, max_region_episodes=cap), lambda x: np.full(len(x), 0.15),
                np.random.default_rng(1))  # fmt: skip
    assert far.finished == "every region decided" and {r.klass for r in far.regions()} == {"pass"}


def test_a_response_that_is_not_monotone_gets_no_boundary():
    m = drive(
        FailureMap([MASS]), lambda x: np.where((x[:, 0] < 1.0) | (x[:, 0] > 2.4), 0.95, 0.02), np.random.default_rng(4)
    )
    assert not m.boundary().found and m.boundary().reason.startswith("not monotone")
    classes = [r.klass for r in m.regions() if r.klass != "uncertain"]
    assert classes[0] == classes[-1] == "fail" and "pass" in classes


def test_two_axes_find_the_corner_that_fails_with_fewer_episodes_than_the_grid():
    prob = lambda x: np.where(x[:, 0] + x[:, 1] > 1.2, 0.9, 0.05)  # noqa: E731
    m = drive(FailureMap([X, Y]), prob, np.random.default_rng(3))
    g = drive(UniformGrid([X, Y]), prob, np.random.default_rng(3))
    for r in m.regions():
        corner_hi = r.bounds["x"][1] + r.bounds["y"][1]
        corner_lo = r.bounds["x"][0] + r.bounds["y"][0]
        if r.klass == "pass":
            assert corner_lo < 1.2  # some of it passes for sure
        if r.klass == "fail":
            assert corner_hi > 1.2
    assert m.regions()[0].klass == "pass" and m.regions()[-1].klass == "fail"  # (0, 0) and (1, 1)
    assert m.episodes < g.episodes
    with pytest.raises(ValueError, match="one axis"):
        m.boundary()


def _one_line(excinfo, *words):
    text = str(excinfo.value)
    assert "\n" not in text
    for w in words:
        assert w in text, text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("m", 1.0, 1.0, 0.1), ("low must be below high",)),
        (("m", 0.0, 1.0, 0.0), ("resolution",)),
        (("m", 0.0, 1.0, 2.0), ("resolution",)),
        (("m", 0.0, math.inf, 0.1), ("high", "finite")),
        (("m", "0", 1.0, 0.1), ("low",)),
        (("", 0.0, 1.0, 0.1), ("name",)),
    ],
)
def test_a_bad_axis_is_a_one_line_error_naming_the_argument(args, words):
    with pytest.raises(ValueError) as excinfo:
        SearchAxis(*args)
    _one_line(excinfo, *words)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"axes": [X, Y, SearchAxis("z", 0, 1, 0.5)]}, ("one or two",)),
        ({"axes": [X, SearchAxis("x", 0, 2, 0.5)]}, ("distinct",)),
        ({"axes": []}, ("one or two",)),
        ({"failure_rate": 1.0}, ("failure_rate",)),
        ({"confidence": 0}, ("confidence",)),
        ({"round_episodes": 0}, ("round_episodes",)),
        ({"max_region_episodes": 4}, ("max_region_episodes",)),
        ({"initial_cells": 0}, ("initial_cells",)),
        ({"split_after": 0}, ("split_after",)),
        ({"axes": [SearchAxis("fine", 0.0, 1.0, 1e-9)]}, ("resolution", "fine")),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_argument(kwargs, words):
    with pytest.raises(ValueError) as excinfo:
        FailureMap(**{"axes": [MASS], **kwargs})
    _one_line(excinfo, *words)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda m, k: m.observe((7, 0), [{"mass": 1.0}], [True]), ("not a region",)),
        (lambda m, k: m.observe("0:0", [{"mass": 1.0}], [True]), ("not a region",)),
        (lambda m, k: m.observe(k, [{"mass": 2.9}], [True]), ("outside region", "mass")),
        (lambda m, k: m.observe(k, [{"other": 0.6}], [True]), ("no value for 'mass'",)),
        (lambda m, k: m.observe(k, [{"mass": 0.6}], [True, False]), ("1 episodes of values but 2",)),
        (lambda m, k: m.observe(k, [{"mass": math.nan}], [True]), ("finite",)),
        (lambda m, k: m.observe(k, [{"mass": 0.6}], ["yes"]), ("True or False",)),
        (lambda m, k: m.next_regions(-1), ("k must be",)),
        (lambda m, k: m.next_regions(2, pending=[(9, 9)]), ("pending",)),
    ],
)
def test_bad_observations_are_one_line_errors(call, words):
    m = FailureMap([MASS])
    key = (0, 0)  # [0.5, 1.125]
    with pytest.raises(ValueError) as excinfo:
        call(m, key)
    _one_line(excinfo, *words)
    assert m.episodes == 0  # nothing was taken


def test_the_studys_seeded_slice_covers_the_crossing_and_spends_less_than_the_grid():
    row = study.search_row(study.STEP, reps=40, seed=2026, grid_reps=2)
    assert row.found >= 36  # a step this clear gives an interval nearly always
    assert row.covered / row.found >= 0.9  # the target; the theory promises 0.95
    assert row.wrong <= 2  # family-wise error <= 0.05 plus Monte Carlo error (expected 0)
    assert row.resolution == row.reps
    assert np.mean(row.episodes) < 0.5 * np.mean(row.grid_episodes)
