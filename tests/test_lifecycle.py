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
    actor = ev._backend._slots[0].actor
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


def test_thread_backend_closes_the_env_even_when_shutdown_times_out(no_leaks):
    """shutdown(timeout) returns while a slow step runs; the worker thread closes the env when it ends."""
    from helpers import BUILT

    BUILT.pop("env", None)
    ev = Evaluator(
        functools.partial(count_env, lengths=(1000,), step_sleep=1.0),
        policy_factory=const_policy,
        num_trajectories=1,
    )
    ev.trigger_eval()
    deadline = time.time() + 30
    while "env" not in BUILT or BUILT["env"].base_env.total_steps == 0:
        assert time.time() < deadline
        time.sleep(0.05)
    env = BUILT["env"]
    start = time.monotonic()
    ev.shutdown(timeout=0.1)
    assert time.monotonic() - start < 2.0
    deadline = time.time() + 10
    while not env.is_closed and time.time() < deadline:
        time.sleep(0.05)
    assert env.is_closed


def test_shared_memory_blocks_are_really_freed():
    """close() unmaps and unlinks every block (the views must not keep the mapping alive)."""
    import os

    from simeval.backends.shm import SharedStaging

    staging = SharedStaging()
    first = staging.write({"policy": mlp_policy(obs_dim=3, act_dim=2)})["policy"]["name"]
    second = staging.write({"policy": mlp_policy(obs_dim=5, act_dim=2)})["policy"]["name"]  # a new layout
    assert first != second
    assert not os.path.exists(f"/dev/shm/{first}")  # the old block went with its layout
    assert os.path.exists(f"/dev/shm/{second}")
    staging.close()  # raises BufferError if a view still holds the mapping
    assert not os.path.exists(f"/dev/shm/{second}")
    assert staging._blocks == {}
