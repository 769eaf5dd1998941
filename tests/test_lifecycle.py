"""Sections 8-9: concurrency, shutdown, and weights staged in place."""

from __future__ import annotations

import functools
import threading
import time

import pytest
from helpers import const_policy, count_env, mlp_policy

from simeval import EvalError, Evaluator


def _long_env():
    return count_env(lengths=(100_000,))


def _slow_env():
    return count_env(lengths=(600,))


def test_evaluate_during_async_raises_with_busy_policy_error():
    ev = Evaluator(_slow_env, policy_factory=const_policy, num_trajectories=3)
    try:
        ev.trigger_eval(const_policy(w=1.0))
        with pytest.raises(RuntimeError, match="asynchronous evaluation is pending"):
            ev.evaluate(const_policy(w=2.0))
        assert ev.wait(60)["eval/reward"] == 600.0
    finally:
        ev.shutdown()


def test_evaluate_during_async_waits_with_busy_policy_queue(backend):
    ev = Evaluator(_slow_env, policy_factory=const_policy, num_trajectories=2, busy_policy="queue", backend=backend)
    try:
        ev.trigger_eval(const_policy(w=1.0), step=1)
        sync = ev.evaluate(const_policy(w=2.0), step=2)  # waits for the async round, never shares its env
        asynchronous = ev.wait(60)
    finally:
        ev.shutdown()
    assert (asynchronous["eval/step"], asynchronous["eval/reward"]) == (1, 600.0)
    assert (sync["eval/step"], sync["eval/reward"]) == (2, 1200.0)


def test_concurrent_callers_get_results_matching_their_weights():
    ev = Evaluator(count_env, policy_factory=const_policy, num_trajectories=2, busy_policy="queue")
    results = {}

    def call(w):
        results[w] = ev.evaluate(const_policy(w=float(w)))["eval/reward"]

    try:
        threads = [threading.Thread(target=call, args=(w,)) for w in range(1, 6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        ev.shutdown()
    assert results == {w: 3.0 * w for w in range(1, 6)}


@pytest.mark.parametrize("backend", ["thread", "process", "ray"], indirect=True)
def test_shutdown_stops_a_running_evaluation_within_the_timeout(backend, no_leaks):
    ev = Evaluator(_long_env, policy_factory=const_policy, num_trajectories=1, backend=backend)
    ev.trigger_eval(const_policy())
    time.sleep(3.0 if backend != "thread" else 0.5)  # let the round get going
    assert ev.pending
    start = time.monotonic()
    ev.shutdown(timeout=5.0)
    assert time.monotonic() - start < 8.0
    assert not ev.pending
    with pytest.raises(EvalError, match="cancelled"):
        ev.poll()
    with pytest.raises(RuntimeError, match="shut down"):
        ev.trigger_eval()


def test_ray_shutdown_kills_the_actor(ray_cluster):
    ray = ray_cluster
    ev = Evaluator(count_env, policy_factory=const_policy, num_trajectories=1, backend="ray")
    ev.evaluate()
    actor = ev._backend._actor
    ev.shutdown(timeout=5.0)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.describe.remote(), timeout=30)


def test_process_backend_writes_weights_in_place(no_leaks):
    ev = Evaluator(
        count_env,
        policy_factory=functools.partial(mlp_policy, obs_dim=1, act_dim=1),
        num_trajectories=1,
        backend="process",
    )
    try:
        policy = mlp_policy(obs_dim=1, act_dim=1)
        ev.evaluate(policy)
        block = ev._backend._staging._blocks["policy"]
        name, ptr = block[0].name, block[2]["module", "0", "weight"].data_ptr()
        for _ in range(3):
            policy.module[0].weight.data.add_(1.0)
            ev.evaluate(policy)
        block = ev._backend._staging._blocks["policy"]
        assert (block[0].name, block[2]["module", "0", "weight"].data_ptr()) == (name, ptr)
        assert block[2]["module", "0", "weight"].tolist() == policy.module[0].weight.tolist()
    finally:
        ev.shutdown()


def test_on_result_may_trigger_the_next_evaluation_but_not_block_on_one(caplog):
    seen = []
    holder = {}

    def on_result(result):
        seen.append(result["eval/step"].item())
        if len(seen) < 3:
            assert holder["ev"].trigger_eval(step=len(seen)) is True  # chain: allowed
        else:
            holder["ev"].evaluate()  # would wait on this very worker: refused, logged

    ev = holder["ev"] = Evaluator(count_env, policy_factory=const_policy, num_trajectories=1, on_result=on_result)
    try:
        ev.trigger_eval(step=0)
        # Between publishing a result and its on_result triggering the next round the
        # evaluator is idle (wait() may return None then): poll until all three arrive.
        results, deadline = [], time.time() + 120
        while len(results) < 3 and time.time() < deadline:
            result = ev.poll(timeout=0.5)
            if result is not None:
                results.append(result)
        deadline = time.time() + 30
        while len(seen) < 3 and time.time() < deadline:  # the last on_result runs after publishing
            time.sleep(0.05)
    finally:
        ev.shutdown()
    assert [r["eval/step"] for r in results] == [0, 1, 2] == seen
    assert "cannot run inside on_result" in caplog.text
