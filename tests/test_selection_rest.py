"""Resting arms: an arm shown within the margin of the leader plays no look until the leader changes, then first
plays the looks it missed on their seeds (``SequentialSelection.catch_up``; ``--select-best``'s strategy queues them).

The library's selection on drawn values, and the strategy driven round by round without a launcher (the launcher's
runs are tests/test_select_best.py; kill and resume, tests/test_strategies.py).
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest

from simeval.stats import SequentialSelection
from simeval.strategies.selection import SelectionPlan, SelectionStrategy

pytestmark = pytest.mark.required


def _values(rng: np.random.Generator, means: list[float], n: int) -> np.ndarray:
    return np.asarray(means) + rng.normal(0.0, 3.0, (n, 1)) + rng.normal(0.0, 1.0, (n, len(means)))


def test_an_arm_settled_within_the_margin_rests_and_its_interval_stays():
    rng = np.random.default_rng(1)
    sel = SequentialSelection(3, 0.95, margin=1.0, max_arms=3, plan_n=8)
    while not sel.resting:
        sel.update(_values(rng, [10.0, 10.1, 9.3], 4))  # arm 2: within the margin, once shown so
    assert sel.resting == (2,) and sel.active == (0, 1)
    gap, played = sel.gap(2, 0), sel.looks_played(2)
    for _ in range(3):
        if sel.done or 2 in sel.active:
            break
        x = _values(rng, [10.0, 10.1, 9.3], 4)
        x[:, 2] = np.nan  # not read: it rests
        sel.update(x)
        assert sel.gap(2, 0) == gap and sel.looks_played(2) == played
    assert sel.episodes(2) < sel.n


def test_without_rest_every_alive_arm_plays_every_look():
    rng = np.random.default_rng(1)
    sel = SequentialSelection(3, 0.95, margin=1.0, max_arms=3, plan_n=8, rest=False)
    for _ in range(12):
        if sel.done:
            break
        sel.update(_values(rng, [10.0, 10.1, 9.3], 4))
        assert sel.active in ((), sel.alive) and not sel.resting


def test_a_caught_up_pair_has_the_interval_of_arms_that_never_rested():
    # The same values to a selection whose arms rest and to one whose arms all play: once a resting arm caught up,
    # each of its pairs took the same differences look by look, so its interval is the same.
    rng = np.random.default_rng(3)
    x = _values(rng, [10.0, 10.0, 9.5], 200)
    rest = SequentialSelection(3, 0.95, margin=0.6, max_arms=3, plan_n=8)
    full = SequentialSelection(3, 0.95, margin=0.6, max_arms=3, plan_n=8, rest=False)
    caught = 0
    for look in range(50):
        rows = x[4 * look : 4 * look + 4]
        for arm in rest.active:
            if rest.behind(arm):
                rest.catch_up(arm, x[4 * rest.looks_played(arm) : 4 * look, arm])
                caught += 1
                for other in rest.alive:
                    if other != arm and rest.looks_played(other) == look and not full.eliminated:
                        assert rest.gap(arm, other) == pytest.approx(full.gap(arm, other), rel=1e-12)
        if rest.done or full.done:
            break
        rest.update(rows)
        full.update(rows)
    assert caught, "no arm rested and played again: pick data where the leader changes"


def test_the_next_look_before_a_catch_up_is_a_one_line_error():
    rng = np.random.default_rng(3)
    x = _values(rng, [10.0, 10.0, 9.5], 200)
    sel = SequentialSelection(3, 0.95, margin=0.6, max_arms=3, plan_n=8)
    for look in range(50):
        late = [a for a in sel.active if sel.behind(a)]
        if late:
            with pytest.raises(ValueError, match=f"arm {late[0]} rested and plays again") as err:
                sel.update(x[4 * look : 4 * look + 4])
            assert "\n" not in str(err.value)
            with pytest.raises(ValueError, match="one value per episode arm"):
                sel.catch_up(late[0], [1.0])
            return
        sel.update(x[4 * look : 4 * look + 4])
    pytest.fail("no arm rested and played again")


# ------------------------------------------------------------------------------ the strategy, round by round


def _round(means: list[float], seed: int, arm: int, look_seed: int) -> dict:
    """One round's result: 4 episodes on ``look_seed``'s seeds, each the arm's mean plus what the episode's seed makes
    common to every arm plus the arm's own noise on it (a function of the arm and the seed alone), in an order of the
    arm's own."""
    seeds = [look_seed * 100 + k for k in range(4)]
    rounds = [
        (s, means[arm] + np.random.default_rng(s).normal(0.0, 3.0) + np.random.default_rng((seed, arm, s)).normal())
        for s in seeds
    ]
    random.Random(seed * 1000 + arm).shuffle(rounds)
    return {"episode_returns": [float(v) for _, v in rounds], "episode_seeds": [s for s, _ in rounds]}


def _drive(
    means: list[float], seed: int, lines: list[dict] | None = None, stop_after: int | None = None
) -> tuple[SelectionStrategy, list[dict], list[tuple[int, int, int]]]:
    """Run ``--select-best``'s strategy round by round, as the scheduler would: jobs proposed, results observed,
    lines written; after replaying ``lines`` (a resume) when given, and stopping after ``stop_after`` new rounds (a
    kill). Returns the strategy, every line, and each round played as (arm, its look, the look being played then)."""
    plan = SelectionPlan(4, 200, margin=1.0, max_arms=len(means), seed=7)
    strategy = SelectionStrategy(plan, lambda look, seed, c: types.SimpleNamespace(key=("cell", look)))
    lines = list(lines or [])
    if lines:
        strategy.replay({"": lines})
    queue, played = [], []
    for i in range(len(means)):
        queue += strategy.jobs_for(types.SimpleNamespace(step=i), f"arm{i}")
    while queue and (stop_after is None or len(played) < stop_after):
        job = queue.pop(0)
        arm = job.owner[0]
        result = _round(means, seed, arm.index, job.seed)
        played.append((arm.index, job.look, strategy.look))
        step = strategy.observe(job, result)
        assert not step.failures, step.failures
        lines += [
            {"status": "ok", "checkpoint_name": job.name, "step": arm.step, **result, **w.fields} for w in step.writes
        ]
        queue += strategy.propose()
    return strategy, lines, played


def test_the_strategy_plays_a_resting_arms_missed_looks_and_its_replay_is_the_run():
    strategy, lines, played = _drive([10.0, 10.1, 9.6, 7.0], 16)
    assert strategy.stop == "within margin"
    missed = [(arm, look, now) for arm, look, now in played if look < now]
    assert missed, "no arm rested and played again: pick another seed"
    rounds = {}
    for arm, look, _ in played:  # every round once: a resting arm's missed looks are played once, late
        rounds[arm, look] = rounds.get((arm, look), 0) + 1
    assert set(rounds.values()) == {1}
    rested = [r for r in strategy.rows() if "rested after look" in r["outcome"]]
    assert rested, "no arm rested to the stop: pick another seed"
    for r in rested:  # said where its episodes fall short of the leader's
        look = int(r["outcome"].rsplit(" ", 1)[1].rstrip(")"))
        assert r["episodes"] == 4 * (look + 1) < max(row["episodes"] for row in strategy.rows())
    again = SelectionStrategy(strategy.plan, strategy.cell_at)
    again.replay({"": lines})
    assert again.table() == strategy.table()
    assert again.result_line() == strategy.result_line()


def test_a_run_killed_at_any_round_and_resumed_ends_as_the_uninterrupted_run():
    # Killed after each round in turn (resting arms' missed looks among them), replayed from its lines and run on:
    # the same table, the same result, and no round played twice.
    means = [10.0, 10.1, 9.6, 7.0]
    whole, lines, played = _drive(means, 16)
    assert any(look < now for _, look, now in played)
    for cut in range(1, len(played)):
        killed, head, _ = _drive(means, 16, stop_after=cut)
        resumed, _, more = _drive(means, 16, lines=head)
        assert resumed.table() == whole.table(), cut
        assert resumed.result_line() == whole.result_line(), cut
        assert len(head) + len(more) == len(lines), cut
