"""The look-by-look strategy's own pieces (:mod:`simeval.strategies.looks`), in process: B's episodes put in A's order
by seed, and a cell's sequence built with what its task declares."""

from __future__ import annotations

import pytest

from simeval.stats.sequential import LookPlan
from simeval.stats.verdicts import ZERO_VARIANCE
from simeval.strategies.looks import CellLooks, in_order_of


def test_b_is_put_in_as_order_by_episode_seed_and_other_episodes_are_refused():
    assert in_order_of([1, 2, 3], [1, 2, 3], [10.0, 20.0, 30.0], "T / c") == [10.0, 20.0, 30.0]
    # the same episodes in another order (a backend that returns them so): B's returns follow A's seeds
    assert in_order_of([1, 2, 3], [3, 1, 2], [30.0, 10.0, 20.0], "T / c") == [10.0, 20.0, 30.0]
    for seeds_a, seeds_b in (([1, 2, 3], [1, 2, 4]), ([1, 1, 2], [1, 2, 1])):  # other seeds; a seed twice
        with pytest.raises(ValueError, match=r"^T / c: A and B ran other episodes"):
            in_order_of(seeds_a, seeds_b, [0.0] * 3, "T / c")
    with pytest.raises(ValueError, match=r"^T / c: a round recorded no episode seeds"):
        in_order_of(None, [1], [0.0], "T / c")


def test_a_cell_declared_deterministic_decides_from_identical_differences_and_undeclared_looks_again():
    plan = LookPlan(rule="until-decided", alpha=0.05, rows=1, look_every=4, max_episodes=16)
    a = [100.0, 110.0, 95.0, 105.0]
    b = [x + 5.0 for x in a]
    declared = CellLooks(None, "T / c", ("T", "c"), plan, deterministic=True)
    declared.take(a, b)
    assert (declared.decide(), declared.seq.verdict) == ("decided", "better")
    plain = CellLooks(None, "T / c", ("T", "c"), plan)
    plain.take(a, b)
    assert (plain.decide(), plain.seq.verdict, plain.seq.reason) == (None, "inconclusive", ZERO_VARIANCE)
