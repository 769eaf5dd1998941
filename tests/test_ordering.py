"""on_result has returned before its result is handed out; results keep their order; chaining works."""

from __future__ import annotations

import functools
import threading
import time

import pytest
from helpers import const_policy, count_env

from simeval import Evaluator


def _short_env():
    return count_env(lengths=(2,))


class SlowLog:
    """An on_result that takes its time, as a logger uploading to a dashboard does."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.steps: list[int] = []
        self.threads: set[str] = set()

    def __call__(self, td) -> None:
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        self.steps.append(int(td["eval/step"]))


def test_wait_returns_only_after_on_result_ran(backend):
    log = SlowLog(delay=0.05)
    ev = Evaluator(_short_env, policy_factory=const_policy, num_trajectories=1, on_result=log, backend=backend)
    try:
        for step in range(15):
            assert ev.trigger_eval(step=step)
            result = ev.wait(120)
            assert result["eval/step"] == step
            assert log.steps[-1] == step, f"wait() returned step {step} before its on_result ran"
            assert not ev.pending
    finally:
        ev.shutdown()
    assert log.steps == list(range(15))


def test_queued_results_keep_their_order_under_load(backend):
    log = SlowLog(delay=0.03)
    ev = Evaluator(
        _short_env, policy_factory=const_policy, num_trajectories=1, on_result=log, busy_policy="queue", backend=backend
    )
    handed_out = []
    try:
        for step in range(12):
            ev.trigger_eval(const_policy(w=float(step)), step=step)
        deadline = time.time() + 180
        while len(handed_out) < 12 and time.time() < deadline:
            result = ev.poll(timeout=0.2)
            if result is not None:
                assert int(result["eval/step"]) in log.steps  # its on_result has returned
                handed_out.append((int(result["eval/step"]), float(result["eval/reward"])))
    finally:
        ev.shutdown()
    assert handed_out == [(step, 2.0 * step) for step in range(12)]
    assert log.steps == list(range(12))
    assert len(log.threads) == 1  # one callback at a time, always on the same thread


def test_evaluate_result_is_returned_after_its_on_result(backend):
    log = SlowLog(delay=0.05)
    ev = Evaluator(_short_env, policy_factory=const_policy, num_trajectories=1, on_result=log, backend=backend)
    try:
        for step in range(5):
            ev.evaluate(step=step)
            assert log.steps[-1] == step
    finally:
        ev.shutdown()


def test_on_result_may_chain_trigger_eval_and_wait_sees_every_link():
    holder = {}
    seen = []

    def on_result(td):
        seen.append(int(td["eval/step"]))
        if len(seen) < 5:
            assert holder["ev"].trigger_eval(step=len(seen)) is True  # busy_policy="error": idle by now

    ev = holder["ev"] = Evaluator(_short_env, policy_factory=const_policy, num_trajectories=1, on_result=on_result)
    try:
        ev.trigger_eval(step=0)
        results = [ev.wait(60) for _ in range(5)]
        assert ev.wait(1) is None and not ev.pending
    finally:
        ev.shutdown()
    assert [r["eval/step"] for r in results] == [0, 1, 2, 3, 4] == seen


@pytest.mark.parametrize("what", ["evaluate", "wait"])
def test_blocking_calls_inside_on_result_are_refused_not_deadlocked(what, caplog):
    holder = {}

    def on_result(td):
        getattr(holder["ev"], what)()

    ev = holder["ev"] = Evaluator(
        functools.partial(count_env, lengths=(1,)), policy_factory=const_policy, num_trajectories=1, on_result=on_result
    )
    try:
        ev.trigger_eval()
        assert ev.wait(60)["eval/num_episodes"] == 1
    finally:
        ev.shutdown()
    assert f"{what}() cannot run inside on_result" in caplog.text
